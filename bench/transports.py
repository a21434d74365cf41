"""What bench.collective's collectives run on: a transport wraps one library's communicator (mpi4py
on numpy buffers, or on this rank's GPU buffers where the run asked for GPUs; torch.distributed:
gloo on CPUs, NCCL on GPUs; Horovod), makes its arrays, and
gives the barrier, the slowest rank's value, timing to completion on the device and point-to-point
sends. The exchange code of each collective (bench.collectives) sees a transport as `Transport`:
this rank, the world, the array helpers and the handles of the library it wraps (`comm` and `mpi`;
`dist`; `hvd`).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from bench.versions import package_version

if TYPE_CHECKING:
    from mpi4py import MPI
    from torch import device as TorchDevice


class Array(Protocol):
    """A buffer as the exchange code uses it: numpy's ndarray (mpi) or torch's Tensor (torch,
    horovod), of float32 values or of indices."""

    def __add__(self, other: Array | float, /) -> Array: ...
    def __radd__(self, other: float, /) -> Array: ...
    def __sub__(self, other: Array | float, /) -> Array: ...
    def __mul__(self, other: Array | float, /) -> Array: ...
    def __rmul__(self, other: float, /) -> Array: ...
    def __mod__(self, other: int, /) -> Array: ...
    def __floordiv__(self, other: int, /) -> Array: ...
    def __getitem__(self, index: slice, /) -> Array: ...
    def __setitem__(self, index: slice, value: Array, /) -> None: ...


class Transport(ABC):
    """One rank's end of a library's communicator. Each transport sets the handles of its own
    library (`comm` and `mpi`; `dist`; `hvd`); exchange code for a backend uses only its own."""

    name: str
    rank: int
    size: int
    point_to_point = True  # send and recv exist (Horovod has none)
    comm: MPI.Intracomm  # mpi
    mpi: ModuleType  # mpi: mpi4py.MPI, its constants (IN_PLACE, SUM)
    dist: ModuleType  # torch: torch.distributed
    hvd: ModuleType  # horovod: horovod.torch

    @abstractmethod
    def index(self, count: int) -> Array:
        """0, 1, ..., count - 1 where the buffers live, as int32 (4 bytes an element, as float32: an
        8 GiB message is 2**31 elements, the last index 2**31 - 1)."""

    @abstractmethod
    def floats(self, values: Array) -> Array:
        """`values` as float32."""

    @abstractmethod
    def empty(self, count: int) -> Array:
        """An uninitialised float32 buffer of `count` elements."""

    @abstractmethod
    def max_abs_diff(self, a: Array, b: Array) -> float: ...

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def slowest(self, values: list[float]) -> list[float]:
        """Each value's maximum across the ranks."""

    @abstractmethod
    def describe(self) -> dict:
        """What library and timing measured, for the record."""

    @property
    def timing(self) -> str:
        return "wall clock"

    def copy(self, dst: Array, src: Array) -> None:
        dst[:] = src
        self.sync()

    def sync(self) -> None:
        """Wait for the device's queued work (host buffers: an operation has completed when it returns)."""
        return None

    def elapsed(self, run: Callable[[], object]) -> float:
        """Seconds `run` took to complete (the wall clock: host operations block)."""
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    def device_bytes_free(self) -> Optional[tuple[int, int]]:
        """(free bytes on this rank's GPU, ranks sharing it); None for host buffers."""
        return None

    def send(self, buf: Array, peer: int) -> None:
        raise NotImplementedError(f"{self.name} has no point-to-point operations")

    def recv(self, buf: Array, peer: int) -> None:
        raise NotImplementedError(f"{self.name} has no point-to-point operations")

    def shutdown(self) -> None:
        """Leave the communicator (MPI's ends with the process)."""
        return None


