"""Message-size sweeps: what the collective micro-benchmarks (launch.kinds.collective) share.

Their ranks time one collective at doubling sizes and write one row per size (bytes, median time,
algbw, busbw by nccl-tests' factor for the collective, every sample); their figure of merit is the
bus bandwidth at the largest size, their plausibility figure the median busbw over the largest
sizes, their table one row per size; compare sets them side by side size by size, each size's
busbw recomputed from its times.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Annotated, Optional

from bench.collectives import gbit_s
from launch.errors import UsageError
from launch.kinds.kind import (
    Spec,
    MAX_SECONDS,
    SMALLEST,
    Bound,
    Figure,
    Judged,
    Metric,
    by_rank,
    disagreement,
    finite_samples,
    fmt,
    listed,
    status_cell,
)
from launch.schema import AN_OBJECT, FiniteNumber, Object, Open, ResultSchema, Text, list_of, number

if TYPE_CHECKING:
    from rich.table import Table


# backends that move GPU buffers on GPUs: NCCL (torch, horovod), CUDA-aware MPI (mpi, where the image says
# its MPI is one: launch.site.preflight)
DEVICE_BACKENDS = ("torch", "horovod", "mpi")
BACKEND_ENGINES = {"torch": "ddp", "horovod": "horovod", "mpi": "mpi"}  # whose library moved GPU buffers
LARGE_MESSAGE_BYTES = 8 * 2**20  # "large messages": the sizes at and above 8 MiB (else the largest)
TOP_SIZES = 3  # of those, the largest three are judged: 8 x 400G nodes reach only a quarter to half of the
# line rate at 8-256 MiB, and NCCL runs sweep to 8 GiB (launch.ranks.runspec.NCCL_MAX_BYTES)
MAX_BUSBW_GBIT_S = 1e5  # 100 Tbit/s: beyond any link, NVLink's 14.4 Tbit/s included
BUSBW_AGREES = 1e-3  # relative: a stored busbw this close to its times' agrees (the times are rounded in us)


class SizeRow(Open):
    """One message size of a sweep."""

    bytes: FiniteNumber = None
    time_us: FiniteNumber = None
    busbw_gbit_s: FiniteNumber = None
    algbw_gbit_s: FiniteNumber = None


Rows = Annotated[
    Optional[list[SizeRow]],
    list_of(dict, "is not a list of rows"),
]


class SweepFields(ResultSchema):
    """A size sweep's result: the shared fields, its backend and one row per size."""

    backend: Text = None
    sizes: Rows = None
    peak_busbw_gbit_s: FiniteNumber = None
    sweep: Annotated[Optional[dict[str, object]], AN_OBJECT] = None
    backend_info: Object = None


def options(backends: tuple[str, ...]) -> dict[str, str]:
    """The sweep's RunSpec fields, as `fabric-bench run --help` says them."""
    return {
        "backend": " | ".join(backends),
        "min_bytes": "smallest message (bytes)",
        "max_bytes": "largest message (bytes; default 8 GiB on GPUs, cut to what the GPU's memory holds, else 256 MiB)",
        "max_seconds_per_size": "seconds each size may take, per form (default 5): its warm-up and samples are cut to "
        "it, never below 3 samples",
    }


def rows_of(fields: ResultSchema) -> list[SizeRow]:
    return list(getattr(fields, "sizes", None) or [])


def largest_row(fields: ResultSchema) -> Optional[SizeRow]:
    rows = [row for row in rows_of(fields) if number(row.bytes) and number(row.busbw_gbit_s)]
    return max(rows, key=lambda row: row.bytes or 0) if rows else None


def size_name(row: SizeRow) -> str:
    """A row's message size as figures are named by it ('8388608')."""
    nbytes = number(row.bytes)
    return str(int(nbytes)) if nbytes is not None and nbytes == int(nbytes) else str(row.bytes)


class LargestMessage(Metric):
    """Bus bandwidth at the largest message; its samples from the row's per-iteration times (busbw
    is inversely proportional to the time: the stored median busbw rescaled)."""

    def value(self, fields: ResultSchema) -> Optional[float]:
        row = largest_row(fields)
        return number(row.busbw_gbit_s) if row else None

    def ci95(self, fields: ResultSchema) -> Optional[float]:
        """The row's stored interval of its time, as a share of the time, on its busbw."""
        row = largest_row(fields)
        ci_us, time_us = (number(getattr(row, "ci95_us", None)), number(row.time_us)) if row else (None, None)
        return (row.busbw_gbit_s or 0) * ci_us / time_us if row and ci_us is not None and time_us else None

    def samples(self, fields: ResultSchema) -> list[float]:
        row = largest_row(fields)
        times = getattr(row, "samples_us", None) if row else None
        if row is None or not isinstance(times, list) or not number(row.time_us):
            return super().samples(fields)
        busbw, median = float(row.busbw_gbit_s or 0), float(row.time_us or 0)
        found = [busbw * median / t for t in (number(v) for v in times) if t and t > 0]
        return [s for s in found if s > 0] or super().samples(fields)


