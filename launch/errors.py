"""User-facing errors: the CLI prints the message as one line and exits 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input or an unmet precondition, reported before anything runs.

    `fields` names the RunSpec fields the error is about, most likely culprit
    first, so an experiment file can point at its own key (launch.plan.experiment.blame)
    without reading the message."""

    def __init__(self, message: str, *, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = tuple(fields)
