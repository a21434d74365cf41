"""Shapes: a value that can come from another site, parsed once into a declared type.

Parse, don't validate. Each function here takes a raw value (from an archive, an experiment
file, a reference file, a result, the site file or the command line) and returns a typed value
of a declared shape, or refuses it in one line (UsageError: exit 2). Nothing is quoted into
fitting: a value outside its shape is refused, because every sink parses with its own rules
(sbatch's tokenizer reads a backslash as an escape even inside single quotes; bash, Open MPI's
parameter files and rich's markup each have theirs).

The sinks take only these types: a #SBATCH line (`SlurmName`, `SlurmTime`, `NodeList`,
`SlurmPath`), a job script's `module load` (`ModuleName`), a container runtime's argv (`ImageRef`;
the runtime itself is chosen by `RuntimeName`), mpirun's (`HostFile`), tc's (`LinkRate`), the
terminal (`TerminalText`).
Only this module constructs them (tests/test_architecture.py checks that no other module calls
a shape's constructor or casts to it), so a raw `str` reaching a sink is a mypy error.

Shapes (docs/security.md lists every field and its shape):
  SlurmName   partition, account, job name: [A-Za-z0-9_.+-], a letter or digit first, at most
              64 characters (job names 128): no quote, backslash, space, '#', '=' or ','
  SlurmTime   Slurm's time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S), at most 366 days,
              rendered anew as [D-]HH:MM:SS
  NodeList    a Slurm host list: n1,n[3-4] ([A-Za-z0-9_.-] names, brackets, digits, commas)
  SlurmPath   a job's log path for a #SBATCH line: its folder holds no control character,
              quote, backslash or '%' (Slurm's filename patterns); rendered in double quotes
  ModuleName  an environment module: [A-Za-z0-9_.+/-] ('cuda/12.4', 'openmpi/4.1.5-gcc')
  ImageRef    an image a runtime runs, one argv element: a path (a SIF, a ch-run directory) or a
              reference (HOST/NAME:TAG, NAME@sha256:HEX): no control character (Unicode C*), not '-'
              first (never an option), at most 1024 long; spaces and any letter are fine (an argv
              element is never parsed by a shell)
  RuntimeName one of the container runtimes' registered names (launch.ranks.runtimes.RUNTIMES)
  HostFile    mpirun's --hostfile: a path as ImageRef's, at most 4096 long
  LinkRate    an emulated link's rate for tc, whole bits per second, 1 kbit/s .. 1 Pbit/s: from
              '1gbit', '500mbit', '2.5g/s' (at most 15 digits, and 9 after the point) or an int
  count       an int within its declared range (ranks, iterations, sizes, nodes, links)
  sample      a finite float within the kind's plausible range
  TerminalText  text with escape sequences removed and every Unicode C* character (control, format,
              surrogate, private use, unassigned) shown as '?' (`terminal`), and
              rich markup made inert where rich prints it (`rich_text`)
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import NewType

from launch.errors import UsageError

# rich and launch.schema (pydantic) are imported where they are used: this module loads with the
# standard library alone, as the GPU check on a bare host loads it (through launch.ranks.runtimes)

SlurmName = NewType("SlurmName", str)
SlurmTime = NewType("SlurmTime", str)
NodeList = NewType("NodeList", str)
SlurmPath = NewType("SlurmPath", str)
ModuleName = NewType("ModuleName", str)
ImageRef = NewType("ImageRef", str)
RuntimeName = NewType("RuntimeName", str)
HostFile = NewType("HostFile", str)
LinkRate = NewType("LinkRate", int)
TerminalText = NewType("TerminalText", str)

# Every shape's constructor, for the architecture test: no other module may call or cast to one
CONSTRUCTED_HERE = (
    "SlurmName",
    "SlurmTime",
    "NodeList",
    "SlurmPath",
    "ModuleName",
    "TerminalText",
    "ImageRef",
    "RuntimeName",
    "HostFile",
    "LinkRate",
)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_NODE_LIST = re.compile(r"[A-Za-z0-9_.\-\[\],]{1,1000}")
_MODULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,127}")
# one argv element naming a file or an image: never an option ('-' first), no space, quote or
# shell character, ASCII only (a look-alike letter would name another image)
# a link rate: digits (15 at most, 9 after the point) and k, m, g or t, then 'bit' and '/s' if written
_RATE = re.compile(r"\s*(\d{1,15})(?:\.(\d{1,9}))?\s*([kmgt])(?:bit)?(?:/s)?\s*", re.IGNORECASE | re.ASCII)
_RATE_UNIT = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
MIN_LINK_RATE_BIT_S = 10**3
MAX_LINK_RATE_BIT_S = 10**15
_PATH_REFUSED = re.compile(r"[\x00-\x1f\x7f-\x9f\"'\\%]")
# Slurm's --time forms: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds
_TIME_FORMS = (
    (re.compile(r"(\d{1,6})"), ("minutes",)),
    (re.compile(r"(\d{1,6}):(\d{1,2})"), ("minutes", "seconds")),
    (re.compile(r"(\d{1,4}):(\d{1,2}):(\d{1,2})"), ("hours", "minutes", "seconds")),
    (re.compile(r"(\d{1,3})-(\d{1,2})"), ("days", "hours")),
    (re.compile(r"(\d{1,3})-(\d{1,2}):(\d{1,2})"), ("days", "hours", "minutes")),
    (re.compile(r"(\d{1,3})-(\d{1,2}):(\d{1,2}):(\d{1,2})"), ("days", "hours", "minutes", "seconds")),
)
MAX_TIME_MINUTES = 366 * 24 * 60


def _shown(value: object) -> str:
    """A refused value as an error line shows it: repr (escapes visible), cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _refuse(field: str, value: object, shape: str) -> UsageError:
    return UsageError(f"{field} {_shown(value)} is refused: {shape}", fields=(field.lstrip("-").replace("-", "_"),))


