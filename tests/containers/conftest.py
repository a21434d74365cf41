"""Fixtures the container tests share."""

from __future__ import annotations

import pytest

from containers import local_registry
from tests.conftest import alive, need


@pytest.fixture
def registry(tmp_path):
    """A real OCI registry (Debian's docker-registry) on a free port of this host, data under
    tmp_path; stopped after the test, and checked by pid to be gone."""
    need(local_registry.available(), "docker-registry not installed (scripts/setup.sh --test installs it)")
    reg = local_registry.LocalRegistry(tmp_path / "registry").start()
    try:
        yield reg
    finally:
        reg.stop()
        assert alive([reg.pid]) == set(), "the registry outlived its test"
