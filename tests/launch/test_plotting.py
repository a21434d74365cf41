"""launch.plotting: every figure is made by it, so a name from another site is drawn as text
(issue 64 C-13: "$\\foo$" is not mathtext), and nothing else reaches matplotlib's pyplot,
backend or rcParams."""

import ast
import io
import warnings
from pathlib import Path

import matplotlib

from tests.conftest import REPO

HELPER = REPO / "launch" / "plotting.py"
DRAWING_ROOMS = ("launch", "bench", "benchmarks", "containers")
# what makes a figure or changes how text is drawn: only the helper touches these
GLOBAL_MODULES = ("matplotlib", "matplotlib.pyplot", "matplotlib.pylab", "matplotlib.style", "pylab")


def drawing_bypasses(path: Path, root: Path = REPO) -> list[str]:
    """Where `path` reaches matplotlib other than through launch.plotting: an import of pyplot,
    of matplotlib itself (its rcParams, `use`) or of its style, or a matplotlib Figure constructed
    by hand. Type and artist modules (matplotlib.figure for Figure as a type, .ticker, .container)
    are fine, and so is the bundle's own Figure (a figure of merit, launch.kinds)."""
    found = []
    where = path.relative_to(root)
    tree = ast.parse(path.read_text())
    figure_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "matplotlib.figure"
        for alias in node.names
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"{where}:{node.lineno}: imports {alias.name}"
                for alias in node.names
                if alias.name in GLOBAL_MODULES or alias.name.startswith("matplotlib.pyplot")
            ]
        elif isinstance(node, ast.ImportFrom) and node.module in GLOBAL_MODULES:
            found.append(f"{where}:{node.lineno}: imports from {node.module}")
        elif isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id in figure_names)
            or (isinstance(node.func, ast.Attribute) and getattr(node.func.value, "attr", None) == "figure")
        ):
            found.append(f"{where}:{node.lineno}: constructs a matplotlib {ast.unparse(node.func)}")
    return found


def test_every_figure_is_made_through_the_plotting_helper():
    paths = [p for room in DRAWING_ROOMS for p in sorted((REPO / room).rglob("*.py")) if p != HELPER]
    assert len(paths) > 100
    assert [line for path in paths for line in drawing_bypasses(path)] == []


def test_the_bypass_check_sees_each_way_around_the_helper(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import matplotlib\nimport matplotlib.pyplot as plt\nfrom matplotlib import pyplot\n"
        "from matplotlib.pyplot import subplots\nfrom matplotlib.figure import Figure\n"
        "from matplotlib.ticker import FuncFormatter\nimport matplotlib.figure\nfig = Figure()\n"
        "other = matplotlib.figure.Figure()\nfrom launch.kinds.kind import Figure as Merit\nm = Merit('x')\n"
    )
    assert drawing_bypasses(bad, tmp_path) == [
        "bad.py:1: imports matplotlib",
        "bad.py:2: imports matplotlib.pyplot",
        "bad.py:3: imports from matplotlib",
        "bad.py:4: imports from matplotlib.pyplot",
        "bad.py:8: constructs a matplotlib Figure",
        "bad.py:9: constructs a matplotlib matplotlib.figure.Figure",
    ]


def test_a_figure_draws_math_and_control_characters_as_text_even_after_rc_is_reset():
    """Drawn after rcParams were put back to matplotlib's defaults (parse_math on): the helper
    turns it off again for each figure; no missing-glyph warning echoes the text."""
    from launch import plotting

    with matplotlib.rc_context(), warnings.catch_warnings(record=True) as caught:
        matplotlib.rcdefaults()
        warnings.simplefilter("default")
        assert matplotlib.rcParams["text.parse_math"] is True
        fig, ax = plotting.subplots(figsize=(3, 2), dpi=50)
        ax.set_title("$\\foo$ \x1b[8m")
        ax.plot([1, 2], [1, 2], label="$\\bar{$")
        ax.legend()
        fig.savefig(io.BytesIO(), format="png")  # mathtext would raise on either label
        plotting.close(fig)
    assert ax.title.get_text() == "$\\foo$ \x1b[8m" and ax.title.get_parse_math() is False
    assert [str(w.message) for w in caught if "Glyph" in str(w.message)] == []