def slurm_name(field: str, value: object, *, longest: int = 64) -> SlurmName:
    """A partition, account or job name, as Slurm's options take it unquoted."""
    if not isinstance(value, str) or not (0 < len(value) <= longest) or not _NAME.fullmatch(value):
        raise _refuse(field, value, f"a Slurm name is [A-Za-z0-9_.+-], a letter or digit first, 1..{longest} long")
    return SlurmName(value)


def slurm_time(field: str, value: object) -> SlurmTime:
    """A time limit in any of Slurm's forms (or whole minutes as a number) -> [D-]HH:MM:SS."""
    minutes = time_minutes(field, value)
    days, rest = divmod(minutes, 24 * 60)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return SlurmTime(f"{days}-{clock}" if days else clock)


def time_minutes(field: str, value: object) -> int:
    """A time limit's whole minutes (seconds round up), 1..MAX_TIME_MINUTES."""
    shape = "a Slurm time: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S (ASCII digits), at most 366 days"
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise _refuse(field, value, shape)
    for pattern, units in _TIME_FORMS:
        match = pattern.fullmatch(text) if text.isascii() else None
        if match:
            parts = dict(zip(units, (int(g) for g in match.groups())))
            if parts.get("seconds", 0) > 59 or (len(units) > 2 and parts.get("minutes", 0) > 59):
                break
            if "days" in parts and parts.get("hours", 0) > 23:
                break
            seconds = (
                parts.get("days", 0) * 86400
                + parts.get("hours", 0) * 3600
                + parts.get("minutes", 0) * 60
                + parts.get("seconds", 0)
            )
            minutes = math.ceil(seconds / 60)
            if 1 <= minutes <= MAX_TIME_MINUTES:
                return minutes
            break
    raise _refuse(field, value, shape)


def node_list(field: str, value: object) -> NodeList:
    if not isinstance(value, str) or not value.isascii() or not _NODE_LIST.fullmatch(value):
        raise _refuse(field, value, "a Slurm node list: n1,n[3-4] ([A-Za-z0-9_.-], brackets, commas)")
    return NodeList(value)


def slurm_log(field: str, directory: object) -> SlurmPath:
    """A job's log path for its #SBATCH --output line: `directory`/slurm-%j.out, written there in
    double quotes (spaces and non-ASCII kept); the directory holds no control character, quote,
    backslash or '%' (Slurm's filename patterns: only the job id's %j is the bundle's own)."""
    text = str(directory) if directory is not None else ""
    if not text or len(text) > 4000 or _PATH_REFUSED.search(text):
        raise _refuse(
            field,
            directory,
            "a folder Slurm reads from a job script holds no control character, quote, backslash or '%'",
        )
    return SlurmPath(f"{text.rstrip('/') or '/'}/slurm-%j.out".replace("//", "/"))


def module_name(field: str, value: object) -> ModuleName:
    if not isinstance(value, str) or not value.isascii() or not _MODULE.fullmatch(value):
        raise _refuse(field, value, "an environment module name is [A-Za-z0-9_.+/-], at most 128 long")
    return ModuleName(value)


