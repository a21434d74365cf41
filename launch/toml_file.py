"""Reading a TOML config file (site, experiment) and checking its tables: every failure is
one UsageError line naming the file and the key."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from containers.untrusted import UntrustedInput, read_file
from launch.errors import UsageError

T = TypeVar("T")
MAX_TOML_BYTES = 4 << 20  # a site or experiment file is a few KiB


def read_toml(path: Path, kind: str) -> dict:
    """The parsed table of `path`; `kind` names the file in messages ("site", "experiment")."""
    path = Path(path)
    try:  # perhaps another site's (an archive carries its site and experiment files): bounded
        data = read_file(path, MAX_TOML_BYTES, f"{kind} file")
    except UntrustedInput as exc:
        if not path.exists():
            raise UsageError(f"{path}: {kind} file not found") from None
        raise UsageError(f"{path}: cannot read {kind} file: {exc.reason.removeprefix('is ')}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: {kind} file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path.name}: not valid TOML: {exc}") from None
    except RecursionError:
        raise UsageError(f"{path}: {kind} file is nested too deeply to be a {kind} file") from None


def expected(path: Path, where: str, what: str, got: Any = ...) -> UsageError:
    """'FILE: WHERE: expected WHAT, got VALUE' (VALUE left out when not given)."""
    shown = "" if got is ... else f", got {got!r}"
    return UsageError(f"{path.name}: {where}: expected {what}{shown}")


class TomlTable:
    """Typed reads from one table of a TOML file, with errors that name file and key."""

    def __init__(self, path: Path, table: dict, prefix: str = ""):
        self.path, self.table, self.prefix = path, table, prefix

    def where(self, key: str) -> str:
        return f"[{self.prefix}].{key}" if self.prefix else key

    def fail(self, key: str, what: str, got: Any = ...) -> UsageError:
        return expected(self.path, self.where(key), what, got)

    def reject_unknown(self, allowed) -> None:
        for key in self.table:
            if key not in allowed:
                raise UsageError(
                    f"{self.path.name}: {self.where(key)}: unknown key (expected one of {', '.join(allowed)})"
                )

    def string(self, key: str, choices=None, pattern: str = r".+") -> Optional[str]:
        value = self.table.get(key)
        if value is None:
            return None
        if choices and value not in choices:
            raise self.fail(key, "one of " + " | ".join(choices), value)
        if not isinstance(value, str) or not re.fullmatch(pattern, value):
            raise self.fail(key, "a non-empty string" if pattern == r".+" else f"a name matching {pattern}", value)
        return value

    def shaped(self, key: str, parse: Callable[[str, object], T]) -> Optional[T]:
        """The key's value parsed into its shape (launch.shapes); a refusal names file and key."""
        if key not in self.table:
            return None
        try:
            return parse(self.where(key), self.table[key])
        except UsageError as exc:
            raise UsageError(f"{self.path.name}: {exc}") from None

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "a list of non-empty strings", value)
        return tuple(value)

    def subtable(self, key: str) -> dict:
        value = self.table.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, "a table", value)
        return value
