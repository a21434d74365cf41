"""Whose runs are these: this site's origin hosts, and the refusal of another site's result that
claims one of them (issue 64, C-7: a result speaks only for the site that signed it).

A result names the host that wrote it in its `origin` field (launch.results.store.origin_of:
'host@commit'). This site's origin hosts are fnmatch patterns: those given (`fabric-bench
baseline --origin`), else $FABRIC_BENCH_ORIGINS (comma-separated), else this host. Baselines,
verdicts and metrics read this site's runs by that rule, and only rows written here, never pulled
ones (launch.analysis.baseline.load; the store records the site a row was pulled from). A pull
refuses, before it imports anything, a result another site signed that claims one of these hosts
(`refuse_claimed_origin`), compared without regard to case, as host names are.
"""

from __future__ import annotations

import fnmatch
import os
import socket
from typing import Mapping, Optional, Sequence

from launch.errors import UsageError
from launch.results.result import Result
from launch.results.store import origin_of
from launch.shapes import terminal

ORIGINS_ENV = "FABRIC_BENCH_ORIGINS"  # comma-separated patterns of this site's origin hosts


def origin_patterns(given: Sequence[str] = ()) -> list[str]:
    """This site's origin hosts: the patterns given, else $FABRIC_BENCH_ORIGINS, else this host."""
    if given:
        return list(given)
    said = [p.strip() for p in os.environ.get(ORIGINS_ENV, "").split(",") if p.strip()]
    return said or [socket.gethostname()]


def host_of(origin: str) -> str:
    """The host of a store origin ('host@commit'; results from before origins: 'rank,hosts@unknown')."""
    return str(origin).rsplit("@", 1)[0]


def matches(host: str, patterns: Sequence[str]) -> bool:
    """The host matches one of the patterns (fnmatch, case as given: baselines' rule)."""
    return any(fnmatch.fnmatchcase(host, p) for p in patterns)


def claimed_pattern(host: str, patterns: Sequence[str]) -> Optional[str]:
    """The first of this site's patterns the host matches, without regard to case; None: none."""
    return next((p for p in patterns if fnmatch.fnmatchcase(host.casefold(), p.casefold())), None)


def refuse_claimed_origin(results: Mapping[str, Result], site: str, patterns: Optional[Sequence[str]] = None) -> None:
    """Refuse (UsageError, one line) when a result pulled from `site` (the site that signed it;
    `results`: name -> result) claims one of this site's origin hosts (`patterns`, default
    origin_patterns()): another site cannot write into this site's history."""
    ours = origin_patterns() if patterns is None else list(patterns)
    for name, result in sorted(results.items()):
        host = host_of(origin_of(result))
        pattern = claimed_pattern(host, ours)
        if pattern is not None:
            raise UsageError(
                f"{terminal(name)[:120]}: a result signed by site {terminal(site)[:80]} claims this site's origin "
                f"host {terminal(host)[:80]!r} (it matches {terminal(pattern)[:80]!r}, of ${ORIGINS_ENV} or this "
                "host's name): refused"
            )