def _argv_element(field: str, value: object, longest: int, what: str, reader: str) -> str:
    """One argv element `reader` cannot read as an option: text of 1..longest characters, not '-'
    first, with no control, format or unassigned character (Unicode C*). Spaces and any other
    letter are fine: it is never parsed by a shell (a job script's srun line quotes it whole)."""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= longest
        or value.startswith("-")
        or any(unicodedata.category(c).startswith("C") for c in value)
    ):
        raise _refuse(
            field,
            value,
            f"{what} of 1..{longest} characters, no control character, not '-' first ({reader} would read it as "
            "an option)",
        )
    return value


def image(field: str, value: object) -> ImageRef:
    """An image a container runtime runs: one argv element of apptainer, podman or ch-run."""
    return ImageRef(_argv_element(field, value, 1024, "an image is a path or a reference", "a runtime"))


def runtime_name(field: str, value: object, known: tuple[str, ...]) -> RuntimeName:
    """A container runtime's name, one of `known` (launch.ranks.runtimes.RUNTIMES: its class owns
    the binary and the flags, so the name chooses a class and never reaches an argv itself)."""
    if not isinstance(value, str) or value not in known:
        raise UsageError(
            f"{field}: unknown runtime {_shown(value)}; choose from {', '.join(known)}",
            fields=(field.lstrip("-").replace("-", "_"),),
        )
    return RuntimeName(value)


def hostfile(field: str, value: object) -> HostFile:
    """mpirun's --hostfile: a path on this host, one argv element."""
    return HostFile(_argv_element(field, value, 4096, "a hostfile is a path", "mpirun"))


def link_rate(field: str, value: object) -> LinkRate:
    """An emulated link's rate in whole bits per second, for tc: '1gbit', '500mbit', '2.5g/s',
    '100kbit' or an int of bits per second; computed in integers (a float of 400 digits would be
    infinite), within MIN_LINK_RATE_BIT_S..MAX_LINK_RATE_BIT_S."""
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        bits = value
    elif match:
        unit, fraction = _RATE_UNIT[match.group(3).lower()], match.group(2) or ""
        bits = int(match.group(1)) * unit + int(fraction or "0") * unit // 10 ** len(fraction)
    else:
        bits = 0
    if not MIN_LINK_RATE_BIT_S <= bits <= MAX_LINK_RATE_BIT_S:
        raise UsageError(
            f"{field}: unknown link rate {_shown(value)}: write a number (at most 15 digits, 9 after the point) "
            "and k, m, g or t, e.g. 1gbit, 500mbit, 2.5g; 1 kbit/s .. 1 Pbit/s",
            fields=(field.lstrip("-").replace("-", "_"),),
        )
    return LinkRate(bits)


def count(field: str, value: object, low: int, high: int) -> int:
    """An int within [low, high] (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _refuse(field, value, f"an integer {low}..{high}")
    return value


def sample(field: str, value: object, low: float, high: float) -> float:
    """A measured value from a file: a finite number within [low, high] (the kind's plausible range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse(field, value, f"a number {low:g}..{high:g}")
    from launch.schema import number

    finite = number(value)
    if finite is None or not low <= finite <= high:
        raise _refuse(field, value, f"a finite number {low:g}..{high:g}")
    return finite


# Control characters (C0, DEL, C1) and the escape sequences that start with them; beyond ASCII,
# every Unicode category C* (Cc control, Cf format: bidi overrides, zero-width; Cs a lone
# surrogate, which no encoder writes; Co private use; Cn unassigned) and the line and paragraph
# separators (Zl, Zp: a line break to str.splitlines)
_ESCAPE_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NOT_SHOWN = ("Zl", "Zp")


def _shown_as_is(c: str) -> bool:
    category = unicodedata.category(c)
    return category[0] != "C" and category not in _NOT_SHOWN


def terminal(value: object) -> TerminalText:
    """Text safe to print plainly (one line, and UTF-8 can encode it): escape sequences
    removed; other control, format, surrogate, private-use and unassigned characters and line
    separators shown as '?'."""
    text = _CONTROL.sub("?", _ESCAPE_SEQUENCE.sub("", str(value)))
    if text.isascii():
        return TerminalText(text)
    return TerminalText("".join(c if _shown_as_is(c) else "?" for c in text))


def rich_text(value: object) -> TerminalText:
    """Text safe inside rich markup too: `terminal`, then markup made inert ('[red]' prints as written)."""
    from rich.markup import escape

    return TerminalText(escape(terminal(value)))
