"""The docs hold together: the generated reference pages (docs/reference/) are what the code
gives now (a changed option, help text or fabric preset fails here until `make docs`
regenerates them), and every relative link of the README and docs/ reaches a file and heading.
(Their command lines run in tests/test_readme.py.)"""

from __future__ import annotations

import importlib.util
import re
from tests.conftest import REPO


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_reference_pages_are_current():
    module = gen_docs()
    stale = module.stale()
    assert not stale, f"stale: {', '.join(stale)}; regenerate: {module.REGENERATE}"


def test_the_reference_names_every_command_option_and_fabric():
    import typer.main

    from containers.fabrics import PROFILES
    from launch.cli.app import app

    module = gen_docs()
    cli, fabrics = module.cli_reference(), module.fabrics_reference()
    root = typer.main.get_command(app)
    for group in (root, *(c for c in root.commands.values() if hasattr(c, "commands"))):
        for name, command in group.commands.items():
            assert f" {name}\n" in cli, f"command {name} missing from the CLI reference"
            for option in (p for p in command.params if p.param_type_name == "option" and not p.hidden):
                assert f"`{option.opts[0]}" in cli, f"{name} {option.opts[0]} missing"
    for name in PROFILES:
        assert f"\n## {name}\n" in fabrics


def test_check_mode_names_a_stale_page_and_how_to_regenerate(tmp_path, capsys):
    module = gen_docs()
    assert module.main([], root=tmp_path) == 0  # writes both pages under tmp_path
    assert module.main(["--check"], root=tmp_path) == 0
    page = tmp_path / "docs" / "reference" / "fabrics.md"
    page.write_text(page.read_text().replace("`ob1`", "`cm`", 1))
    (tmp_path / "docs" / "reference" / "cli.md").unlink()
    capsys.readouterr()
    assert module.main(["--check"], root=tmp_path) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"docs/reference/{name}.md is stale; regenerate: {module.REGENERATE}" for name in ("cli", "fabrics")]
    assert module.main(["--bogus"], root=tmp_path) == 2


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def test_every_relative_link_reaches_a_file_and_heading():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        text = without_code_blocks(page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.is_file():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif fragment:
                headings = re.findall(r"^#+ (.+)$", without_code_blocks(linked.read_text()), re.M)
                if fragment not in {anchor(h) for h in headings}:
                    broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
    assert anchor("Slingshot: the host's libfabric ABI") == "slingshot-the-hosts-libfabric-abi"
