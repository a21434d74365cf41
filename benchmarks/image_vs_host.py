"""img/s of the same 2-rank PyTorch run on the host and inside the cpu image.

    .venv/bin/python benchmarks/image_vs_host.py [--rounds 3] [--image IMG.sif]

Alternates host and image runs (a shared 2-core machine drifts); prints the
mean total img/s of each and the ratio image/host. The image defaults to the
newest recorded cpu ethernet Apptainer image (fabric-bench image build).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.record import read_records
from containers import build

TRAIN = [
    "-m",
    "bench.torch_train",
    "--engine",
    "ddp",
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "16",
    "--warmup",
    "2",
    "--iters",
    "5",
    "--batches-per-iter",
    "3",
]


def total_img_per_s(prefix: list[str]) -> float:
    with tempfile.TemporaryDirectory() as work:
        argv = [*prefix, "torchrun", "--standalone", "--nproc-per-node", "2", *TRAIN, "--record-dir", f"{work}/records"]
        subprocess.run(argv, cwd=work, check=True, capture_output=True)
        records = [r for r in read_records(f"{work}/records") if r["kind"] == "train"]  # rank records
        assert len(records) == 2 and all(r["status"] == "ok" for r in records)
        return sum(statistics.mean(r["samples_img_per_s"]) for r in records)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--image", default="")
    args = p.parse_args()
    image = args.image or (build.find("ethernet", "cpu") or {}).get("image")
    if not image:
        print("no cpu ethernet image: run `fabric-bench image build` first", file=sys.stderr)
        return 2
    venv_bin = str(Path(sys.executable).parent)
    host_prefix = ["env", f"PATH={venv_bin}:/usr/bin:/bin"]
    image_prefix = [shutil.which("apptainer") or "apptainer", "exec", "--cleanenv", image]
    host, inside = [], []
    for round_number in range(args.rounds):
        host.append(total_img_per_s(host_prefix))
        inside.append(total_img_per_s(image_prefix))
        print(f"round {round_number + 1}: host {host[-1]:.1f} img/s, image {inside[-1]:.1f} img/s")
    print(
        f"mean: host {statistics.mean(host):.1f} img/s, image {statistics.mean(inside):.1f} img/s, "
        f"ratio image/host {statistics.mean(inside) / statistics.mean(host):.3f} "
        f"({args.rounds} alternating rounds, 2 ranks, resnet18 32x32, batch 16)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
