"""A real OCI registry on localhost: Debian's `docker-registry` (the CNCF distribution
registry) on a free port, its data under a folder of the caller's, stopped by its pid.

Used by the tests and by benchmarks/two_sites.py; a site runs its own (Harbor, GitLab's, a
distribution registry behind TLS) and names it in its site file instead.

    with LocalRegistry(tmp_path) as reg:
        reg.address              # "127.0.0.1:PORT"
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import subprocess
import time
from pathlib import Path

from containers import registry_http
from containers.host import free_ports

BINARY = "docker-registry"


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started the registry dies
    (prctl PR_SET_PDEATHSIG), so a killed test or script leaves no registry behind."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


class RegistryError(Exception):
    """One line: why the registry did not start."""


def available() -> bool:
    return shutil.which(BINARY) is not None


def config(data: Path, port: int) -> str:
    """distribution's YAML config: plain HTTP on 127.0.0.1 only, filesystem storage, deletes on."""
    return (
        "\n".join(
            [
                "version: 0.1",
                "log:",
                "  level: warn",
                "storage:",
                "  filesystem:",
                f"    rootdirectory: {data}",
                "  delete:",
                "    enabled: true",
                "http:",
                f"  addr: 127.0.0.1:{port}",
            ]
        )
        + "\n"
    )


class LocalRegistry:
    def __init__(self, directory: Path, start_timeout_s: float = 20):
        self.directory = Path(directory)
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def start(self) -> "LocalRegistry":
        binary = shutil.which(BINARY)
        if binary is None:
            raise RegistryError(f"{BINARY} not installed (apt-get install docker-registry)")
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "data").mkdir(exist_ok=True)
        (self.port,) = free_ports(1)
        conf = self.directory / "config.yml"
        conf.write_text(config(self.directory / "data", self.port))
        log = (self.directory / "registry.log").open("w")
        self.proc = subprocess.Popen(
            [binary, "serve", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RegistryError(f"{BINARY} exited ({self.proc.returncode}); log: {self.directory}/registry.log")
            try:
                here = registry_http.Origin("http", self.address)
                probe = registry_http.exchange(here, "GET", f"http://{self.address}/v2/", max_bytes=4096, deadline_s=2)
                if probe.status == 200:
                    return self
            except registry_http.RegistryError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RegistryError(f"{BINARY} did not answer on {self.address} in {self.start_timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "LocalRegistry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
