"""Allreduce micro-benchmark with the nccl-tests definitions, plus point-to-point.

    python -m bench.allreduce --backend mpi|torch|horovod --record-dir DIR

For each message size (doubling from --min-bytes to --max-bytes, float32 sums)
the timing follows nccl-tests: after warm-up operations, a barrier, then
--ops-per-sample allreduces back to back, timed as one (CUDA events on a GPU,
the wall clock on CPUs); a sample is that time over the operations, the slowest
rank's; --iters samples per size. In place (every backend) and out of place
(where the library has it: MPI_Allreduce with two buffers, Horovod's allreduce;
torch.distributed's all_reduce is in place only). Per size: median time per
operation, algbw = bytes / time and busbw = algbw x 2(n-1)/n (what each rank's
link carries, comparable with the link rate), in Gbit/s (nccl-tests prints GB/s:
divide by 8), and an exact check of the reduced values after the timing.
Ping-pong between rank 0 and the last rank gives point-to-point latency (half
the round trip of the smallest message) and bandwidth (largest message).

Large sizes take long on slow links: a size's warm-up and timed iterations are
cut (to >= 3 timed) so that it needs about --max-seconds-per-size.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from typing import Any

from bench import horovod_settings
from bench.gpu_request import gpus_requested, refuse
from bench.progress import Progress
from bench.record import errors_recorded, write_record
from bench.stats import summarize
from bench.train_args import fail
from bench.versions import common_versions, package_version

BACKENDS = ("mpi", "torch", "horovod")
ITEM_BYTES = 4  # float32
P2P_MAX_BYTES = 64 * 2**20


def busbw_factor(ranks: int) -> float:
    """nccl-tests: allreduce bus bandwidth = algbw x 2(n-1)/n."""
    return 2 * (ranks - 1) / ranks


def gbit_s(nbytes: float, seconds: float) -> float:
    return nbytes * 8 / seconds / 1e9 if seconds > 0 else 0.0


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


# -- backends: float32 buffers, in-place allreduce, barrier, ping-pong -------------
# Every backend reduces in place; `allreduce_out` (send -> recv), where the library has one, out of
# place; None where not. `reset` refills the output from the input, untimed, before the value check.
# `elapsed(run)` times `run` (operations back to back) to their completion on the device.


class MPIBackend:
    """mpi4py on numpy buffers: MPI_Allreduce (MPI_IN_PLACE) as the MPI library chooses it."""

    name = "mpi"

    def __init__(self):
        from bench.rendezvous import mpi_comm
        import numpy as np

        self.np = np
        self.comm = mpi_comm()
        from mpi4py import MPI

        self.MPI = MPI
        self.rank, self.size = self.comm.rank, self.comm.size

    def pattern(self, count):  # small integers: float32 sums stay exact
        return (self.np.arange(count) % 7).astype(self.np.float32)

    def buffers(self, pattern):
        return pattern + (self.rank + 1), self.np.empty_like(pattern)

    def reset(self, send, recv):
        recv[:] = send

    def allreduce(self, send, recv):
        self.comm.Allreduce(self.MPI.IN_PLACE, recv, op=self.MPI.SUM)

    def allreduce_out(self, send, recv):
        self.comm.Allreduce(send, recv, op=self.MPI.SUM)

    def sync(self):
        pass  # host buffers: an MPI_Allreduce has completed when it returns

    timing = "wall clock"

    def elapsed(self, run) -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    def max_error(self, recv, pattern):
        n = self.size
        return float(self.np.abs(recv - (n * pattern + n * (n + 1) / 2)).max())

    def barrier(self):
        self.comm.Barrier()

    def slowest(self, values: list[float]) -> list[float]:
        local = self.np.array(values, dtype=self.np.float64)
        out = self.np.empty_like(local)
        self.comm.Allreduce(local, out, op=self.MPI.MAX)
        return out.tolist()

    def send(self, buf, peer):
        self.comm.Send(buf, dest=peer)

    def recv(self, buf, peer):
        self.comm.Recv(buf, source=peer)

    def describe(self) -> dict:
        return {
            "mpi_library": self.MPI.Get_library_version().splitlines()[0].strip(),
            "mpi4py": package_version("mpi4py"),
            "numpy": self.np.__version__,
            "timing": self.timing,
        }

    def shutdown(self):
        pass


class TorchBackend:
    """torch.distributed: gloo on CPU, nccl on GPU. all_reduce is in place, so the
    input is copied into the output buffer before each (untimed) iteration."""

    name = "torch"

    def __init__(self):
        import torch
        import torch.distributed as dist

        from bench.rendezvous import discover, export_for_torch
        from bench.torch_device import name_rank_a_host_for_nccl, rank_device

        self.torch, self.dist = torch, dist
        peers = discover()
        export_for_torch(peers)
        name_rank_a_host_for_nccl(peers.rank)  # ranks sharing one GPU on purpose (the GPU check)
        self.device = rank_device(peers.local_rank)
        self.cuda = self.device.type == "cuda"
        self.process_group_backend = "nccl" if self.cuda else "gloo"
        dist.init_process_group(self.process_group_backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def pattern(self, count):
        return (self.torch.arange(count, device=self.device) % 7).float()

    def device_bytes_free(self) -> tuple[int, int] | None:
        """(free bytes on this rank's GPU, ranks sharing it); None on the CPU."""
        if not self.cuda:
            return None
        import os

        free, _ = self.torch.cuda.mem_get_info(self.device)
        local = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1)
        return int(free), max(1, -(-local // max(1, self.torch.cuda.device_count())))

    def buffers(self, pattern):
        return pattern + (self.rank + 1), self.torch.empty_like(pattern)

    def reset(self, send, recv):
        recv.copy_(send)
        self.sync()

    def allreduce(self, send, recv):
        self.dist.all_reduce(recv)  # on a GPU: queued on NCCL's stream; elapsed() waits for the end

    allreduce_out = None  # torch.distributed has no out-of-place allreduce (a copy first would be timed too)

    @property
    def timing(self) -> str:
        return "cuda events" if self.cuda else "wall clock"

    def elapsed(self, run) -> float:
        """Seconds `run` took to complete: CUDA events around it on a GPU (the operations queue back
        to back, as nccl-tests times them), the wall clock on the CPU (gloo's operations block)."""
        if not self.cuda:
            start = time.perf_counter()
            run()
            return time.perf_counter() - start
        begin, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        run()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def max_error(self, recv, pattern):
        n = self.size
        return float((recv - (n * pattern + n * (n + 1) / 2)).abs().max())

    def barrier(self):
        self.dist.barrier()

    def slowest(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.cpu().tolist()

    def send(self, buf, peer):
        self.dist.send(buf, peer)
        self.sync()

    def recv(self, buf, peer):
        self.dist.recv(buf, peer)
        self.sync()

    def describe(self) -> dict:
        return {"process_group": self.process_group_backend, "torch": self.torch.__version__, "timing": self.timing}

    def shutdown(self):
        self.dist.destroy_process_group()


class HorovodBackend(TorchBackend):
    """horovod.torch allreduce_ (in place; MPI or gloo CPU operations, NCCL on GPU), waited
    for as bench.horovod_settings.wait says. Horovod has no point-to-point operations: no
    ping-pong."""

    name = "horovod"

    def __init__(self):
        import horovod.torch as hvd
        import torch

        from bench.torch_device import rank_device

        self.torch, self.hvd = torch, hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        self.device = rank_device(hvd.local_rank())
        self.cuda = self.device.type == "cuda"

    def allreduce(self, send, recv):
        # each operation waited for: Horovod names an operation, and one name cannot be in flight twice
        horovod_settings.wait(self.hvd, self.hvd.allreduce_async_(recv, op=self.hvd.Sum, name="allreduce"))

    def allreduce_out(self, send, recv):
        horovod_settings.wait(self.hvd, self.hvd.allreduce_async(send, op=self.hvd.Sum, name="allreduce_out"))

    def barrier(self):
        self.hvd.allreduce(self.torch.zeros(1), name="barrier")

    def slowest(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        return self.hvd.allreduce(t, op=self.hvd.Max, name="slowest").tolist()

    send = recv = None  # type: ignore[assignment]  # Horovod has no point-to-point

    def describe(self) -> dict:
        hvd = self.hvd
        return {
            "horovod": package_version("horovod"),
            "torch": self.torch.__version__,
            "controller": "mpi" if hvd.mpi_enabled() else "gloo",
            "cpu_operations": "mpi" if hvd.mpi_enabled() else "gloo",
            "nccl_built": bool(hvd.nccl_built()),
            "wait": "poll" if horovod_settings.polls() else "synchronize",
            "timing": self.timing,
        }

    def shutdown(self):
        self.hvd.shutdown()


BACKEND_CLASSES = {"mpi": MPIBackend, "torch": TorchBackend, "horovod": HorovodBackend}


# -- measuring ------------------------------------------------------------------


def timed(backend, step, reset, warmup: int, iters: int, budget_s: float, beat=lambda: None) -> list[float]:
    """Seconds of each timed iteration (slowest rank), after a warm-up; both cut to the budget.
    `beat` (bench.progress) is called before every operation, warm-up included."""

    def once() -> float:
        beat()
        reset()
        backend.barrier()
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    first = backend.slowest([once()])[0]  # every rank derives the same counts from it
    per_iter = max(first, 1e-9)
    for _ in range(min(max(warmup - 1, 0), int(0.25 * budget_s / per_iter))):
        once()
    n = max(3, min(iters, int(budget_s / per_iter)))
    return backend.slowest([once() for _ in range(n)])


BUFFERS_PER_SIZE = 4  # the check pattern, send and receive buffers, and room for the library's own
MEMORY_SHARE = 0.8  # of the device memory free when the sweep starts


def largest_fitting(max_bytes: int, free_bytes: int, sharing: int) -> int:
    """The largest message the sweep may use on a device with `free_bytes` free, shared by
    `sharing` ranks, each holding BUFFERS_PER_SIZE buffers of that size."""
    return min(max_bytes, int(MEMORY_SHARE * free_bytes / max(1, sharing)) // BUFFERS_PER_SIZE)


def sweep_top(backend, max_bytes: int) -> tuple[int, dict]:
    """--max-bytes cut to what every rank's device memory holds (the same cut on every rank: the
    smallest), and how it was decided; host buffers are not cut."""
    fits = getattr(backend, "device_bytes_free", lambda: None)()
    if fits is None:
        return max_bytes, {"asked_max_bytes": max_bytes, "max_bytes": max_bytes, "bounded_by": None}
    free, sharing = fits
    own = largest_fitting(max_bytes, free, sharing)
    top = int(-backend.slowest([-float(own)])[0])  # the smallest across ranks
    return top, {
        "asked_max_bytes": max_bytes,
        "max_bytes": top,
        "bounded_by": "device memory" if top < max_bytes else None,
        "device_free_bytes": free,
        "ranks_per_device": sharing,
    }


def back_to_back(
    backend, step, warmup: int, iters: int, ops: int, budget_s: float, beat=lambda: None
) -> tuple[list[float], int]:
    """nccl-tests' timing: warm-up operations, then `iters` samples of `ops` operations back to
    back, each sample behind a barrier and timed whole (backend.elapsed: CUDA events on a GPU);
    a sample is its time over `ops`, the slowest rank's. Counts are cut to the budget from a
    first single operation every rank agrees on. Returns (seconds per operation per sample, ops)."""

    def sample(n: int) -> float:
        beat()
        backend.barrier()
        return backend.elapsed(lambda: [step() for _ in range(n)]) / n

    per_op = max(backend.slowest([sample(1)])[0], 1e-9)  # the same on every rank
    for _ in range(min(max(warmup - 1, 0), int(0.25 * budget_s / per_op))):
        step()
    ops = max(1, min(ops, int(0.25 * budget_s / per_op)))
    n = max(3, min(iters, int(budget_s / (per_op * ops))))
    return backend.slowest([sample(ops) for _ in range(n)]), ops


def figures(nbytes: int, samples: list[float], factor: float) -> dict:
    median, summary = statistics.median(samples), summarize(samples)
    algbw = gbit_s(nbytes, median)
    return {
        "time_us": median * 1e6,
        "time_us_mean": summary.mean * 1e6,
        "ci95_us": summary.ci95 * 1e6 if math.isfinite(summary.ci95) else None,
        "n_samples": summary.n,
        "samples_us": [t * 1e6 for t in samples],
        "algbw_gbit_s": algbw,
        "busbw_gbit_s": algbw * factor,
    }


def allreduce_rows(backend, args, beat=lambda: None) -> list[dict]:
    """One row per size: in place (the row's own figures, as before) and `out_of_place` (None where
    the library has no out-of-place allreduce); values checked after the timing, in place."""
    sizes = message_sizes(args.min_bytes, args.max_bytes)
    pattern = backend.pattern(sizes[-1] // ITEM_BYTES)
    send, recv = backend.buffers(pattern)
    factor = busbw_factor(backend.size)
    rows = []
    for nbytes in sizes:
        count = nbytes // ITEM_BYTES
        s, r = send[:count], recv[:count]
        backend.reset(s, r)
        samples, ops = back_to_back(
            backend,
            lambda: backend.allreduce(s, r),
            args.warmup,
            args.iters,
            args.ops_per_sample,
            args.max_seconds_per_size,
            beat,
        )
        out_of_place = None
        if backend.allreduce_out is not None:
            oop, oop_ops = back_to_back(
                backend,
                lambda: backend.allreduce_out(s, r),
                args.warmup,
                args.iters,
                args.ops_per_sample,
                args.max_seconds_per_size,
                beat,
            )
            out_of_place = {**figures(nbytes, oop, factor), "ops_per_sample": oop_ops}
        backend.reset(s, r)  # the check: one operation from known values
        backend.barrier()
        backend.allreduce(s, r)
        backend.sync()
        error = backend.max_error(r, pattern[:count])
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
        if backend.rank == 0 and args.verbose:
            oop_text = (
                f"  out of place {out_of_place['time_us']:12.1f} us busbw {out_of_place['busbw_gbit_s']:7.3f}"
                if out_of_place
                else ""
            )
            print(
                f"[allreduce {backend.name}] {nbytes:>11} B  {row['time_us']:12.1f} us  "
                f"algbw {row['algbw_gbit_s']:7.3f}  busbw {row['busbw_gbit_s']:7.3f} Gbit/s  err {error:g}" + oop_text,
                flush=True,
            )
    return rows


def pingpong_rows(backend, args, beat=lambda: None) -> list[dict]:
    """Half round trips between rank 0 and the last rank, smallest and largest size."""
    if backend.send is None or backend.size < 2:
        return []
    last = backend.size - 1
    largest = min(args.max_bytes, P2P_MAX_BYTES)
    buf = backend.pattern(largest // ITEM_BYTES)
    rows = []
    for nbytes in sorted({args.min_bytes, largest}):
        b = buf[: nbytes // ITEM_BYTES]

        def round_trip():
            if backend.rank == 0:
                backend.send(b, last)
                backend.recv(b, last)
            elif backend.rank == last:
                backend.recv(b, 0)
                backend.send(b, 0)

        samples = timed(
            backend, round_trip, lambda: None, args.warmup, max(args.iters, 20), args.max_seconds_per_size, beat
        )
        one_way = statistics.median(samples) / 2
        rows.append(
            {
                "bytes": nbytes,
                "time_us": one_way * 1e6,
                "bandwidth_gbit_s": gbit_s(nbytes, one_way),
                "n_samples": len(samples),
                "samples_us": [t / 2 * 1e6 for t in samples],
                "peers": [0, last],
            }
        )
        if backend.rank == 0 and args.verbose:
            print(
                f"[p2p {backend.name}] {nbytes:>11} B  {one_way * 1e6:12.1f} us one way  "
                f"{gbit_s(nbytes, one_way):7.3f} Gbit/s",
                flush=True,
            )
    return rows


def sweep_parser(prog: str, description: str, backends: tuple[str, ...], operation: str) -> argparse.ArgumentParser:
    """The arguments of a size-sweeping collective (allreduce; alltoall shares them)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--backend", default="mpi", help=" | ".join(backends))
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=256 * 2**20)
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    p.add_argument("--iters", type=int, default=20, help="timed samples per size (at most)")
    p.add_argument(
        "--ops-per-sample",
        type=int,
        default=20,
        help=f"{operation} back to back in one timed sample (nccl-tests' -n; cut to the budget)",
    )
    p.add_argument("--max-seconds-per-size", type=float, default=5.0)
    p.add_argument("--verbose", action="store_true", help="rank 0 prints a line per size")
    p.add_argument("--record-dir", required=True)
    return p


def validate_sweep(args, backends: tuple[str, ...]) -> argparse.Namespace:
    if args.backend not in backends:
        fail(f"unknown backend {args.backend!r}; choose from {', '.join(backends)}")
    if args.min_bytes < ITEM_BYTES or args.min_bytes % ITEM_BYTES:
        fail(f"--min-bytes must be a multiple of {ITEM_BYTES} (float32), got {args.min_bytes}")
    if args.max_bytes < args.min_bytes:
        fail(f"--max-bytes {args.max_bytes} is below --min-bytes {args.min_bytes}")
    if args.iters < 1 or args.warmup < 0 or args.max_seconds_per_size <= 0 or args.ops_per_sample < 1:
        fail("--iters and --ops-per-sample must be >= 1, --warmup >= 0, --max-seconds-per-size > 0")
    return args


def check_device(args, verb: str = "reduces") -> None:
    """A run that asked for GPUs (bench.gpu_request) works on device buffers, or does not start:
    mpi moves host (numpy) buffers; every other backend is torch's (NCCL on the GPU)."""
    requested = gpus_requested()
    if args.backend == "mpi" and requested:
        refuse(
            f"the run asked for {requested} GPU(s) per node, but --backend mpi {verb} host (numpy) buffers; "
            "use --backend torch (NCCL on device buffers)",
            args.record_dir,
        )
    if args.backend != "mpi":
        from bench.torch_device import on_gpu

        on_gpu(args.record_dir)  # asked for GPUs and torch sees none: one line


def build_parser() -> argparse.ArgumentParser:
    return sweep_parser("python -m bench.allreduce", __doc__.splitlines()[0], BACKENDS, "allreduces")


def validate(args) -> argparse.Namespace:
    return validate_sweep(args, BACKENDS)


def main(argv: list[str] | None = None) -> int:
    args = validate(build_parser().parse_args(argv))
    check_device(args)
    backend: Any = BACKEND_CLASSES[args.backend]()
    with errors_recorded(args.record_dir, backend.rank):
        started = time.time()
        progress = Progress(args.record_dir, backend.rank, backend.size, "allreduce", args.iters)
        args.max_bytes, sweep = sweep_top(backend, args.max_bytes)
        if args.max_bytes < args.min_bytes:
            refuse(
                f"the GPU's free memory holds no message of --min-bytes {args.min_bytes} "
                f"({sweep['device_free_bytes']} bytes free, {sweep['ranks_per_device']} rank(s) on it)",
                args.record_dir,
            )
        rows = allreduce_rows(backend, args, progress.batch_starts)
        progress = progress.next_phase("p2p")
        p2p = pingpong_rows(backend, args, progress.batch_starts)
        correct = all(row["max_abs_error"] == 0 for row in rows)
        write_record(
            args.record_dir,
            backend.rank,
            "allreduce",
            benchmark="allreduce",
            backend=args.backend,
            world_size=backend.size,
            config={k: v for k, v in vars(args).items() if k != "record_dir"},
            sizes=rows,
            p2p=p2p,
            correct=correct,
            seconds=time.time() - started,
            sweep=sweep,
            backend_info=backend.describe(),
            versions=common_versions(),
            status="ok" if correct else "failed",
        )
    backend.shutdown()
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