def busbw_metric(collective: str) -> LargestMessage:
    """busbw_gbit_s of the largest row of `sizes`."""
    return LargestMessage(
        "busbw_gbit_s", f"{collective} bus bandwidth at the largest message", "Gbit/s", True, value_at=("sizes",)
    )


def busbw_of(row: SizeRow, factor: Optional[float]) -> Optional[tuple[float, Optional[float]]]:
    """(busbw Gbit/s at the row's median time, its 95 % CI half-width) from the row's own times
    (bench.stats.robust: an interval a few wild times cannot widen), by the collective's factor
    (nccl-tests' busbw); None where it has no times or no factor."""
    from bench.stats import robust

    times, nbytes = finite_samples(getattr(row, "samples_us", None)), number(row.bytes)
    if not times or not nbytes or factor is None or any(t <= 0 for t in times):
        return None
    found = robust(times)
    busbw = gbit_s(nbytes, statistics.median(times) * 1e-6) * factor
    return busbw, busbw * found.ci95 / found.value if found.ci95 is not None else None


def figures(fields: ResultSchema, factor: Optional[float]) -> list[Figure]:
    """busbw at each size, named by it ('busbw_gbit_s@8388608'): from the times, else as stored."""
    found: list[Figure] = []
    for row in rows_of(fields):
        again = busbw_of(row, factor)
        value, ci = again if again is not None else (number(row.busbw_gbit_s), None)
        if value is not None:
            found.append(Figure(f"busbw_gbit_s@{size_name(row)}", value, ci, "Gbit/s", True, 0.10))
    return found


def bounds(fields: ResultSchema, factor: Optional[float]) -> list[Bound]:
    """Each row's busbw below MAX_BUSBW_GBIT_S, and its times above what a busbw that fast takes."""
    found: list[Bound] = []
    for r, row in enumerate(rows_of(fields)):
        if row.busbw_gbit_s is not None:
            found.append(Bound(f"sizes[{r}].busbw_gbit_s", row.busbw_gbit_s, 0.0, MAX_BUSBW_GBIT_S))
        quickest = SMALLEST  # a time below it is a busbw faster than MAX_BUSBW_GBIT_S
        if factor and (nbytes := number(row.bytes)):
            quickest = max(SMALLEST, nbytes * 8 * factor / (MAX_BUSBW_GBIT_S * 1e9) * 1e6)
        found += [
            Bound(f"sizes[{r}].samples_us[{i}]", value, quickest, MAX_SECONDS * 1e6)
            for i, value in enumerate(listed(getattr(row, "samples_us", None)))
        ]
    return found


def disagreements(fields: ResultSchema, factor: Optional[float]) -> list[str]:
    """Each row's stored busbw against its median time's."""
    found: list[str] = []
    for row in rows_of(fields):
        again = busbw_of(row, factor)
        if again is not None:
            found += disagreement(
                f"busbw_gbit_s at {size_name(row)} B", row.busbw_gbit_s, again[0], BUSBW_AGREES, "times"
            )
    return found


def curve(fields: ResultSchema) -> list[tuple[float, float]]:
    """(bytes, busbw Gbit/s) of every row that has both."""
    return [
        (nbytes, busbw)
        for row in rows_of(fields)
        if (nbytes := number(row.bytes)) and (busbw := number(row.busbw_gbit_s))
    ]


def large_message_busbw(rows: list[SizeRow]) -> tuple[Optional[float], list[int]]:
    """Median busbw over the top sizes: the largest TOP_SIZES at or above LARGE_MESSAGE_BYTES (else
    the largest size)."""
    usable = [r for r in rows if number(r.busbw_gbit_s) is not None and number(r.bytes) is not None]
    if not usable:
        return None, []
    large = sorted((r for r in usable if (r.bytes or 0) >= LARGE_MESSAGE_BYTES), key=lambda r: r.bytes or 0)
    chosen = large[-TOP_SIZES:] or [max(usable, key=lambda r: r.bytes or 0)]
    return statistics.median(float(r.busbw_gbit_s or 0) for r in chosen), [int(r.bytes or 0) for r in chosen]


def judged(fields: ResultSchema, collective: str) -> Judged:
    busbw, sizes = large_message_busbw(rows_of(fields))
    return Judged(f"{collective} busbw at large messages", busbw, more={"message_bytes": sizes})


def validate(spec: Spec, backends: tuple[str, ...]) -> None:
    """The sweep's RunSpec fields: backend, sizes, iterations. On GPUs every backend moves device
    buffers (mpi: only in an image whose MPI is CUDA-aware, launch.site.preflight decides)."""
    if spec.backend not in backends:
        raise UsageError(f"unknown backend {spec.backend!r}; choose from {', '.join(backends)}", fields=("backend",))
    if spec.min_bytes < 4 or spec.min_bytes % 4 or (spec.max_bytes or 0) < spec.min_bytes:
        raise UsageError(
            f"--min-bytes must be a positive multiple of 4 (float32) and <= --max-bytes, "
            f"got {spec.min_bytes} and {spec.max_bytes}",
            fields=("min_bytes", "max_bytes"),
        )
    if spec.ranks < 1 or spec.iters < 1 or spec.warmup < 0:
        raise UsageError("--ranks and --iters must be >= 1, --warmup >= 0", fields=("ranks", "iters", "warmup"))


