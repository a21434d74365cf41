"""Words from another site reach this one's terminal and figures as text (issue 64): a lone
surrogate in an archive's run id (C-11) and mathtext in an allreduce result's fabric (C-13), each
through the real command line."""

import json
import os
from pathlib import Path

from tests.conftest import fabric_bench
from tests.security.conftest import RUN_ID, hostile_result, predict_inputs
from launch.provenance import archive as archives

# a terminal's UTF-8, strict: what a surrogate cannot be written to (also where the locale is C)
STRICT_UTF8 = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}


def test_c11_a_lone_surrogate_in_an_archive_s_run_id_is_shown_as_a_question_mark(tmp_path):
    """High and low surrogates (JSON's \\ud800, \\udcff: valid JSON, no UTF-8 can encode them) in
    the run id; the archive's member keeps a plain name, as an attacker's may."""
    result = hostile_result(run_id="x\ud800y\udcffz")
    archive = tmp_path / "other-site.tar.gz"
    archives.write({f"results/{RUN_ID}/result.json": json.dumps(result).encode()}, archive)
    proc = fabric_bench("replay", str(archive), "--dry-run", cwd=tmp_path, env=STRICT_UTF8)
    assert "Traceback" not in proc.stderr and "UnicodeEncodeError" not in proc.stderr, proc.stderr[-800:]
    assert proc.returncode == 0, proc.stderr[-800:]
    assert "x?y?z: torch ddp resnet18 x2" in proc.stdout


def test_c13_mathtext_in_another_site_s_fabric_name_is_drawn_and_printed_as_text(tmp_path):
    """`$\\foo$` is an unknown mathtext command (matplotlib raised at savefig); `[red]` would be
    rich markup. Both are printed and drawn as written."""
    fabric = "$\\foo$[red]"
    inputs = predict_inputs("ddp")
    inputs["allreduce"]["spec"]["fabric"] = fabric
    paths = {}
    for name, data in inputs.items():
        paths[name] = tmp_path / name / "result.json"
        paths[name].parent.mkdir()
        paths[name].write_text(json.dumps(data))
    proc = fabric_bench(
        "predict", "--train", str(paths["train"]), "--allreduce", str(paths["allreduce"]), "--ranks", "1,2",
        "--output", str(tmp_path / "out"), cwd=tmp_path, env=STRICT_UTF8,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-800:]
    assert proc.returncode == 0, proc.stderr[-800:]
    assert f"fabric {fabric}: alpha" in proc.stdout
    assert Path(tmp_path / "out" / "predict.png").read_bytes().startswith(b"\x89PNG")
    drawn = json.loads((tmp_path / "out" / "predict.json").read_text())
    assert [f["name"] for f in drawn["fabrics"]] == [fabric]


def test_terminal_text_shows_every_unicode_c_category_and_line_separator_as_a_question_mark():
    """Cc, Cf, Cs (high, low), Co, Cn, Zl, Zp each become '?'; escapes go and markup is inert as
    before; printable text beyond ASCII (accents, CJK, emoji, '$\\foo$') is kept."""
    from launch.shapes import rich_text, terminal

    hidden = "\x07\u202e\ud800\udcff\ue000\U0010fffd\u0378\u2028\u2029\x85"
    assert terminal(f"a{hidden}b") == "a" + "?" * len(hidden) + "b"
    assert terminal("é中😀 $\\foo$ \x1b[31mred\x1b[0m") == "é中😀 $\\foo$ red"
    assert rich_text("[red]x\udc80") == "\\[red]x?"
    terminal(hidden).encode("utf-8")  # what a strict terminal writes


def test_a_lone_surrogate_in_another_site_s_json_is_read_as_a_question_mark():
    """At the door (containers.untrusted.load_json), escaped or raw; a pair is the character it encodes."""
    from containers.untrusted import load_json

    escaped = b'{"run\\ud800": ["x\\udcffy", "\\ud83d\\ude00", 1.5]}'
    assert load_json(escaped, "a result", 1000) == {"run?": ["x?y", "\U0001f600", 1.5]}
    assert load_json(b'"\xed\xa0\x80"', "a result", 1000) == "?"  # raw: json reads bytes with surrogatepass
    assert load_json('"\\uDC80 plain"', "a result", 1000) == "? plain"
