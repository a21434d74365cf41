"""Reading a TOML config file (site, experiment): every failure is one UsageError line."""
from __future__ import annotations

import tomllib
from pathlib import Path

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
