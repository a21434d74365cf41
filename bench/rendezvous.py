"""Rank discovery for engines that need an address to meet at (DDP, tf.distribute).

Under torchrun the environment already holds RANK/WORLD_SIZE/MASTER_ADDR. Under
mpirun, srun or an emulated cluster the ranks were started by MPI/PMIx, so rank
0 picks a free port on its host and broadcasts (host, port) over MPI; MPI is only
the bootstrap, the training traffic goes through the engine's own transport.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mpi4py is imported where a rank meets its peers over MPI
    from mpi4py import MPI


@dataclass(frozen=True)
class Peers:
    rank: int
    size: int
    local_rank: int
    master_addr: str
    master_port: int
    hosts: list[str]  # host of every rank, by rank


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def interface_address(ifname: str) -> str:
    """IPv4 address of a network interface (SIOCGIFADDR), e.g. the emulated node's fbemu0."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


def advertised_address(host: str) -> str:
    """What rank 0 tells the others to connect to: FABRIC_BENCH_MASTER_ADDR, else the
    address of interface FABRIC_BENCH_MASTER_IFNAME, else its host name."""
    if os.environ.get("FABRIC_BENCH_MASTER_ADDR"):
        return os.environ["FABRIC_BENCH_MASTER_ADDR"]
    if os.environ.get("FABRIC_BENCH_MASTER_IFNAME"):
        return interface_address(os.environ["FABRIC_BENCH_MASTER_IFNAME"])
    return host


def mpi_comm() -> MPI.Intracomm:
    import mpi4py

    mpi4py.rc.thread_level = "serialized"
    from mpi4py import MPI

    return MPI.COMM_WORLD


def discover() -> Peers:
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        return Peers(
            rank,
            size,
            int(os.environ.get("LOCAL_RANK", 0)),
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            [],
        )
    comm = mpi_comm()
    host = socket.gethostname()
    hosts = comm.allgather(host)
    master = comm.bcast((advertised_address(host), free_port()) if comm.rank == 0 else None, root=0)
    local_rank = hosts[: comm.rank].count(host)
    return Peers(comm.rank, comm.size, local_rank, master[0], master[1], hosts)


def export_for_torch(peers: Peers) -> None:
    """The env:// variables torch.distributed reads."""
    os.environ.update(
        RANK=str(peers.rank),
        WORLD_SIZE=str(peers.size),
        LOCAL_RANK=str(peers.local_rank),
        MASTER_ADDR=peers.master_addr,
        MASTER_PORT=str(peers.master_port),
    )
