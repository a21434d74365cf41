"""Naming a repository: REGISTRY[/REPO][@sha256:...], HTTPS unless the registry is on this host
or --insecure says so."""

from __future__ import annotations

import pytest

from launch.errors import UsageError
from launch.sharing.registry import DEFAULT_REPOSITORY, at

DIGEST = "sha256:" + "e" * 64


@pytest.mark.parametrize(
    "text, insecure, base, digest",
    [
        ("127.0.0.1:5000", False, f"http://127.0.0.1:5000/v2/{DEFAULT_REPOSITORY}", ""),
        (f"localhost:5000@{DIGEST}", False, f"http://localhost:5000/v2/{DEFAULT_REPOSITORY}", DIGEST),
        ("registry.example.org/hpc/results", False, "https://registry.example.org/v2/hpc/results", ""),
        (
            f"oras://registry.example.org/hpc/results@{DIGEST}",
            False,
            "https://registry.example.org/v2/hpc/results",
            DIGEST,
        ),
        ("registry.internal:5000/results", True, "http://registry.internal:5000/v2/results", ""),
    ],
)
def test_a_repository_is_named_with_its_scheme_and_digest(text: str, insecure: bool, base: str, digest: str) -> None:
    repository, pinned = at(text, insecure)
    assert (repository.base, pinned) == (base, digest)


@pytest.mark.parametrize(
    "text, words",
    [
        ("https://registry.example.org/x", "not a repository"),
        ("registry.example.org/Hpc/Results", "not a repository"),
        ("registry.example.org/hpc/results:latest", "not a tag"),
        ("-oProxyCommand=x/y", "not a repository"),
        ("registry.example.org/hpc/results@sha256:abc", "not a repository"),
    ],
)
def test_what_is_not_a_repository_is_refused_in_one_line(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        at(text)