def bench_args(spec: Spec) -> list[str]:
    return [
        "--backend",
        spec.backend,
        "--min-bytes",
        str(spec.min_bytes),
        "--max-bytes",
        str(spec.max_bytes),
        "--warmup",
        str(spec.warmup),
        "--iters",
        str(spec.iters),
        *(["--max-seconds-per-size", f"{spec.max_seconds_per_size:g}"] if spec.max_seconds_per_size else []),
        "--verbose",
    ]


def assemble(records: list[dict], kind: str, world_size: int) -> tuple[dict, list[str]]:
    """Rank 0's rows (times are already the slowest rank's); correct only if every rank's values were."""
    ranks, problems = by_rank(records, kind, world_size)
    if not ranks:
        return {}, problems
    wrong = sorted(rank for rank, r in ranks.items() if not r["correct"])
    if wrong:
        problems.append(f"{kind} gave wrong values on ranks {wrong}")
    first = ranks[min(ranks)]
    return {
        "backend": first["backend"],
        "sizes": first["sizes"],
        "p2p": first.get("p2p", []),
        "peak_busbw_gbit_s": max((row["busbw_gbit_s"] for row in first["sizes"]), default=None),
        "correct": not wrong,
        "backend_info": first.get("backend_info", {}),
        "sweep": first.get("sweep"),  # the top size asked and used (cut to the GPU's memory); None before it
        "versions": first.get("versions", {}),
        "hosts": sorted({r["host"] for r in ranks.values()}),
    }, problems


def table(fields: ResultSchema, collective: str) -> Table:
    """One row per size; point-to-point figures and a failure in the caption."""
    rate = number(fields.link_rate_gbit_s)
    title = f"{collective} ({getattr(fields, 'backend', None)}, {fields.world_size} ranks"
    title += f", link {rate:g} Gbit/s)" if rate else ")"
    from rich.table import Table  # drawn only: reading a result needs no rich

    out = Table(title=title)
    for column in ("bytes", "time us", "algbw Gbit/s", "busbw Gbit/s") + (("busbw/link",) if rate else ()) + ("error",):
        out.add_column(column, justify="right")
    for row in rows_of(fields):
        busbw = number(row.busbw_gbit_s)
        cells = [
            str(row.bytes and int(row.bytes)),
            fmt(row.time_us, ".1f"),
            fmt(row.algbw_gbit_s, ".3f"),
            fmt(busbw, ".3f"),
        ]
        if rate:
            cells.append(fmt(busbw and busbw / rate, ".2f"))
        out.add_row(*cells, fmt(getattr(row, "max_abs_error", None), "g"))
    for row in getattr(fields, "p2p", None) or []:
        if isinstance(row, dict):
            out.caption = (out.caption or "") + (
                f"p2p {row.get('bytes')} B: {fmt(row.get('time_us'), '.1f')} us one "
                f"way, {fmt(row.get('bandwidth_gbit_s'), '.3f')} Gbit/s.  "
            )
    if fields.status != "ok":
        out.caption = (out.caption or "") + status_cell(fields)
    return out


def own_bytes(
    fields: ResultSchema, ranks: int, per_node: int, factor: float, words: str
) -> Optional[tuple[float, str]]:
    """Every operation a size ran (bench.collective.back_to_back: the warm-up, its first single
    operation included, then samples of ops_per_sample operations each; the same again out of
    place; the check) x its bytes x the collective's factor x 2 ways, and the point-to-point
    round trips (warm-up + samples + one) both ways."""
    rows = rows_of(fields)
    if not rows:
        return None
    warmup = number(getattr(fields.spec, "warmup", None)) or 0

    def field(row: object, name: str) -> Optional[float]:
        return number(row.get(name) if isinstance(row, dict) else getattr(row, name, None))

    def operations(row: object) -> float:
        return warmup + (field(row, "n_samples") or 0) * (field(row, "ops_per_sample") or 1)

    def moved(row: object) -> float:
        out_of_place = row.get("out_of_place") if isinstance(row, dict) else getattr(row, "out_of_place", None)
        ops = operations(row) + 1 + (operations(out_of_place) if out_of_place else 0)
        return (field(row, "bytes") or 0) * ops

    p2p = sum(
        (field(r, "bytes") or 0) * ((field(r, "n_samples") or 0) + warmup + 1) * 2
        for r in getattr(fields, "p2p", None) or []
        if isinstance(r, dict)
    )
    return (
        sum(moved(r) for r in rows) * factor * per_node * 2 + p2p,
        f"{words} sizes x operations (warm-up, samples x ops, out of place, check) x {factor:g} x 2 ways",
    )
