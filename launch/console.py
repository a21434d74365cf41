"""The one console set-up: a terminal keeps its own width; a pipe or log gets a
fixed wide one, so tables are not wrapped at rich's default of 80 columns."""

from __future__ import annotations

import sys
from typing import IO, Optional

from rich.console import Console

PIPE_WIDTH = 200


def console(*, stderr: bool = False, file: Optional[IO[str]] = None) -> Console:
    stream = file or (sys.stderr if stderr else sys.stdout)
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=file, stderr=stderr, width=None if tty else PIPE_WIDTH)
