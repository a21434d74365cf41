"""The collectives bench.collective times, each one declared once: its name, what it is, nccl-tests'
bus bandwidth factor, the elements a message size holds, its buffers and the values every rank
must hold after it, and its exchange code per backend (mpi4py on numpy buffers; torch.distributed:
gloo on CPUs, NCCL on GPUs; Horovod).

Buffers are float32 of small integers, so sums and copies stay exact. Before a size is timed its
buffers are made (`buffers`: send, receive) and put in their starting state (`reset`, untimed);
after the timing one more operation from that state is checked element by element (`expected`).
The code runs on a transport (bench.transports: mpi, torch, horovod), which makes arrays (`index`,
`floats`, `empty`, `copy`) and holds the library's handles (`comm` and `mpi`; `dist`; `hvd`).

Adding a collective: its functions and one `Collective` in COLLECTIVES here, and one line in
launch/kinds/collectives.py (its kind); `make docs` regenerates the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from bench import horovod_settings
from bench.transports import Array, Transport

ITEM_BYTES = 4  # float32
Operation = Callable[[Transport, Array, Array], object]  # (transport, send, receive buffer)


def gbit_s(nbytes: float, seconds: float) -> float:
    return nbytes * 8 / seconds / 1e9 if seconds > 0 else 0.0


def whole_items(nbytes: int, ranks: int) -> int:
    """Elements of a message of `nbytes`: whole float32 values."""
    return nbytes // ITEM_BYTES


def copy_back(t: Transport, send: Array, recv: Array) -> None:
    """The receive buffer refilled from the send buffer (the in-place operations' starting state)."""
    t.copy(recv, send)


def untouched(t: Transport, send: Array, recv: Array) -> None:
    """Nothing to put back: the operation reads only the send buffer."""


def pattern(t: Transport, count: int) -> Array:
    return t.floats(t.index(count) % 7)


@dataclass(frozen=True)
class Exchange:
    """One backend's code for a collective: the operation timed (in place where the library has
    it) and, where the library has one, the out-of-place form timed beside it."""

    in_place: Operation
    out_of_place: Optional[Operation] = None


@dataclass(frozen=True)
class Collective:
    name: str  # the kind's name (launch.kinds), its records' kind
    title: str  # as tables and plots title it
    workload: str  # what it moves, in one line
    busbw_factor: Callable[[int], float]  # nccl-tests: busbw = algbw x factor(ranks)
    backends: Mapping[str, Exchange]
    buffers: Callable[[Transport, int], tuple[Array, Array]]  # (transport, elements) -> (send, receive)
    expected: Callable[[Transport, int], Array]  # what this rank's receive buffer holds after one operation
    reset: Operation = copy_back
    elements: Callable[[int, int], int] = whole_items  # (bytes, ranks) -> elements; 0: size skipped
    point_to_point: bool = False  # the sweep measures ping-pong too (launch.fleet.locate reads it)


# -- allreduce: every rank ends with the sum of every rank's values ------------------------


def allreduce_buffers(t: Transport, count: int) -> tuple[Array, Array]:
    return pattern(t, count) + (t.rank + 1), t.empty(count)


def allreduce_expected(t: Transport, count: int) -> Array:
    n = t.size
    return pattern(t, count) * n + n * (n + 1) / 2


def allreduce_ring_factor(ranks: int) -> float:
    """nccl-tests: allreduce bus bandwidth = algbw x 2(n-1)/n."""
    return 2 * (ranks - 1) / ranks


ALLREDUCE = Collective(
    name="allreduce",
    title="Allreduce",
    workload="sum of float32 buffers on every rank (the gradient exchange of data-parallel training)",
    busbw_factor=allreduce_ring_factor,
    backends={
        "mpi": Exchange(
            lambda t, send, recv: t.comm.Allreduce(t.mpi.IN_PLACE, recv, op=t.mpi.SUM),
            lambda t, send, recv: t.comm.Allreduce(send, recv, op=t.mpi.SUM),
        ),
        # torch.distributed has no out-of-place allreduce (a copy first would be timed too); on a GPU
        # the operation is queued on NCCL's stream and the transport's elapsed() waits for its end
        "torch": Exchange(lambda t, send, recv: t.dist.all_reduce(recv)),
        # each operation waited for: Horovod names an operation, and one name cannot be in flight twice
        "horovod": Exchange(
            lambda t, send, recv: horovod_settings.wait(
                t.hvd, t.hvd.allreduce_async_(recv, op=t.hvd.Sum, name="allreduce")
            ),
            lambda t, send, recv: horovod_settings.wait(
                t.hvd, t.hvd.allreduce_async(send, op=t.hvd.Sum, name="allreduce_out")
            ),
        ),
    },
    buffers=allreduce_buffers,
    expected=allreduce_expected,
    point_to_point=True,
)


# -- alltoall: every rank sends a distinct block to every other ---------------------------

BLOCK_OFFSET = 8  # rank r's values are (index % 7) + 8 (r + 1): small integers, exact in float32


def block_count(nbytes: int, ranks: int) -> int:
    """Elements each rank sends in all for a size of `nbytes`: a whole number of blocks, one per
    rank (as nccl-tests cuts it)."""
    return nbytes // ITEM_BYTES // ranks * ranks


def alltoall_values(t: Transport, count: int, rank: int) -> Array:
    return t.floats(t.index(count) % 7 + BLOCK_OFFSET * (rank + 1))


def alltoall_buffers(t: Transport, count: int) -> tuple[Array, Array]:
    return alltoall_values(t, count, t.rank), t.empty(count)


def alltoall_expected(t: Transport, count: int) -> Array:
    """Block j of what this rank receives is rank j's block for this rank."""
    block = count // t.size
    index = t.index(count)
    sender, offset = index // block, index % block
    return t.floats((t.rank * block + offset) % 7 + BLOCK_OFFSET * (sender + 1))


def alltoall_factor(ranks: int) -> float:
    """nccl-tests: alltoall bus bandwidth = algbw x (n-1)/n (each rank's own block stays on it)."""
    return (ranks - 1) / ranks


ALLTOALL = Collective(
    name="alltoall",
    title="All-to-all",
    workload="a distinct float32 block from every rank to every other (MoE expert dispatch, tensor-parallel re-layouts)",
    busbw_factor=alltoall_factor,
    backends={
        "mpi": Exchange(lambda t, send, recv: t.comm.Alltoall(send, recv)),
        "torch": Exchange(lambda t, send, recv: t.dist.all_to_all_single(recv, send)),
    },
    buffers=alltoall_buffers,
    expected=alltoall_expected,
    reset=untouched,
    elements=block_count,
)


# -- broadcast: every rank ends with the root's values ---------------------------------------

ROOT = 0


def broadcast_buffers(t: Transport, count: int) -> tuple[Array, Array]:
    """The root's values on the root, zeros elsewhere (so a rank the values never reached is caught)."""
    values = pattern(t, count) + 1
    return (values if t.rank == ROOT else values * 0), t.empty(count)


def broadcast_expected(t: Transport, count: int) -> Array:
    return pattern(t, count) + 1


def broadcast_factor(ranks: int) -> float:
    """nccl-tests: broadcast bus bandwidth = algbw (factor 1)."""
    return 1.0


BROADCAST = Collective(
    name="broadcast",
    title="Broadcast",
    workload="float32 buffers from rank 0 to every rank (parameters sent out at start, a root's result)",
    busbw_factor=broadcast_factor,
    backends={
        "mpi": Exchange(lambda t, send, recv: t.comm.Bcast(recv, root=ROOT)),
        "torch": Exchange(lambda t, send, recv: t.dist.broadcast(recv, src=ROOT)),
    },
    buffers=broadcast_buffers,
    expected=broadcast_expected,
)


COLLECTIVES: Mapping[str, Collective] = {c.name: c for c in (ALLREDUCE, ALLTOALL, BROADCAST)}
