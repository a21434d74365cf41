"""Stop signals as requests, not asynchronous exceptions.

Inside `stop_requests()` (the run and sweep commands), SIGINT, SIGTERM and SIGHUP
only note that a stop was asked; the code that waits on a run (launch.ranks.execute)
looks at `requested()` and ends the run's processes, the run writes its result
as interrupted, and `check()` then raises `Interrupted` at a safe point, so the
command exits with 128 + the signal (130, 143, 129). The first signal counts;
later ones change nothing while the run ends (the keeper bounds how long).
Outside that context Python's defaults stay (Ctrl-C raises KeyboardInterrupt).
"""

from __future__ import annotations

import contextlib
import signal
from types import FrameType
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_asked: list[int] = []


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; `except KeyboardInterrupt` catches it too."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def interrupted_by(exc: BaseException) -> Interrupted:
    """A plain KeyboardInterrupt (Python's own Ctrl-C) is a SIGINT."""
    return exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)


def _note(signum: int, frame: FrameType | None) -> None:
    if not _asked:
        _asked.append(signum)


def requested() -> int | None:
    """The stop signal received so far, if any."""
    return _asked[0] if _asked else None


def check() -> None:
    """Raise Interrupted if a stop was asked (call where stopping loses nothing)."""
    if _asked:
        raise Interrupted(_asked[0])


@contextlib.contextmanager
def stop_requests() -> Iterator[None]:
    """Stop signals become requests for the duration (main thread only)."""
    previous = {sig: signal.signal(sig, _note) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _asked.clear()


@contextlib.contextmanager
def stoppable_command() -> Iterator[None]:
    """stop_requests() around a CLI command: a stop ends it with one line and exit
    128 + the signal (typer would turn a KeyboardInterrupt into a plain 130)."""
    import sys

    import typer

    try:
        with stop_requests():
            yield
    except KeyboardInterrupt as exc:
        stop = interrupted_by(exc)
        print(f"fabric-bench: interrupted by {stop.name}; finished results are kept", file=sys.stderr)
        raise typer.Exit(stop.exit_code) from None
