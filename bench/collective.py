"""Collective micro-benchmark with the nccl-tests definitions: any collective of bench.collectives
(allreduce, alltoall, broadcast), plus point-to-point where the collective asks for it.

    python -m bench.collective --collective allreduce|alltoall|broadcast --backend mpi|torch|horovod --record-dir DIR

For each message size (doubling from --min-bytes to --max-bytes, float32 buffers; cut to what the
collective moves whole, an alltoall's block per rank) the timing follows nccl-tests: after warm-up
operations, a barrier, then --ops-per-sample operations back to back, timed as one (CUDA events on
a GPU, the wall clock on CPUs); a sample is that time over the operations, the slowest rank's;
--iters samples per size. In place where the library has it, and out of place beside it where the
collective's exchange code has that form. Per size: median time per operation, algbw = bytes /
time and busbw = algbw x the collective's factor (what each rank's link carries, comparable with
the link rate), in Gbit/s (nccl-tests prints GB/s: divide by 8), and an exact check of every
element after the timing. Ping-pong between rank 0 and the last rank gives point-to-point latency
(half the round trip of the smallest message) and bandwidth (largest message).

Large sizes take long on slow links: a size's warm-up and timed iterations are cut (to >= 3
timed) so that it needs about --max-seconds-per-size.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from typing import Callable, Optional

from bench.collectives import COLLECTIVES, ITEM_BYTES, Collective, Exchange, Operation, gbit_s
from bench.gpu_request import gpus_requested, refuse
from bench.progress import Progress
from bench.record import errors_recorded, write_record
from bench.stats import summarize
from bench.train_args import fail
from bench.transports import TRANSPORTS, Transport
from bench.versions import common_versions

P2P_MAX_BYTES = 64 * 2**20
Beat = Callable[[], None]


def no_beat() -> None:
    pass


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


# -- measuring (on a transport: bench.transports) ---------------------------------------


def timed(
    t: Transport, step: Callable[[], object], warmup: int, iters: int, budget_s: float, beat: Beat = no_beat
) -> list[float]:
    """Seconds of each timed iteration (slowest rank), after a warm-up; both cut to the budget.
    `beat` (bench.progress) is called before every operation, warm-up included."""

    def once() -> float:
        beat()
        t.barrier()
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    first = t.slowest([once()])[0]  # every rank derives the same counts from it
    per_iter = max(first, 1e-9)
    for _ in range(min(max(warmup - 1, 0), int(0.25 * budget_s / per_iter))):
        once()
    n = max(3, min(iters, int(budget_s / per_iter)))
    return t.slowest([once() for _ in range(n)])


# a size's send and receive buffers, the values expected and the temporaries they are computed
# through (each the message's size: bench.collectives), and room for the library's own
BUFFERS_PER_SIZE = 6
MEMORY_SHARE = 0.8  # of the device memory free when the sweep starts


def largest_fitting(max_bytes: int, free_bytes: int, sharing: int) -> int:
    """The largest message the sweep may use on a device with `free_bytes` free, shared by
    `sharing` ranks, each holding BUFFERS_PER_SIZE buffers of that size."""
    return min(max_bytes, int(MEMORY_SHARE * free_bytes / max(1, sharing)) // BUFFERS_PER_SIZE)


def sweep_top(t: Transport, max_bytes: int) -> tuple[int, dict]:
    """--max-bytes cut to what every rank's device memory holds (the same cut on every rank: the
    smallest), and how it was decided; host buffers are not cut."""
    fits = t.device_bytes_free()
    if fits is None:
        return max_bytes, {"asked_max_bytes": max_bytes, "max_bytes": max_bytes, "bounded_by": None}
    free, sharing = fits
    own = largest_fitting(max_bytes, free, sharing)
    top = int(-t.slowest([-float(own)])[0])  # the smallest across ranks
    return top, {
        "asked_max_bytes": max_bytes,
        "max_bytes": top,
        "bounded_by": "device memory" if top < max_bytes else None,
        "device_free_bytes": free,
        "ranks_per_device": sharing,
    }


def back_to_back(
    t: Transport, step: Callable[[], object], warmup: int, iters: int, ops: int, budget_s: float, beat: Beat = no_beat
) -> tuple[list[float], int]:
    """nccl-tests' timing: warm-up operations, then `iters` samples of `ops` operations back to
    back, each sample behind a barrier and timed whole (t.elapsed: CUDA events on a GPU); a sample
    is its time over `ops`, the slowest rank's. Counts are cut to the budget from a first single
    operation every rank agrees on. Returns (seconds per operation per sample, ops)."""

    def sample(n: int) -> float:
        beat()
        t.barrier()
        return t.elapsed(lambda: [step() for _ in range(n)]) / n

    per_op = max(t.slowest([sample(1)])[0], 1e-9)  # the same on every rank
    for _ in range(min(max(warmup - 1, 0), int(0.25 * budget_s / per_op))):
        step()
    ops = max(1, min(ops, int(0.25 * budget_s / per_op)))
    n = max(3, min(iters, int(budget_s / (per_op * ops))))
    return t.slowest([sample(ops) for _ in range(n)]), ops


def figures(nbytes: int, samples: list[float], factor: float) -> dict:
    median, summary = statistics.median(samples), summarize(samples)
    algbw = gbit_s(nbytes, median)
    return {
        "time_us": median * 1e6,
        "time_us_mean": summary.mean * 1e6,
        "ci95_us": summary.ci95 * 1e6 if math.isfinite(summary.ci95) else None,
        "n_samples": summary.n,
        "samples_us": [s * 1e6 for s in samples],
        "algbw_gbit_s": algbw,
        "busbw_gbit_s": algbw * factor,
    }


def collective_rows(t: Transport, collective: Collective, args: argparse.Namespace, beat: Beat = no_beat) -> list[dict]:
    """One row per size the collective moves whole: the operation's figures (in place where the
    library has it) and `out_of_place` (None where its exchange code has no such form); every
    element checked after the timing, one operation from the starting state."""
    exchange: Exchange = collective.backends[args.backend]
    factor = collective.busbw_factor(t.size)
    counts = sorted({collective.elements(n, t.size) for n in message_sizes(args.min_bytes, args.max_bytes)} - {0})
    rows: list[dict] = []
    for count in counts:
        nbytes = count * ITEM_BYTES
        send, recv = collective.buffers(t, count)

        def timed_form(operation: Operation) -> tuple[list[float], int]:
            collective.reset(t, send, recv)
            return back_to_back(
                t,
                lambda: operation(t, send, recv),
                args.warmup,
                args.iters,
                args.ops_per_sample,
                args.max_seconds_per_size,
                beat,
            )

        samples, ops = timed_form(exchange.in_place)
        out_of_place: Optional[dict] = None
        if exchange.out_of_place is not None and not args.in_place_only:
            oop, oop_ops = timed_form(exchange.out_of_place)
            out_of_place = {**figures(nbytes, oop, factor), "ops_per_sample": oop_ops}
        collective.reset(t, send, recv)  # the check: one operation from known values
        t.barrier()
        exchange.in_place(t, send, recv)
        t.sync()
        error = t.max_abs_diff(recv, collective.expected(t, count))
        row = {
            "bytes": nbytes,
            "count": count,
            "dtype": "float32",
            **figures(nbytes, samples, factor),
            "ops_per_sample": ops,
            "out_of_place": out_of_place,
            "max_abs_error": error,
        }
        rows.append(row)
        if t.rank == 0 and args.verbose:
            oop_text = (
                f"  out of place {out_of_place['time_us']:12.1f} us busbw {out_of_place['busbw_gbit_s']:7.3f}"
                if out_of_place
                else ""
            )
            print(
                f"[{collective.name} {t.name}] {nbytes:>11} B  {row['time_us']:12.1f} us  "
                f"algbw {row['algbw_gbit_s']:7.3f}  busbw {row['busbw_gbit_s']:7.3f} Gbit/s  err {error:g}" + oop_text,
                flush=True,
            )
    return rows


def pingpong_rows(t: Transport, args: argparse.Namespace, beat: Beat = no_beat) -> list[dict]:
    """Half round trips between rank 0 and the last rank, smallest and largest size."""
    if not t.point_to_point or t.size < 2:
        return []
    last = t.size - 1
    largest = min(args.max_bytes, P2P_MAX_BYTES)
    buf = t.floats(t.index(largest // ITEM_BYTES) % 7)
    rows: list[dict] = []
    for nbytes in sorted({args.min_bytes, largest}):
        b = buf[: nbytes // ITEM_BYTES]

        def round_trip() -> None:
            if t.rank == 0:
                t.send(b, last)
                t.recv(b, last)
            elif t.rank == last:
                t.recv(b, 0)
                t.send(b, 0)

        samples = timed(t, round_trip, args.warmup, max(args.iters, 20), args.max_seconds_per_size, beat)
        one_way = statistics.median(samples) / 2
        rows.append(
            {
                "bytes": nbytes,
                "time_us": one_way * 1e6,
                "bandwidth_gbit_s": gbit_s(nbytes, one_way),
                "n_samples": len(samples),
                "samples_us": [s / 2 * 1e6 for s in samples],
                "peers": [0, last],
            }
        )
        if t.rank == 0 and args.verbose:
            print(
                f"[p2p {t.name}] {nbytes:>11} B  {one_way * 1e6:12.1f} us one way  "
                f"{gbit_s(nbytes, one_way):7.3f} Gbit/s",
                flush=True,
            )
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.collective", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--collective", required=True, help=" | ".join(COLLECTIVES))
    p.add_argument(
        "--backend",
        default="mpi",
        help="; ".join(f"{c.name}: {' | '.join(c.backends)}" for c in COLLECTIVES.values()),
    )
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=256 * 2**20)
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    p.add_argument("--iters", type=int, default=20, help="timed samples per size (at most)")
    p.add_argument(
        "--ops-per-sample",
        type=int,
        default=20,
        help="operations back to back in one timed sample (nccl-tests' -n; cut to the budget)",
    )
    p.add_argument("--max-seconds-per-size", type=float, default=5.0)
    p.add_argument(
        "--in-place-only",
        action="store_true",
        help="time the in-place form only (each row's out_of_place: null): what `fabric-bench locate` reads",
    )
    p.add_argument("--verbose", action="store_true", help="rank 0 prints a line per size")
    p.add_argument("--record-dir", required=True)
    return p


def validate(args: argparse.Namespace) -> Collective:
    """The collective asked for, its arguments checked (one line, exit 2, where they are not)."""
    collective = COLLECTIVES.get(args.collective)
    if collective is None:
        fail(f"unknown collective {args.collective!r}; choose from {', '.join(COLLECTIVES)}")
    if args.backend not in collective.backends:
        fail(f"unknown backend {args.backend!r}; choose from {', '.join(collective.backends)}")
    if args.min_bytes < ITEM_BYTES or args.min_bytes % ITEM_BYTES:
        fail(f"--min-bytes must be a multiple of {ITEM_BYTES} (float32), got {args.min_bytes}")
    if args.max_bytes < args.min_bytes:
        fail(f"--max-bytes {args.max_bytes} is below --min-bytes {args.min_bytes}")
    if args.iters < 1 or args.warmup < 0 or args.max_seconds_per_size <= 0 or args.ops_per_sample < 1:
        fail("--iters and --ops-per-sample must be >= 1, --warmup >= 0, --max-seconds-per-size > 0")
    return collective


def check_device(args: argparse.Namespace) -> None:
    """A run that asked for GPUs (bench.gpu_request) works on device buffers, or does not start (one
    line where torch sees no GPU): torch and horovod move them with NCCL, mpi hands them to MPI
    (bench.transports.MPIDeviceTransport). A CPU run of mpi stays on numpy buffers, without torch."""
    if args.backend != "mpi" or gpus_requested():
        from bench.torch_device import on_gpu

        on_gpu(args.record_dir)  # asked for GPUs and torch sees none: one line


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    collective = validate(args)
    check_device(args)
    t = TRANSPORTS[args.backend]()
    with errors_recorded(args.record_dir, t.rank):
        started = time.time()
        progress = Progress(args.record_dir, t.rank, t.size, collective.name, args.iters)
        args.max_bytes, sweep = sweep_top(t, args.max_bytes)
        if collective.elements(args.max_bytes, t.size) < 1 or args.max_bytes < args.min_bytes:
            refuse(
                f"--max-bytes {args.max_bytes} holds no whole {collective.name} message of float32 "
                f"for {t.size} ranks"
                + (
                    f" ({sweep['device_free_bytes']} bytes free on the GPU, {sweep['ranks_per_device']} rank(s) on it)"
                    if sweep.get("bounded_by")
                    else ""
                ),
                args.record_dir,
            )
        rows = collective_rows(t, collective, args, progress.batch_starts)
        p2p: list[dict] = []
        if collective.point_to_point:
            progress = progress.next_phase("p2p")
            p2p = pingpong_rows(t, args, progress.batch_starts)
        correct = all(row["max_abs_error"] == 0 for row in rows)
        write_record(
            args.record_dir,
            t.rank,
            collective.name,
            benchmark=collective.name,
            backend=args.backend,
            world_size=t.size,
            config={k: v for k, v in vars(args).items() if k != "record_dir"},
            sizes=rows,
            p2p=p2p,
            correct=correct,
            seconds=time.time() - started,
            sweep=sweep,
            backend_info=t.describe(),
            versions=common_versions(),
            status="ok" if correct else "failed",
        )
    t.shutdown()
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
