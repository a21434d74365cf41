"""HPC halo-exchange proxy: 3-D 7-point Jacobi on a Cartesian decomposition (MPI).

    python -m bench.halo --grid 96 --record-dir DIR

The global grid (--grid points per edge, float64) is split over an MPI
Cartesian communicator; every iteration exchanges one layer of halo with up to
six neighbours (MPI_Sendrecv per face) and then updates every point to the mean
of its six neighbours. Dirichlet boundary: 1 on the x=0 face, 0 elsewhere.

Reported: time per iteration (slowest rank), communication share (halo
exchange time / iteration time) and a checksum. Every point goes through the
same floating-point operations whatever the decomposition, so the integer sum
of the values' bit patterns (order-independent) must equal that of a 1-rank run
exactly; rank 0 computes that reference itself unless --no-check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np

from bench.progress import Progress
from bench.record import errors_recorded, write_record
from bench.rendezvous import mpi_comm
from bench.stats import summarize
from bench.versions import common_versions

if TYPE_CHECKING:  # mpi4py is imported when the program runs
    from mpi4py import MPI


def split(n: int, parts: int, index: int) -> tuple[int, int]:
    """(offset, length) of part `index` when n points are split as evenly as possible."""
    base, extra = divmod(n, parts)
    return index * base + min(index, extra), base + (index < extra)


class Block:
    """One rank's part of the grid, with a halo layer on every side."""

    def __init__(self, grid: int, dims: Sequence[int], coords: Sequence[int], cart: MPI.Cartcomm | None = None):
        self.cart = cart
        extents = [split(grid, d, c) for d, c in zip(dims, coords)]
        self.offsets = [e[0] for e in extents]
        shape = [e[1] + 2 for e in extents]
        x, y, z = np.meshgrid(
            *[np.arange(o, o + n - 2, dtype=np.float64) for o, n in zip(self.offsets, shape)], indexing="ij"
        )
        self.u = np.zeros(shape)
        self.u[1:-1, 1:-1, 1:-1] = np.sin(0.1 * x) * np.cos(0.07 * y) + 0.001 * z  # any fixed field
        if coords[0] == 0:
            self.u[0, :, :] = 1.0  # the x=0 boundary face
        self.v = self.u.copy()
        self.neighbours = [cart.Shift(axis, 1) for axis in range(3)] if cart is not None else None

    def exchange(self) -> None:
        """Send my outermost interior layers, receive the neighbours' into my halo."""
        from mpi4py import MPI

        u = self.u
        cart = self.cart
        assert cart is not None and self.neighbours is not None  # only a block on a Cartesian communicator exchanges
        for axis, (lower, upper) in enumerate(self.neighbours):

            def face(index: int) -> tuple[slice | int, ...]:
                return (slice(None),) * axis + (index,)

            for send_index, recv_index, dest, source in ((1, -1, lower, upper), (-2, 0, upper, lower)):
                if dest == MPI.PROC_NULL and source == MPI.PROC_NULL:
                    continue
                outgoing = np.ascontiguousarray(u[face(send_index)])
                incoming = np.empty_like(outgoing)
                cart.Sendrecv(outgoing, dest=dest, recvbuf=incoming, source=source)
                if source != MPI.PROC_NULL:
                    u[face(recv_index)] = incoming

    def relax(self) -> None:
        u, v = self.u, self.v
        v[1:-1, 1:-1, 1:-1] = (
            u[:-2, 1:-1, 1:-1]
            + u[2:, 1:-1, 1:-1]
            + u[1:-1, :-2, 1:-1]
            + u[1:-1, 2:, 1:-1]
            + u[1:-1, 1:-1, :-2]
            + u[1:-1, 1:-1, 2:]
        ) / 6.0
        self.u, self.v = v, u

    def interior(self) -> np.ndarray:
        return self.u[1:-1, 1:-1, 1:-1]


def bit_checksum(values: np.ndarray) -> int:
    """Sum of the float64 bit patterns modulo 2^64: exact and independent of order."""
    return int(np.ascontiguousarray(values).view(np.uint64).sum(dtype=np.uint64))


def reference_checksum(grid: int, steps: int) -> int:
    block = Block(grid, (1, 1, 1), (0, 0, 0))
    for _ in range(steps):
        block.relax()
    return bit_checksum(block.interior())


def run(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    comm = mpi_comm()
    dims = MPI.Compute_dims(comm.size, 3)
    cart = comm.Create_cart(dims, periods=[False] * 3, reorder=False)
    block = Block(args.grid, dims, cart.Get_coords(cart.rank), cart)
    iteration_s, exchange_s = [], []
    progress = Progress(args.record_dir, cart.rank, cart.size, "halo", args.iters)
    for step in range(args.warmup + args.iters):
        progress.batch_starts()  # the heartbeat the launcher watches (bench.progress)
        cart.Barrier()
        start = time.perf_counter()
        block.exchange()
        exchanged = time.perf_counter()
        block.relax()
        if step >= args.warmup:
            iteration_s.append(time.perf_counter() - start)
            exchange_s.append(exchanged - start)
    local = np.array(iteration_s)
    slowest = np.empty_like(local)
    cart.Allreduce(local, slowest, op=MPI.MAX)
    comm_share = cart.allreduce(sum(exchange_s) / sum(iteration_s), op=MPI.SUM) / cart.size
    checksum = cart.allreduce(bit_checksum(block.interior()), op=MPI.SUM) % 2**64
    value_sum = cart.allreduce(float(block.interior().sum()), op=MPI.SUM)
    steps = args.warmup + args.iters
    reference = reference_checksum(args.grid, steps) if args.check and cart.rank == 0 else None
    correct = reference is None or reference == checksum
    summary = summarize(slowest.tolist())
    write_record(
        args.record_dir,
        cart.rank,
        "halo",
        benchmark="halo",
        world_size=cart.size,
        dims=list(dims),
        grid=args.grid,
        steps=steps,
        config={k: v for k, v in vars(args).items() if k != "record_dir"},
        samples_s=slowest.tolist(),
        time_per_iter_s=statistics.median(slowest.tolist()),
        time_per_iter_mean_s=summary.mean,
        ci95_s=summary.ci95,
        comm_fraction=comm_share,
        checksum=checksum,
        value_sum=value_sum,
        reference_checksum=reference,
        correct=correct,
        versions=common_versions(),
        status="ok" if correct else "failed",
    )
    if cart.rank == 0:
        print(
            f"[halo] {args.grid}^3 on {'x'.join(map(str, dims))} ranks: "
            f"{statistics.median(slowest.tolist()) * 1e3:.2f} ms/iter, comm {comm_share:.0%}, "
            f"checksum {checksum:#x} ({'matches 1 rank' if reference is not None and correct else 'MISMATCH' if not correct else 'unchecked'})",
            flush=True,
        )
    return 0 if correct else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.halo", description=__doc__.splitlines()[0])
    p.add_argument("--grid", type=int, default=96, help="global grid points per edge")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the 1-rank reference")
    p.add_argument("--record-dir", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.grid < 2 or args.iters < 1 or args.warmup < 0:
        print("error: --grid must be >= 2, --iters >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    with errors_recorded(args.record_dir, lambda: mpi_comm().rank):
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
