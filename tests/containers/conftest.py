"""Fixtures the container tests share."""

from __future__ import annotations

import shutil

import pytest

from containers import local_registry
from tests.conftest import alive, need


@pytest.fixture
def registry(tmp_path):
    """A real OCI registry (Debian's docker-registry) on a free port of this host, data under
    tmp_path; stopped after the test, checked by pid to be gone, and its data removed even when
    the test failed (GBs a failed test's kept tmp_path would otherwise hold from the tests after it)."""
    need(local_registry.available(), "docker-registry not installed (scripts/setup.sh --test installs it)")
    reg = local_registry.LocalRegistry(tmp_path / "registry").start()
    try:
        yield reg
    finally:
        reg.stop()
        shutil.rmtree(tmp_path / "registry", ignore_errors=True)
        assert alive([reg.pid]) == set(), "the registry outlived its test"
