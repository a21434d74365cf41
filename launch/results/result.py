"""The Result: one result.json, read one way, with its derived figures in one place.

A result is written once by launch.results.assemble. Everything that reads one
(sweeps, compare, report, store, archive, predict) reads it here: `parse` for
bytes already in hand, `read` for one named file, `read_tree` for files and
directory trees. The same checks apply everywhere, and a file that is not a
result is described with the same words everywhere ("PATH: not a result: WHY").

`Result` is the parsed JSON object (a dict, so it stays what result.json holds);
readers take its typed model (`typed`): the schema's shared fields and its kind's
own (launch.kinds: a model per kind), the fields neither declares kept as extras.
Derived figures (scaling efficiency) are functions here; what a kind's figures are and
how they are recomputed from its samples is its kind's (launch.kinds.kind).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from typing_extensions import deprecated

from pydantic import ValidationError

from containers.untrusted import UntrustedInput, load_json
from launch.errors import UsageError
from launch.kinds import kind_of
from launch.schema import (  # noqa: F401
    READABLE_SCHEMAS,
    SCHEMA_VERSION,
    ResultSchema,
    Spec,
    migrate,
    number,
    problem,
    steadiness_from_steps,
    summary_text,
)

MAX_RESULT_BYTES = 128 * 2**20  # an archive member's limit (launch.trust.ArchiveLimits)


class ResultError(UsageError):
    """A file that is not a readable result (one line: path and why)."""


class Result(dict):
    """A result.json object; `path` is where it was read from (None if from elsewhere).

    The mapping is what result.json holds, kept whole for the readers that carry it as data
    (archive, replay, export); every other reader reads its typed model (`fields`, `spec`, the
    accessors below), made once, where the result is read (`parse`), and frozen."""

    path: Optional[Path] = None
    _typed: Optional[ResultSchema] = None
    _malformed: bool = False  # its typed model was tried and its fields are not of their shapes
    _spec: Optional[Spec] = None

    if TYPE_CHECKING:  # to mypy only: a raw read of a Result is an error (pyproject: deprecated is one)

        @deprecated("a raw read of a result: read its typed model (fields, spec, the accessors)")
        def __getitem__(self, key: str, /) -> object: ...

        @deprecated("a raw read of a result: read its typed model (fields, spec, the accessors)")
        def get(self, key: str, default: object = None, /) -> object: ...

    @property
    def fields(self) -> Optional[ResultSchema]:
        """Its typed model (`typed`), made once: a result is never rewritten after it is read."""
        return typed(self)

    @property
    def run_id(self) -> str:
        """Its run id; "" for a dict made in memory without one (a file without one is not a result)."""
        value = dict.get(self, "run_id")
        return value if isinstance(value, str) else ""

    @property
    def benchmark(self) -> Optional[str]:
        value = dict.get(self, "benchmark")
        return value if isinstance(value, str) else None

    @property
    def status(self) -> Optional[str]:
        value = dict.get(self, "status")
        return value if isinstance(value, str) else None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def world_size(self) -> Optional[int]:
        value = dict.get(self, "world_size")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def spec(self) -> Spec:
        """The RunSpec the run was made from, typed (an empty one where it holds none, or where its
        spec is not of its shapes); made once."""
        if self._spec is None:
            fields = typed(self)
            self._spec = (fields.spec if fields is not None else spec_model(dict.get(self, "spec"))) or Spec()
        return self._spec

    @property
    def fabric(self) -> Optional[str]:
        return self.spec.fabric

    @property
    def figure(self) -> Optional[float]:
        """Its figure of merit, as its kind declares it (launch.kinds: img/s, busbw at the largest
        message, time per iteration); None where it has none."""
        found, fields = kind_of(self), typed(self)
        return found.value(fields) if found is not None and fields is not None else None

    @property
    def sizes(self) -> list[dict]:
        """A size sweep's rows as stored (bytes, time_us, busbw_gbit_s, ...; launch.kinds.sizes); []
        for other benchmarks."""
        rows = dict.get(self, "sizes")
        return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def spec_model(value: object) -> Optional[Spec]:
    """A spec read on its own (a result whose other fields are not of their shapes): None where it
    is not an object of the spec's shapes."""
    if not isinstance(value, dict):
        return None
    try:
        return Spec.model_validate(value)
    except ValidationError:
        return None


