"""A real single-host Slurm cluster for tests: slurmctld + slurmd from Debian's
slurm-wlm, configured in a temporary directory (no munge: auth/none and
cred/none; free ports; state, spool, logs and pids in that directory).

    with SlurmCluster(tmp_path) as cluster:
        subprocess.run(["sbatch", ...], env=cluster.env)

The daemons run in the foreground as our children and are stopped on exit,
also when the test fails; jobs still queued are cancelled first.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from containers.host import free_ports
from launch.fleet.emulate import slurm_nodes

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "salloc", "sinfo", "scontrol", "scancel", "squeue")


def available() -> bool:
    return all(shutil.which(tool) for tool in DAEMONS + CLIENTS)


def slurm_conf(
    directory: Path,
    host: str,
    cpus: int,
    ctld_port: int,
    slurmd_port: int,
    nodes: list[tuple[str, str | None]] | None = None,
) -> str:
    """This host's slurm.conf (launch.fleet.emulate.slurm_nodes.slurm_conf, the emulated cluster's
    writer too): one node, this host, unless `nodes` names others ((NodeName, NodeAddr) pairs)."""
    return slurm_nodes.slurm_conf(
        name="fbtest",
        controller=host,
        ctld_port=ctld_port,
        slurmd_port=slurmd_port,
        where=directory,
        spool=f"{directory}/spool",
        tmp=f"{directory}/tmp",
        nodes=nodes or [(host, None)],
        cpus=cpus,
        partition="debug",
    )


class SlurmCluster:
    def __init__(self, directory: Path, start_timeout_s: float = 30):
        self.directory = Path(directory)
        self.start_timeout_s = start_timeout_s
        self.host = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.conf = self.directory / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: list[subprocess.Popen] = []

    def __enter__(self) -> "SlurmCluster":
        for sub in ("state", "spool", "tmp"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(slurm_conf(self.directory, self.host, self.cpus, *free_ports(2)))
        try:
            for daemon in DAEMONS:
                log = open(self.directory / f"{daemon}.stdout", "w")
                self.daemons.append(
                    subprocess.Popen(
                        [daemon, "-D", "-f", str(self.conf)],
                        env=self.env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self.wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def sinfo_state(self) -> str:
        proc = subprocess.run(
            ["sinfo", "--noheader", "--format=%T"], env=self.env, capture_output=True, text=True, timeout=10
        )
        return proc.stdout.strip()

    def wait_idle(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            for daemon in self.daemons:
                if daemon.poll() is not None:
                    raise RuntimeError(f"{daemon.args[0]} exited: {self.logs()}")
            try:
                if self.sinfo_state() == "idle":
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"Slurm node not idle after {self.start_timeout_s} s: {self.logs()}")

    def logs(self, lines: int = 20) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.stdout", "slurmd.stdout"):
            path = self.directory / name
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel leftover jobs, then stop slurmd and slurmctld (ours, by their pids)."""
        if self.daemons and all(d.poll() is None for d in self.daemons):
            subprocess.run(["scancel", "--partition=debug"], env=self.env, capture_output=True, timeout=10)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        self.daemons = []
