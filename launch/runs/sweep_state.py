"""The state of a sweep directory: which points finished, failed or still wait.

    SWEEP_DIR/index.json   {"schema_version": 1, "experiment": NAME,
                            "points": {KEY: {"label", "status", "reason", "runs": [RUN_ID, ...]}}}
    SWEEP_DIR/runs/RUN_ID/ one directory per attempt (result.json, output.log, ranks/)

Statuses: pending, running, ok, failed, interrupted. A point left `running`
(the sweep was killed outright) counts as interrupted. The index is rewritten
atomically after every change; results themselves are never rewritten (a retry
is a new run directory).
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from containers.files import write_json_atomic
from launch.errors import UsageError

INDEX_SCHEMA_VERSION = 1
DONE = ("ok",)


class SweepState:
    def __init__(self, directory: Path, experiment: str):
        self.directory = directory
        self.path = directory / "index.json"
        self.experiment = experiment
        self.reload()

    def reload(self) -> None:
        """The index as it is on disk now (another process may have written it since)."""
        directory, experiment = self.directory, self.experiment
        self.data: dict[str, Any] = {"schema_version": INDEX_SCHEMA_VERSION, "experiment": experiment, "points": {}}
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise UsageError(f"{self.path}: unreadable sweep index: {exc}") from None
            if self.data.get("schema_version") != INDEX_SCHEMA_VERSION:
                raise UsageError(f"{self.path}: unknown index schema_version {self.data.get('schema_version')!r}")
            if self.data.get("experiment") != experiment:
                raise UsageError(
                    f"{directory}: holds the sweep of experiment {self.data.get('experiment')!r}, "
                    f"not {experiment!r}; choose another --dir"
                )

    @property
    def runs_dir(self) -> Path:
        return self.directory / "runs"

    def point(self, key: str) -> dict:
        return self.data["points"].get(key, {"status": "pending", "runs": []})

    def status(self, key: str) -> str:
        status = self.point(key)["status"]
        return "interrupted" if status == "running" else status

    def to_run(self, key: str, retry_failed: bool) -> bool:
        status = self.status(key)
        return status not in DONE and (status != "failed" or retry_failed)

    def mark(self, key: str, label: str, status: str, reason: str | None = None, run_id: str | None = None) -> None:
        entry = self.data["points"].setdefault(key, {"label": label, "status": "pending", "runs": []})
        entry.update(label=label, status=status, reason=reason)
        if run_id and run_id not in entry["runs"]:
            entry["runs"].append(run_id)
        self.save()

    def latest_result(self, key: str) -> Path | None:
        runs = self.point(key)["runs"]
        path = self.runs_dir / runs[-1] / "result.json" if runs else None
        return path if path and path.exists() else None

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self.data)


@contextmanager
def exclusive(directory: Path):
    """Hold the sweep directory: a second sweep on it is refused instead of racing."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{directory}: another sweep is running in this directory") from None
        yield
