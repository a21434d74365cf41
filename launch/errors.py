"""User-facing errors: the CLI prints the message as one line and exits 2."""


class UsageError(Exception):
    """Bad input or an unmet precondition, reported before anything runs."""