class MPITransport(Transport):
    """mpi4py on numpy buffers."""

    name = "mpi"

    def __init__(self) -> None:
        import numpy as np
        from mpi4py import MPI as mpi

        from bench.rendezvous import mpi_comm

        self.np: ModuleType = np
        self.mpi = mpi
        self.comm = mpi_comm()
        self.rank, self.size = self.comm.rank, self.comm.size

    def index(self, count: int) -> Array:
        return self.np.arange(count, dtype=self.np.int32)

    def floats(self, values: Array) -> Array:
        return self.np.asarray(values, dtype=self.np.float32)

    def empty(self, count: int) -> Array:
        return self.np.empty(count, dtype=self.np.float32)

    def max_abs_diff(self, a: Array, b: Array) -> float:
        return float(self.np.abs(a - b).max())

    def barrier(self) -> None:
        self.comm.Barrier()

    def slowest(self, values: list[float]) -> list[float]:
        local = self.np.array(values, dtype=self.np.float64)
        out = self.np.empty_like(local)
        self.comm.Allreduce(local, out, op=self.mpi.MAX)
        return [float(v) for v in out.tolist()]

    def send(self, buf: Array, peer: int) -> None:
        self.comm.Send(buf, dest=peer)

    def recv(self, buf: Array, peer: int) -> None:
        self.comm.Recv(buf, source=peer)

    def describe(self) -> dict:
        return {
            "mpi_library": self.mpi.Get_library_version().splitlines()[0].strip(),
            "mpi4py": package_version("mpi4py"),
            "numpy": self.np.__version__,
            "buffers": "host",
            "timing": self.timing,
        }


