"""Freshness, as far as it is decidable without a transparency log: what this site pulled before
tells a rollback and a pin.

    pinned_unix(earlier, archive_digest)              -> when this archive was first pulled here, or None
    refuse_rollback(earlier, site, created, run_ids)  -> UsageError if an older archive would replace a newer

A rollback is an archive older (its signed `created` date) than one already pulled for the same
site and run id: a registry, or a thief of an old archive, serving yesterday's results again.
An archive pulled again (the same digest) is not a rollback: it is already here.

What it cannot decide: a stolen, not yet revoked key signs anything with any date, so a thief can
backdate; once the key is revoked (launch.sharing.trusted_keys, `revoked-since=`), only archives
pinned here before that day are still accepted. docs/sharing.md says so.
"""

from __future__ import annotations

import json
from typing import Iterable

from launch.errors import UsageError
from launch.sharing import annotations as notes
from launch.sharing.pulled import Pulled


def pinned_unix(earlier: Iterable[Pulled], archive_digest: str) -> float | None:
    """When the archive of this digest was first pulled here (None: never)."""
    times = [record.pulled_unix for record in earlier if record.archive_digest == archive_digest]
    return min(times) if times else None


def _run_ids(record: Pulled) -> set[str]:
    found = set()
    for path in record.result_paths:
        try:
            run_id = json.loads(path.read_text()).get("run_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(run_id, str):
            found.add(run_id)
    return found


def refuse_rollback(
    earlier: Iterable[Pulled], site: str, archive_digest: str, created: str, run_ids: set[str], where: str
) -> None:
    """Refuse an archive of `site` created before one already pulled that holds any of `run_ids`."""
    for record in earlier:
        if record.site != site or record.archive_digest == archive_digest:
            continue
        newer = record.annotations.get(notes.CREATED, "")
        shared_ids = run_ids & _run_ids(record) if newer > created else set()
        if shared_ids:
            shared = sorted(shared_ids)[0]
            raise UsageError(
                f"{where}: site {site}'s archive of {created} would replace run {shared} of its archive of {newer}, "
                f"already pulled ({record.reference}): a rollback, refused"
            )
