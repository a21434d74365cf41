"""Fixtures the sharing tests share: a real OCI registry for the module, site keys, results."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from containers import local_registry
from tests.conftest import alive, need
from tests.results import train_result


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[local_registry.LocalRegistry]:
    """A real OCI registry (Debian's docker-registry) on a free port of this host, for the module;
    stopped after it, and checked by pid to be gone."""
    need(local_registry.available(), "docker-registry not installed (scripts/setup.sh --test installs it)")
    reg = local_registry.LocalRegistry(tmp_path_factory.mktemp("registry")).start()
    try:
        yield reg
    finally:
        reg.stop()
        assert alive([reg.pid]) == set(), "the registry outlived its tests"


def site_key(folder: Path, principal: str) -> tuple[Path, str]:
    """(private key, allowed-signers line) of a new ed25519 key for `principal`."""
    need(shutil.which("ssh-keygen") is not None, "ssh-keygen (OpenSSH client) not installed")
    key = folder / f"{principal}.key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", str(key)], check=True, timeout=30
    )
    kind, blob = key.with_suffix(".key.pub").read_text().split()[:2]
    return key, f"{principal} {kind} {blob}"


def write_run(folder: Path, run_id: str, *, host: str, fabric: str, model: str, img: float, stack: str) -> Path:
    """A sweep folder holding one training result of `host`, on `fabric`, on stack image `stack`."""
    result = train_result(
        run_id,
        img=img,
        fabric=fabric,
        model=model,
        spec={"nodes": 1, "ranks": 2},
        origin={"host": host, "bundle_commit": "c0ffee"},
        image={"stack_digest": stack},
    )
    (folder / run_id).mkdir(parents=True)
    (folder / run_id / "result.json").write_text(json.dumps(result))
    (folder / run_id / "output.log").write_text("log\n")
    return folder