def as_result(value: dict) -> Result:
    """`value` read through Result's accessors (itself where it is one already: its typed model kept)."""
    return value if isinstance(value, Result) else Result(value)


def field_of(result: Result, name: str) -> Any:
    """A field of the result's typed model (its kind's: launch.kinds, extras included); None where
    it has none or the result is not of its declared shapes."""
    return getattr(typed(result), name, None)


def disturbance_record(result: Result) -> dict:
    """The run's disturbance record as the current schema reads it ({} where it has none): an
    older result's is migrated here too, where it was not read through `parse`."""
    # the owner reads the mapping: an older result's record migrated where it was not read through `parse`
    record, version = dict.get(result, "disturbance"), dict.get(result, "schema_version")
    if version in READABLE_SCHEMAS and version != SCHEMA_VERSION:
        record = steadiness_from_steps(record)
    return record if isinstance(record, dict) else {}


def disturbed(result: Result) -> bool:
    """The run's disturbance record names an outside cause while it was timed (launch.disturbance)."""
    return disturbance_record(result).get("verdict") == "disturbed"


def unsteady(result: Result) -> bool:
    """The run's own step times varied past their limits after its warm-up (launch.disturbance.steps):
    a property of the measurement, not a cause from outside; the run stays in, with its wider CI."""
    return disturbance_record(result).get("steadiness") == "unsteady"


