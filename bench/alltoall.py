"""All-to-all micro-benchmark with the nccl-tests definitions: the exchange of MoE expert
dispatch and tensor-parallel re-layouts, where every rank sends a distinct block to every other.

    python -m bench.alltoall --backend mpi|torch --record-dir DIR

For each message size (doubling from --min-bytes to --max-bytes; a size is the bytes each rank
sends in all, cut to a whole float32 block per rank, as nccl-tests cuts it) the timing is
bench.allreduce's: warm-up operations, a barrier, --ops-per-sample operations back to back timed
as one (CUDA events on a GPU, the wall clock on CPUs), the slowest rank's, --iters samples per
size. Backends: mpi4py's MPI_Alltoall on numpy buffers; torch.distributed's all_to_all_single
(gloo on CPUs, NCCL on GPUs). Per size: median time per operation, algbw = bytes / time and
busbw = algbw x (n-1)/n (nccl-tests' alltoall: each rank's own block stays on the rank), in
Gbit/s, and an exact check of every received block after the timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.allreduce import (
    ITEM_BYTES,
    MPIBackend,
    TorchBackend,
    back_to_back,
    check_device,
    figures,
    message_sizes,
    sweep_parser,
    sweep_top,
    validate_sweep,
)
from bench.gpu_request import refuse
from bench.progress import Progress
from bench.record import errors_recorded, write_record
from bench.versions import common_versions

BACKENDS = ("mpi", "torch")
BLOCK_OFFSET = 8  # rank r's values are (index % 7) + 8 (r + 1): small integers, exact in float32


def busbw_factor(ranks: int) -> float:
    """nccl-tests: alltoall bus bandwidth = algbw x (n-1)/n."""
    return (ranks - 1) / ranks


def block_count(nbytes: int, ranks: int) -> int:
    """Elements each rank sends in all for a size of `nbytes`: a whole number of blocks, one per rank."""
    return nbytes // ITEM_BYTES // ranks * ranks


class MPIAlltoall(MPIBackend):
    """mpi4py on numpy buffers: MPI_Alltoall as the MPI library chooses it."""

    def values(self, count, rank):
        return ((self.np.arange(count) % 7) + BLOCK_OFFSET * (rank + 1)).astype(self.np.float32)

    def received(self, count):
        """What this rank must hold after the exchange: block j is rank j's block for this rank."""
        block = count // self.size
        index = self.np.arange(count)
        sender, offset = index // block, index % block
        return (((self.rank * block + offset) % 7) + BLOCK_OFFSET * (sender + 1)).astype(self.np.float32)

    def empty(self, count):
        return self.np.empty(count, dtype=self.np.float32)

    def exchange(self, send, recv):
        self.comm.Alltoall(send, recv)

    def error(self, recv, expected) -> float:
        return float(self.np.abs(recv - expected).max())


class TorchAlltoall(TorchBackend):
    """torch.distributed.all_to_all_single: gloo on CPUs, NCCL on GPUs (queued on its stream;
    elapsed() waits for the end)."""

    def values(self, count, rank):
        return ((self.torch.arange(count, device=self.device) % 7) + BLOCK_OFFSET * (rank + 1)).float()

    def received(self, count):
        block = count // self.size
        index = self.torch.arange(count, device=self.device)
        sender, offset = index // block, index % block
        return (((self.rank * block + offset) % 7) + BLOCK_OFFSET * (sender + 1)).float()

    def empty(self, count):
        return self.torch.empty(count, dtype=self.torch.float32, device=self.device)

    def exchange(self, send, recv):
        self.dist.all_to_all_single(recv, send)

    def error(self, recv, expected) -> float:
        return float((recv - expected).abs().max())


BACKEND_CLASSES = {"mpi": MPIAlltoall, "torch": TorchAlltoall}


def alltoall_rows(backend, args, beat=lambda: None) -> list[dict]:
    """One row per size with a whole block per rank; values checked after the timing."""
    factor = busbw_factor(backend.size)
    counts = sorted(
        {block_count(nbytes, backend.size) for nbytes in message_sizes(args.min_bytes, args.max_bytes)} - {0}
    )
    if not counts:
        return []
    recv_all = backend.empty(counts[-1])
    rows = []
    for count in counts:
        nbytes = count * ITEM_BYTES
        send, recv = backend.values(count, backend.rank), recv_all[:count]
        samples, ops = back_to_back(
            backend,
            lambda: backend.exchange(send, recv),
            args.warmup,
            args.iters,
            args.ops_per_sample,
            args.max_seconds_per_size,
            beat,
        )
        backend.barrier()  # the check: one operation from known values
        backend.exchange(send, recv)
        backend.sync()
        error = backend.error(recv, backend.received(count))
        row = {
            "bytes": nbytes,
            "count": count,
            "dtype": "float32",
            **figures(nbytes, samples, factor),
            "ops_per_sample": ops,
            "max_abs_error": error,
        }
        rows.append(row)
        if backend.rank == 0 and args.verbose:
            print(
                f"[alltoall {backend.name}] {nbytes:>11} B  {row['time_us']:12.1f} us  "
                f"algbw {row['algbw_gbit_s']:7.3f}  busbw {row['busbw_gbit_s']:7.3f} Gbit/s  err {error:g}",
                flush=True,
            )
    return rows


def build_parser() -> argparse.ArgumentParser:
    return sweep_parser("python -m bench.alltoall", __doc__.splitlines()[0], BACKENDS, "exchanges")


def main(argv: list[str] | None = None) -> int:
    args = validate_sweep(build_parser().parse_args(argv), BACKENDS)
    check_device(args, "exchanges")
    backend: Any = BACKEND_CLASSES[args.backend]()
    with errors_recorded(args.record_dir, backend.rank):
        started = time.time()
        progress = Progress(args.record_dir, backend.rank, backend.size, "alltoall", args.iters)
        args.max_bytes, sweep = sweep_top(backend, args.max_bytes)
        if block_count(args.max_bytes, backend.size) == 0:
            refuse(
                f"--max-bytes {args.max_bytes} holds no float32 block for each of {backend.size} ranks", args.record_dir
            )
        rows = alltoall_rows(backend, args, progress.batch_starts)
        correct = all(row["max_abs_error"] == 0 for row in rows)
        write_record(
            args.record_dir,
            backend.rank,
            "alltoall",
            benchmark="alltoall",
            backend=args.backend,
            world_size=backend.size,
            config={k: v for k, v in vars(args).items() if k != "record_dir"},
            sizes=rows,
            p2p=[],
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