class TorchArrays:
    """Buffers as torch tensors on this rank's device (a CUDA GPU, or the CPU)."""

    torch: ModuleType
    device: TorchDevice
    cuda: bool

    def index(self, count: int) -> Array:
        return self.torch.arange(count, dtype=self.torch.int32, device=self.device)

    def floats(self, values: Array) -> Array:
        return self.torch.as_tensor(values, dtype=self.torch.float32)

    def empty(self, count: int) -> Array:
        return self.torch.empty(count, dtype=self.torch.float32, device=self.device)

    def max_abs_diff(self, a: Array, b: Array) -> float:
        return float(self.torch.abs(a - b).max())

    def device_bytes_free(self) -> Optional[tuple[int, int]]:
        if not self.cuda:
            return None
        free, _ = self.torch.cuda.mem_get_info(self.device)
        local = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1)
        return int(free), max(1, -(-local // max(1, self.torch.cuda.device_count())))

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()


class MPIDeviceTransport(TorchArrays, MPITransport):
    """mpi4py on this rank's GPU buffers: torch CUDA tensors, which mpi4py takes whole through their
    __cuda_array_interface__ (a CUDA-aware MPI reads and writes device memory itself, by the path its
    transports choose: GPUDirect RDMA, copies staged through the host, CUDA IPC within a node; the
    launcher's preflight runs it only in an image that says its MPI is CUDA-aware). MPI's blocking
    calls return with the buffers done: timed by the wall clock around a synchronised device."""

    def __init__(self) -> None:
        import torch

        from bench.torch_device import rank_device

        super().__init__()
        self.torch = torch
        node = self.comm.Split_type(self.mpi.COMM_TYPE_SHARED)  # the ranks of this node: local rank
        local_rank = node.rank
        node.Free()
        self.device = rank_device(local_rank)
        self.cuda = self.device.type == "cuda"

    @property
    def timing(self) -> str:
        return "wall clock, device synchronised"

    def elapsed(self, run: Callable[[], object]) -> float:
        self.sync()
        start = time.perf_counter()
        run()
        self.sync()
        return time.perf_counter() - start

    def describe(self) -> dict:
        return {**super().describe(), "buffers": str(self.device), "torch": self.torch.__version__}


def mpi_transport() -> Transport:
    """The mpi backend: device buffers where the run asked for GPUs (bench.gpu_request), numpy
    buffers otherwise (and where no launcher said: a rank started by hand)."""
    from bench.gpu_request import gpus_requested

    return MPIDeviceTransport() if gpus_requested() else MPITransport()


class TorchTransport(TorchArrays, Transport):
    """torch.distributed: gloo on CPU, nccl on GPU."""

    name = "torch"

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        from bench.rendezvous import discover, export_for_torch
        from bench.torch_device import name_rank_a_host_for_nccl, rank_device

        self.torch = torch
        self.dist = dist
        peers = discover()
        export_for_torch(peers)
        name_rank_a_host_for_nccl(peers.rank)  # ranks sharing one GPU on purpose (the GPU check)
        self.device = rank_device(peers.local_rank)
        self.cuda = self.device.type == "cuda"
        self.process_group_backend = "nccl" if self.cuda else "gloo"
        dist.init_process_group(self.process_group_backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    @property
    def timing(self) -> str:
        return "cuda events" if self.cuda else "wall clock"

    def elapsed(self, run: Callable[[], object]) -> float:
        """CUDA events around `run` on a GPU (the operations queue back to back, as nccl-tests times
        them), the wall clock on the CPU (gloo's operations block)."""
        if not self.cuda:
            return super().elapsed(run)
        begin, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        run()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3

    def barrier(self) -> None:
        self.dist.barrier()

    def slowest(self, values: list[float]) -> list[float]:
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return [float(v) for v in t.cpu().tolist()]

    def send(self, buf: Array, peer: int) -> None:
        self.dist.send(buf, peer)
        self.sync()

    def recv(self, buf: Array, peer: int) -> None:
        self.dist.recv(buf, peer)
        self.sync()

    def describe(self) -> dict:
        return {"process_group": self.process_group_backend, "torch": self.torch.__version__, "timing": self.timing}

    def shutdown(self) -> None:
        self.dist.destroy_process_group()


class HorovodTransport(TorchTransport):
    """horovod.torch (MPI or gloo CPU operations; on GPUs the operations its build has: NCCL, or
    CUDA-aware MPI in the second build, bench.horovod_settings.gpu_operations), each operation waited for as
    bench.horovod_settings.wait says. Horovod has no point-to-point operations: no ping-pong."""

    name = "horovod"
    point_to_point = False

    def __init__(self) -> None:
        import horovod.torch as hvd
        import torch

        from bench.torch_device import rank_device

        self.torch = torch
        self.hvd = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        self.device = rank_device(hvd.local_rank())
        self.cuda = self.device.type == "cuda"

    def barrier(self) -> None:
        self.hvd.allreduce(self.torch.zeros(1), name="barrier")

    def slowest(self, values: list[float]) -> list[float]:
        t = self.torch.tensor(values, dtype=self.torch.float64)
        return [float(v) for v in self.hvd.allreduce(t, op=self.hvd.Max, name="slowest").tolist()]

    def send(self, buf: Array, peer: int) -> None:
        Transport.send(self, buf, peer)

    def recv(self, buf: Array, peer: int) -> None:
        Transport.recv(self, buf, peer)

    def describe(self) -> dict:
        from bench import horovod_settings

        hvd = self.hvd
        return {
            "horovod": package_version("horovod"),
            "torch": self.torch.__version__,
            "controller": "mpi" if hvd.mpi_enabled() else "gloo",
            "cpu_operations": "mpi" if hvd.mpi_enabled() else "gloo",
            "nccl_built": bool(hvd.nccl_built()),
            "gpu_ops": horovod_settings.gpu_operations(hvd),
            "horovod_build": horovod_settings.build_folder(hvd),
            "wait": "poll" if horovod_settings.polls() else "synchronize",
            "timing": self.timing,
        }

    def shutdown(self) -> None:
        self.hvd.shutdown()


TRANSPORTS: dict[str, Callable[[], Transport]] = {
    "mpi": mpi_transport,
    "torch": TorchTransport,
    "horovod": HorovodTransport,
}
