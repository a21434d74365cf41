"""Open MPI collective rules: which algorithm coll/tuned runs for a collective above a
message size, written as the text file Open MPI reads at MPI_Init
(`coll_tuned_dynamic_rules_filename`, with `coll_tuned_use_dynamic_rules=1`).

The file's format (coll/tuned's original text format): the number of collectives; per
collective its id and the number of communicator sizes; per communicator size the
smallest size the rules apply to and the number of message sizes; per message size one
line "bytes algorithm fan-in/out segment-bytes". Algorithm 0 leaves the choice to
Open MPI's fixed decision tree, so rules only change what they name.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

FILE_NAME = "ompi-coll-rules.conf"

# coll/tuned's collective ids (its COLLTYPE enumeration) and allreduce algorithm numbers
# (`ompi_info --param coll tuned --level 9`: coll_tuned_allreduce_algorithm)
COLLECTIVES = {"allreduce": 2}
ALGORITHMS = {
    "allreduce": {
        "fixed": 0,
        "basic_linear": 1,
        "nonoverlapping": 2,
        "recursive_doubling": 3,
        "ring": 4,
        "segmented_ring": 5,
        "rabenseifner": 6,
    }
}


@dataclass(frozen=True)
class Rule:
    """From `min_bytes` (per rank's buffer) on, on communicators of `min_ranks` or more."""

    collective: str
    min_bytes: int
    algorithm: str
    segment_bytes: int = 0
    min_ranks: int = 2

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS.get(self.collective, {}):
            raise ValueError(f"no Open MPI {self.collective} algorithm {self.algorithm!r}")


def render(rules: tuple[Rule, ...]) -> str:
    """The rules file; below each communicator size's first rule, Open MPI's fixed choice."""
    lines = [str(len({r.collective for r in rules}))]
    ordered = sorted(rules, key=lambda r: (COLLECTIVES[r.collective], r.min_ranks, r.min_bytes))
    for collective, of_collective in groupby(ordered, key=lambda r: r.collective):
        by_ranks = [(ranks, list(group)) for ranks, group in groupby(of_collective, key=lambda r: r.min_ranks)]
        lines += [f"{COLLECTIVES[collective]}  # {collective}", str(len(by_ranks))]
        for ranks, group in by_ranks:
            steps = [(0, "fixed", 0)] if group[0].min_bytes > 0 else []
            steps += [(r.min_bytes, r.algorithm, r.segment_bytes) for r in group]
            lines += [f"{ranks}  # ranks and more", str(len(steps))]
            lines += [f"{size} {ALGORITHMS[collective][name]} 0 {segment}  # {name}" for size, name, segment in steps]
    return "\n".join(lines) + "\n"


def environment(path: str) -> dict[str, str]:
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_dynamic_rules_filename": path}


def tuned_by_user(env) -> bool:
    """Whether an environment already steers coll/tuned (a forced algorithm, its own rules):
    a rules file would win over a forced algorithm, so none is added then."""
    return any(name.startswith("OMPI_MCA_coll_tuned_") for name in env)