def disturbance_causes(result: Result) -> list[str]:
    """The named causes of a disturbed run, in words; [] for a clean or unrecorded one."""
    causes = disturbance_record(result).get("causes")
    return [str(c.get("words")) for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []


def unsteady_because(result: Result) -> list[str]:
    """Why the run's steps read unsteady, in words; [] for a steady or unmeasured one."""
    reasons = disturbance_record(result).get("unsteady_because") if unsteady(result) else None
    return [str(r) for r in reasons] if isinstance(reasons, list) else []


def disturbance_summary(result: Result) -> str:
    """One cell: 'clean', 'clean; unsteady', 'disturbed: cpu, stopped' or 'not recorded'."""
    record = disturbance_record(result)
    causes = [str(c.get("signal")) for c in record.get("causes") or [] if isinstance(c, dict)]
    return summary_text(record.get("verdict"), causes, unsteady(result))


def steady_cut(result: Result) -> int:
    """The warm-up steps the run's figures leave out (its `steady_state`, bench.steady_state); 0 for
    results from before the rule, whose figures are over every timed step."""
    record = dict.get(result, "steady_state")  # (read while a result is built too: launch.disturbance.judge)
    cut = record.get("warmup_steps_cut") if isinstance(record, dict) else None
    return cut if isinstance(cut, int) and not isinstance(cut, bool) and cut > 0 else 0


def model_of(result: dict) -> type[ResultSchema]:
    """The typed model of a result: its kind's (launch.kinds), else the shared one."""
    found = kind_of(result)
    return found.fields if found is not None else ResultSchema


def typed(result: dict) -> Optional[ResultSchema]:
    """A result as its kind's typed model; None where its fields are not of their declared shapes
    (`malformed` says why). A dict made in memory without a version or run id (a sweep's, a test's)
    reads as the current version."""
    if isinstance(result, Result) and (result._typed is not None or result._malformed):
        return result._typed
    try:
        found = model_of(result).model_validate({"schema_version": SCHEMA_VERSION, "run_id": "", **migrate(result)})
    except ValidationError:
        found = None
    if isinstance(result, Result):
        result._typed, result._malformed = found, found is None
    return found


def fields_of(result: dict) -> ResultSchema:
    """The typed model of a result the bundle made itself (a run's, a sweep's): ResultError, one
    line, where its fields are not of their shapes."""
    found = typed(result)
    if found is None:
        raise ResultError(f"{result.get('run_id')}: malformed: {malformed(result)}")
    return found


# ------------------------------------------------------------------ reading


def parse(data: bytes | str, where: str | Path) -> Result:
    """The result in `data` (the text of a result.json found at `where`), or ResultError."""
    try:  # perhaps another site's: bounded in size and nesting (containers.untrusted)
        value = load_json(data, "result", MAX_RESULT_BYTES)
    except UntrustedInput as exc:
        raise ResultError(f"{where}: not a result: {exc.reason.removeprefix('is ')}") from None
    if not isinstance(value, dict):
        raise ResultError(f"{where}: not a result: not a JSON object")
    if value.get("schema_version") not in READABLE_SCHEMAS:
        raise ResultError(f"{where}: not a result: unknown schema_version {value.get('schema_version')!r}")
    if not isinstance(value.get("run_id"), str):
        raise ResultError(f"{where}: not a result: no run_id")
    result = Result(migrate(value))
    result.path = Path(where) if isinstance(where, Path) else None
    typed(result)  # its typed model, made once here (None where its fields are not of their shapes)
    return result


def read(path: Path | str) -> Result:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultError(f"{path}: not a result: cannot read it ({exc.strerror})") from None
    return parse(data, path)


def files_under(paths: Iterable[Path | str]) -> list[Path]:
    """Each path itself if it is a file, else every result.json below it, in order."""
    found = []
    for path in map(Path, paths):
        found += [path] if path.is_file() else sorted(path.rglob("result.json"))
    return found


def read_tree(paths: Iterable[Path | str]) -> tuple[list[Result], list[str]]:
    """Every result under `paths`, and one problem line per file that is not one."""
    results, problems = [], []
    for path in files_under(paths):
        try:
            results.append(read(path))
        except ResultError as exc:
            problems.append(str(exc))
    return results, problems


# ------------------------------------------------------------ derived figures


def scaling_efficiency(
    total_img_per_s: float, ranks: int, baseline_total_img_per_s: float, baseline_ranks: int
) -> float:
    """throughput(N) / (N x the baseline's per-rank throughput): 1.0 is perfect scaling."""
    return total_img_per_s / (ranks * baseline_total_img_per_s / baseline_ranks)


# ------------------------------------------ ranks per node; stored figures against their samples


def ranks_per_node(result: dict) -> Optional[int]:
    """Ranks on each node, from what every result carries: the spec's ranks over its nodes (a
    RunSpec spreads ranks evenly), else the world size over the hosts the ranks ran on, else the
    `ranks_per_node` an older hand-made spec held; None where nothing says."""
    spec = as_result(result).spec  # (read while a result is built too: transport, plausibility)
    ranks, nodes = spec.ranks, spec.nodes
    world = result.get("world_size") if isinstance(result.get("world_size"), int) else ranks
    if isinstance(world, int) and isinstance(nodes, int) and not isinstance(nodes, bool) and 0 < nodes <= world:
        return max(1, world // nodes)
    hosts = result.get("hosts")
    if isinstance(world, int) and world > 0 and isinstance(hosts, list) and hosts:
        return max(1, world // len(hosts))
    return spec.ranks_per_node or None


def disagreements(result: Result) -> list[str]:
    """Stored figures that their own samples do not give (a result edited after it was written):
    its kind's recomputation (launch.kinds: Kind.disagreements), one line each."""
    found, fields = kind_of(result), typed(result)
    return found.disagreements(fields) if found is not None and fields is not None else []


# ------------------------------------------------ the shapes readers rely on


def malformed(result: dict) -> Optional[str]:
    """Why a result's shared fields are not of the shapes every reader assumes (None: they are):
    the result schema's one-line complaint (launch.schema), its kind's fields included.
    Results from another site pass through this before a report or a comparison uses them."""
    return problem(result, model_of(result))
