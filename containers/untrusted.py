"""Reading what another site sent: bytes within a size, JSON within a depth, one line when not.

Files that travel between sites (a reference file, an SBOM, a content manifest, a
locate.json, an archive's members) are read through here, so each door refuses the same
way: a path that is not a regular file (a FIFO, /dev/zero) is not read at all; a file is
read up to its limit plus one byte, so a larger one is refused without holding it; JSON is
parsed within that size and its nesting is bounded (CPython's parser stops a 100k-deep
nesting bomb only with a RecursionError, and a document 900 levels deep that it accepts
still breaks whatever walks or re-encodes it later). A lone surrogate ("\\ud800": valid JSON,
no character) is read as '?': no UTF-8 writer takes one (a terminal, the HTML report, the
SQLite index, a figure's font), so none reaches them.

Every refusal is an UntrustedInput (a ValueError) whose message is one line naming what
was read; each room turns it into its own error (launch: UsageError, exit 2).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64  # the deepest file the bundle writes (a result, an SBOM) is under 10
# where a surrogate may be in JSON text: escaped (\uD800-\uDFFF, pairs included), or raw (json
# decodes bytes with surrogatepass); only such text is re-read with its lone ones replaced
_MAY_HOLD_A_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_MAY_HOLD_A_SURROGATE_TEXT = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


class UntrustedInput(ValueError):
    """One line: what was read and why it was refused (`reason`: the why alone)."""

    def __init__(self, what: str, reason: str):
        super().__init__(f"{what} {reason}")
        self.reason = reason


def read_file(path: Path | str, max_bytes: int, what: str) -> bytes:
    """A regular file's bytes, refused when it is larger than max_bytes (read no further)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UntrustedInput(f"{what} {path}:", f"{exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UntrustedInput(f"{what} {path}:", "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise UntrustedInput(f"{what} {path}:", f"{exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UntrustedInput(f"{what} {path}", f"is larger than {_size(max_bytes)}; refused")
    return data


def regular_file(path: Path | str, what: str) -> Path:
    """path, where it names a regular file (a link the local user named is followed to one);
    anything else is refused in one line before it is opened: a FIFO or a device would hang a
    read or never end it."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UntrustedInput(f"{what} {path}:", f"{exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise UntrustedInput(f"{what} {path}:", "not a regular file; refused")
    return path


def load_json(data: bytes | str, what: str, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in data: at most max_bytes long, nested at most max_depth deep."""
    if len(data) > max_bytes:
        raise UntrustedInput(what, f"is larger than {_size(max_bytes)}; refused")
    try:
        value = json.loads(data)
    except RecursionError:
        raise UntrustedInput(what, _too_deep(max_depth)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UntrustedInput(what, f"is not JSON ({_first_line(exc)})") from None
    if depth(value, max_depth) > max_depth:
        raise UntrustedInput(what, _too_deep(max_depth))
    if _MAY_HOLD_A_SURROGATE.search(data) if isinstance(data, bytes) else _MAY_HOLD_A_SURROGATE_TEXT.search(data):
        value = json.loads(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))  # lone ones: '?'
    return value


def read_json(path: Path | str, max_bytes: int, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """read_file, then load_json."""
    return load_json(read_file(path, max_bytes, what), f"{what} {path}", max_bytes, max_depth)


def depth(value: Any, stop_above: int = MAX_DEPTH) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar: 0), without
    recursion; it stops counting once past stop_above."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, (dict, list)):
            continue
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, level)
        if deepest > stop_above:
            return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _too_deep(max_depth: int) -> str:
    return f"is nested more than {max_depth} level{'s' if max_depth != 1 else ''} deep; refused"


def _size(n: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
