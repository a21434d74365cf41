"""One run end to end: RunSpec -> Command -> processes -> rank records -> result.json."""
from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench.record import read_records
from launch.command import Command
from launch.errors import UsageError
from launch.execute import execute
from launch.launchers import local_command
from launch.results import assemble, new_run_id, write_result
from launch.runspec import RunSpec


@dataclass
class Prepared:
    run_id: str
    run_dir: Path
    command: Command


def horovod_built_for(framework: str) -> bool:
    """Whether this environment's Horovod has the framework's extension compiled in.

    Looks for the extension file instead of importing it: launch never imports
    torch or TensorFlow.
    """
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    folder = {"torch": "torch", "tf": "tensorflow"}[framework]
    return any((package / folder).glob("mpi_lib*.so"))


def preflight(spec: RunSpec, command: Command) -> None:
    if shutil.which(command.argv[0]) is None:
        raise UsageError(f"{command.argv[0]} not found: cannot start the ranks")
    if spec.engine == "horovod" and not horovod_built_for(spec.framework):
        raise UsageError(f"Horovod with {spec.framework} support is not installed here; run `make setup`")


def prepare(spec: RunSpec, results_dir: Path) -> Prepared:
    spec.validated()
    run_id = new_run_id(spec.framework, spec.engine, spec.model, f"n{spec.ranks}")
    run_dir = results_dir.resolve() / run_id
    return Prepared(run_id, run_dir, local_command(spec, run_dir / "ranks"))


def execute_run(spec: RunSpec, prepared: Prepared, timeout: float | None = None, echo: bool = True) -> dict:
    preflight(spec, prepared.command)
    prepared.run_dir.mkdir(parents=True, exist_ok=False)
    outcome = execute(prepared.command, prepared.run_dir / "output.log", timeout=timeout, echo=echo)
    reason = None
    if outcome.timed_out:
        reason = f"timed out after {timeout:g} s; all ranks killed"
    elif outcome.interrupted:
        reason = "interrupted (Ctrl-C); all ranks killed"
    result = assemble(
        run_id=prepared.run_id, spec=spec.as_dict(), argv=prepared.command.argv,
        env=prepared.command.env, records=read_records(prepared.run_dir / "ranks"),
        exit_code=outcome.exit_code, log_tail=outcome.log_tail, seconds=outcome.seconds,
        reason=reason, extra={"launch": {"first_output_seconds": outcome.first_output_seconds}},
    )
    write_result(prepared.run_dir, result)
    if outcome.interrupted:
        raise KeyboardInterrupt
    return result
