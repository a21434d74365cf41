"""The collective micro-benchmarks this bundle registers: one launch.kinds.collective.Collective per
collective of bench.collectives (a collective is added there, with its exchange code, and here)."""

from __future__ import annotations

from bench.collectives import ALLREDUCE, ALLTOALL, BROADCAST
from launch.kinds.collective import Collective

KINDS = (
    Collective(ALLREDUCE, identified_by="sizes", fits_alpha_beta=True),
    Collective(ALLTOALL),
    Collective(BROADCAST),
)
