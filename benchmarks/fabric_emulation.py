"""Emulated fabrics: allreduce busbw against the link rate, and the alpha-beta model
against measured training steps (issue 6's figures). Root required.

For each link rate (default 1 and 5 Gbit/s) on a 2-node emulated cluster:
- the allreduce micro-benchmark per backend (8 B .. 64 MiB), busbw / link rate
  at 64 MiB; `-fixed` backends run Open MPI with its own fixed algorithm choice instead
  of the ethernet preset's collective rules (containers.fabrics.ETHERNET), before/after;
- 2-rank DDP training (gloo), its step time against the model fitted from the
  `torch` (gloo) allreduce rows of the same link.
A 1-rank run gives the scaling-efficiency baseline. Results land in --results.
Beside each link rate the physical limit of the same emulated link: TCP goodput
between the same two emulated nodes measured with iperf3 (Debian's `iperf3`;
the row says so when it is not installed), and every backend as a share of it.
Each timed iteration starts with tbf's bucket full, so its first burst (rate x
3 ms) passes unshaped and busbw reads above the rate by burst / iteration time:
the `burst-free` column charges that burst back (time + 3 ms).

    python benchmarks/fabric_emulation.py [--rates 1gbit,5gbit] [--backends mpi,mpi-fixed,torch,horovod,horovod-fixed]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from launch.fleet import emulate
from launch.errors import UsageError
from launch.predict.model import describe, fit, predict_training
from launch.results.result import Result, as_result, field_of
from launch.runs.run import execute_run, prepare
from launch.ranks.runspec import RunSpec

LARGE_BYTES = 64 * 2**20
FIT_MIN_BYTES = 8 * 2**20  # beyond tbf's burst (rate x 3 ms) at the rates measured here
# Open MPI's own fixed decision tree: an environment that steers coll/tuned gets no rules file
FIXED = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}
BACKENDS = {
    "mpi": ("mpi", {}),
    "mpi-fixed": ("mpi", FIXED),
    "torch": ("torch", {}),
    "horovod": ("horovod", {}),
    "horovod-fixed": ("horovod", FIXED),
}


def iperf3_goodput_gbit_s(rate: str, seconds: int = 5) -> float | None:
    """TCP goodput from node 0 to node 1 of a fresh 2-node emulated cluster at `rate` (iperf3)."""
    if shutil.which("iperf3") is None:
        return None
    cluster = emulate.Cluster(f"i{secrets.token_hex(3)}", 2, emulate.parse_rate(rate))
    with emulate.running(cluster):
        server = subprocess.Popen(
            ["ip", "netns", "exec", cluster.node(1), "iperf3", "-s", "-1", "-B", cluster.address(1)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.0)
            client = subprocess.run(
                ["ip", "netns", "exec", cluster.node(0), "iperf3", "-c", cluster.address(1), "-t", str(seconds), "-J"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            server.kill()
            server.wait()
    if client.returncode != 0:
        return None
    return json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def run(spec: RunSpec, results: Path) -> Result:
    result = as_result(execute_run(spec, prepare(spec, results), timeout=900, echo=False))
    if result.status != "ok":
        print(f"  failed: {field_of(result, 'reason')}", flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1gbit,5gbit")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--min-bytes", type=int, default=8, help="smallest allreduce size (the fit needs >= 8 MiB)")
    p.add_argument("--no-training", action="store_true", help="only the allreduce table")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--results", type=Path, default=Path("results/fabric_emulation"))
    args = p.parse_args()
    backends = args.backends.split(",")
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        print(f"error: unknown backends {sorted(unknown)}; choose from {', '.join(BACKENDS)}", file=sys.stderr)
        return 2
    emulated = RunSpec(launcher="emulated", nodes=2, ranks=2)
    comm = dataclasses.replace(
        emulated, benchmark="allreduce", min_bytes=args.min_bytes, max_bytes=LARGE_BYTES, iters=args.iters, warmup=1
    )
    train = dataclasses.replace(
        emulated,
        engine="ddp",
        model=args.model,
        image_size=args.image_size,
        batch_size=args.batch_size,
        iters=5,
        batches_per_iter=2,
        warmup=2,
    )
    busbw_lines, model_lines = [], []
    try:
        baseline = None
        if not args.no_training:
            print("1-rank training baseline ...", flush=True)
            # one thread per rank, as each emulated rank gets (2 threads on a busy 2-core host crawl)
            baseline = run(
                dataclasses.replace(train, launcher="local", nodes=1, ranks=1, extra_env={"OMP_NUM_THREADS": "1"}),
                args.results,
            )
        for rate in args.rates.split(","):
            fits = {}
            goodput = iperf3_goodput_gbit_s(rate)
            link = emulate.parse_rate(rate) / 1e9
            busbw_lines.append(
                f"{rate:>7} {'iperf3 (TCP)':<13} "
                + (
                    f"{goodput:8.3f} Gbit/s  {goodput / link:5.3f} of link"
                    if goodput
                    else "not measured (iperf3 missing)"
                )
            )
            for name in backends:
                backend, env = BACKENDS[name]
                print(f"{rate}: allreduce {name} ...", flush=True)
                result = run(dataclasses.replace(comm, link_rate=rate, backend=backend, extra_env=env), args.results)
                if result.status != "ok":
                    busbw_lines.append(f"{rate:>7} {name:<13} failed")
                    continue
                large = next(r for r in result.sizes if r["bytes"] == LARGE_BYTES)
                fits[name] = model = fit(result.sizes, result.world_size or 0, FIT_MIN_BYTES)
                beside = f"  {large['busbw_gbit_s'] / goodput:5.3f} of iperf3" if goodput else ""
                seconds = large["time_us"] / 1e6
                burst_free = large["busbw_gbit_s"] * seconds / (seconds + field_of(result, "emulation")["burst_s"])
                busbw_lines.append(
                    f"{rate:>7} {name:<13} {large['busbw_gbit_s']:8.3f} Gbit/s  "
                    f"{large['busbw_gbit_s'] / link:5.3f} of link{beside}  "
                    f"burst-free {burst_free / link:5.3f}   fit: alpha "
                    f"{model.alpha_s * 1e6:7.1f} us, {model.bandwidth_gbit_s:6.3f} Gbit/s"
                )
            if args.no_training:
                continue
            print(f"{rate}: ddp training ...", flush=True)
            trained = run(dataclasses.replace(train, link_rate=rate), args.results)
            assert baseline is not None  # run above unless --no-training, which continued before here
            if as_result(trained).ok and "torch" in fits:
                prediction = predict_training(fits["torch"], trained, baseline if as_result(baseline).ok else None)
                model_lines.append(f"{rate:>7} ddp {args.model}: {describe(prediction)}")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\nallreduce busbw at 64 MiB, 2 emulated nodes (busbw = algbw x 2(n-1)/n)")
    print("\n".join(busbw_lines))
    print(
        f"\npredicted (alpha-beta fitted on gloo allreduce rows >= {FIT_MIN_BYTES >> 20} MiB, "
        "no overlap) vs measured DDP step"
    )
    print("\n".join(model_lines) or "  (no training comparison)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
