"""Hostile inputs: archives, results, site and experiment files made the way an attacker would,
and a canary file that any payload would create if it ever ran."""

import json
import subprocess
from pathlib import Path

import pytest

from bench.stats import summarize
from launch.provenance import archive as archives
from launch.ranks.runspec import RunSpec

RUN_ID = "20260101T000000-torch-ddp-resnet18-n2-abc"


def hostile_result(run_id: str = RUN_ID, **spec_fields) -> dict:
    """A well-formed result (its figures are what its samples give) with the spec fields given."""
    spec = {**RunSpec(image_size=32, batch_size=8, iters=1).as_dict(), **spec_fields}
    samples = [9.0, 10.0, 11.0]
    return {
        "schema_version": 1,
        "run_id": run_id,
        "benchmark": "train",
        "framework": "torch",
        "engine": "ddp",
        "model": "resnet18",
        "world_size": 2,
        "status": "ok",
        "spec": spec,
        "argv": ["torchrun"],
        "env": {},
        "throughput": {"total_img_per_s": 10.0, "ci95_img_per_s": summarize(samples).ci95},
        "samples": {"total_img_per_s": samples},
        "image": None,
    }


def predict_inputs(engine: str) -> dict[str, dict]:
    """A train result and an allreduce result `predict` answers for (2 ranks, 1 Gbit/s, 50 us)."""
    train = hostile_result(engine=engine)
    train.update(
        engine=engine,
        compute_img_per_s=40.0,
        gradient_bytes=40 * 2**20,
        engine_info={"bucket_cap_mb": 25, "fusion_threshold_bytes": 2**26, "cycle_time_ms": "1.0"},
    )
    sizes = [{"bytes": 2**k, "time_us": 100 + 2**k * 8e-3, "busbw_gbit_s": 1.0} for k in range(16, 26)]
    allreduce = {
        "schema_version": 1, "run_id": "20260101T000000-allreduce-n2-abc", "benchmark": "allreduce", "world_size": 2,
        "status": "ok", "backend": "torch", "spec": {"fabric": "ethernet"}, "sizes": sizes, "link_rate_gbit_s": 1.0,
    }  # fmt: skip
    return {"train": train, "allreduce": allreduce}


def write_archive(path: Path, results: list[dict], sign_key: Path | None = None, **extra: bytes) -> Path:
    """An archive with a valid manifest (an attacker can always recompute one)."""
    members = {f"results/{r['run_id']}/result.json": json.dumps(r).encode() for r in results}
    archives.write({**members, **extra}, path, sign_key)
    return path


@pytest.fixture
def canary(tmp_path) -> Path:
    """The file every payload in these tests tries to create."""
    return tmp_path / "canary-pwned"


@pytest.fixture
def script(tmp_path, canary):
    """A payload a hostile file names (an experiment's or an archive's): it leaves the canary wherever it runs."""
    path = tmp_path / "payload.sh"
    path.write_text(f'#!/bin/sh\ntouch {canary}\nexec "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def site_key(tmp_path) -> tuple[Path, Path]:
    """(private key, allowed-signers file) of a site, made the one-command way."""
    key = tmp_path / "site-a.key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "site-a", "-f", str(key)], check=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(
        f"site-a@example.org {(tmp_path / 'site-a.key.pub').read_text().split(' ', 2)[0]} "
        f"{(tmp_path / 'site-a.key.pub').read_text().split()[1]}\n"
    )
    return key, allowed
