"""A site file may name its registry: url, the signed reference file, who may sign it, and
plain HTTP only for a registry on the same host."""

from __future__ import annotations

import pytest

from launch.errors import UsageError
from launch.site.config import load_site, site_to_toml


def _site(tmp_path, body: str):
    path = tmp_path / "site.toml"
    path.write_text(body)
    return load_site(path)


def test_registry_table_is_read_and_written_back(tmp_path):
    site = _site(
        tmp_path,
        '[registry]\nurl = "registry.example.org/hpc/fabric-bench"\n'
        'references = "/shared/images.json"\nallowed_signers = "/shared/allowed"\n',
    )
    assert site.registry.url == "registry.example.org/hpc/fabric-bench"
    assert str(site.registry.references) == "/shared/images.json" and not site.registry.insecure
    again = _site(tmp_path, site_to_toml(site))
    assert again.registry == site.registry
    assert _site(tmp_path, 'runtime = "apptainer"\n').registry is None


@pytest.mark.parametrize(
    "body, message",
    [
        ('[registry]\nurl = "registry.example.org/x"\ninsecure = true\n', "plain HTTP only on this host"),
        ('[registry]\nreferences = "/x.json"\n', r"\[registry\].url"),
        ('[registry]\nurl = "h/x"\nreferences = "relative.json"\n', r"\[registry\].references"),
        ('[registry]\nurl = "h/x; rm -rf /"\n', r"\[registry\].url"),
        ('[registry]\nurl = "h/x"\ntoken = "secret"\n', "token"),
    ],
)
def test_bad_registry_tables_are_one_clear_line(tmp_path, body, message):
    with pytest.raises(UsageError, match=message):
        _site(tmp_path, body)
    assert _site(tmp_path, '[registry]\nurl = "127.0.0.1:5000/fb"\ninsecure = true\n').registry.insecure
