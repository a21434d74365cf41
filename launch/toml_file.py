"""Reading a TOML config file (site, experiment) and checking its tables: every failure is
one UsageError line naming the file and the key."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Optional

from launch.errors import UsageError


def read_toml(path: Path, kind: str) -> dict:
    """The parsed table of `path`; `kind` names the file in messages ("site", "experiment")."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: {kind} file not found") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {kind} file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: {kind} file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path.name}: not valid TOML: {exc}") from None


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
                raise UsageError(f"{self.path.name}: {self.where(key)}: unknown key "
                                 f"(expected one of {', '.join(allowed)})")

    def string(self, key: str, choices=None, pattern: str = r".+") -> Optional[str]:
        value = self.table.get(key)
        if value is None:
            return None
        if choices and value not in choices:
            raise self.fail(key, "one of " + " | ".join(choices), value)
        if not isinstance(value, str) or not re.fullmatch(pattern, value):
            raise self.fail(key, "a non-empty string" if pattern == r".+" else f"a name matching {pattern}",
                            value)
        return value

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
