"""A preflight check and its verdicts (ok | unknown | warn | fail, worst last)."""

from __future__ import annotations

from dataclasses import dataclass

VERDICT_ORDER = ("ok", "unknown", "warn", "fail")  # worst last


@dataclass
class Check:
    check: str  # what was checked: "libfabric", "device /dev/infiniband/uverbs0"
    verdict: str  # ok | warn | fail | unknown
    detail: str  # what was seen
    fix: str = ""  # what to do about a warn or fail
    host: str | None = None  # the host's value (version, path mode)
    image: str | None = None  # the image's value

    def line(self) -> str:
        text = f"{self.verdict:<7} {self.check}: {self.detail}"
        return text + (f" -> {self.fix}" if self.fix and self.verdict in ("warn", "fail") else "")


def worst(checks: list[Check]) -> str:
    return max((c.verdict for c in checks), key=VERDICT_ORDER.index, default="ok")
