"""The fuzzer (issue 50): hostile values driven into every field of every foreign input, through
each entry point, with a fixed seed.

Oracles:
- a job script's #SBATCH lines: Slurm's own sbatch (`sbatch -vv` prints the options it read
  before it contacts a controller): the options it reads must be exactly the intended ones;
- a job script's shell lines: bash (`bash -n`), and the srun line splits back into exactly the
  intended argv;
- every entry point (replay, sweep, compare, report, predict, locate's file in `sweep
  --exclude-located`, image pull's reference file): exit 0, or exit 2 with one line; no
  traceback; no escape byte on the terminal, whose streams encode UTF-8 strictly (a lone
  surrogate is an error there, as on a real terminal); no canary created; nothing written
  outside the test's folder; bounded time. Unicode of every category C* (lone surrogates among
  them) and line separators are driven into an archive's fields and into predict's results.

FABRIC_BENCH_FUZZ_EXAMPLES=N runs N examples per case (the default keeps CI's share of this
file under 2 minutes); the seed is fixed (derandomize), so a failure replays.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from launch import shapes
from launch.errors import UsageError
from launch.fleet import slurm
from launch.ranks.launchers import rank_env, sbatch_script, srun_argv
from launch.ranks.runspec import RunSpec
from launch.runs.run import make_plan
from launch.site.config import FabricSite, Site
from tests.slurm_cluster import slurm_conf
from tests.conftest import REPO, need
from tests.security.conftest import hostile_result, predict_inputs, write_archive

EXAMPLES = int(os.environ.get("FABRIC_BENCH_FUZZ_EXAMPLES", "120"))
ENTRY_LIMIT_S = 20  # one entry point's answer to one hostile input (a 2-core machine under load)
fuzz = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Pieces an attacker combines: every quoting and escape character of the sinks' parsers (sbatch,
# bash, rich, terminals), Unicode digits and look-alikes, paths that hang or leak, option text
ATOMS = (
    "'", '"', "\\", "\n", "\r", "\x00", "\t", " ", "#", "=", ",", ";", "%", "%j", "$(touch CANARY)", "`id`",
    "\x1b[8m", "\x1b]0;t\x07", "\x9b2J", "[red]", "[/red]", "[link=x]", "\u202e", "\u200b", "é", "１", "٣", "Ⅻ",
    "--bogusopt", "--export=ALL,BASH_ENV=/tmp/x", "-", "..", "/dev/zero", "/etc/shadow", "n[1-2]", "{a,b}", "*",
    "a", "Z", "0", "9", ":", "1-", "00:",
)  # fmt: skip
near_edge = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.+:-]{0,12}", fullmatch=True)  # passes a shape, or nearly
hostile_text = st.one_of(
    st.lists(st.sampled_from(ATOMS), max_size=6).map("".join),
    near_edge,
    st.text(max_size=12),
    st.sampled_from(("x" * 5000, "1" * 400, "9" * 30)),
)
hostile_number = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from((0, -1, 2**31, 2**62, 100_000)),
    st.floats(allow_nan=True, allow_infinity=True),
)
hostile_value = st.one_of(
    hostile_text,
    hostile_number,
    st.none(),
    st.booleans(),
    st.lists(hostile_text, max_size=3),
    st.dictionaries(hostile_text, hostile_text, max_size=2),
)


slurm_value = st.one_of(st.none(), near_edge, hostile_value)  # each of several fields: often passing


def one_line_refusal(exc: UsageError, where: str = "") -> None:
    event(f"refused{where}")
    text = str(exc)
    assert text and "\n" not in text and "\x1b" not in text and "\r" not in text, repr(text)


# ------------------------------------------------------------------ Slurm's parser as the oracle


@pytest.fixture(scope="module")
def sbatch_conf(tmp_path_factory) -> Path:
    """A slurm.conf naming a controller that is not there: sbatch parses the script, prints what
    it read with -vv, and only then would try to connect (the oracle stops it there)."""
    need(subprocess.run(["which", "sbatch"], capture_output=True).returncode == 0, "sbatch (slurm-wlm) not installed")
    folder = tmp_path_factory.mktemp("sbatch-oracle")
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, "localhost", 1, ctld_port=9, slurmd_port=9))  # port 9: nobody answers
    return conf


def sbatch_reads(script: str, conf: Path) -> dict[str, str]:
    """The options sbatch read from `script` (its -vv "defined options" table), or an
    '(error)' entry with the line sbatch stopped at."""
    path = conf.parent / "job.sbatch"
    path.write_text(script)
    proc = subprocess.Popen(
        ["sbatch", "-vv", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env={**os.environ, "SLURM_CONF": str(conf)},
    )
    options: dict[str, str] = {}
    inside = False
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            body = line.removeprefix("sbatch: ").rstrip("\n")
            if body == "defined options":
                inside = True
            elif body == "end of defined options":
                return options
            elif inside and " : " in body:
                key, value = body.split(" : ", 1)
                options[key.strip()] = value
            elif "error" in body or "fatal" in body or "unrecognized" in body:
                return {"(error)": body}
    finally:
        proc.kill()
        proc.wait()
    return {"(error)": "no options table"}


@settings(fuzz, max_examples=EXAMPLES * 10)  # cheap (sbatch stops before any network): more cases
@given(
    partition=slurm_value,
    account=slurm_value,
    time_limit=st.one_of(slurm_value, st.from_regex(r"\d{1,3}(-\d{1,2})?(:\d{1,2}){0,2}", fullmatch=True)),
    exclude=slurm_value,
    name=st.one_of(near_edge, hostile_text),
    folder=st.one_of(near_edge, hostile_text),
)
def test_slurm_reads_exactly_the_intended_options_or_the_value_is_refused(
    sbatch_conf, partition, account, time_limit, exclude, name, folder
):
    try:
        request = slurm.Request.parsed(partition, account, time_limit, exclude)
        job = slurm.job_name(name)
        output = shapes.slurm_log("output", f"/tmp/fuzz/{folder}")
    except UsageError as exc:
        one_line_refusal(exc)
        return
    script = slurm.job_script(
        name=job,
        nodes=2,
        tasks_per_node=3,
        output=output,
        announce="fuzz",
        body=["true"],
        partition=request.partition,
        account=request.account,
        time=request.time,
        exclude=request.exclude,
    )
    intended = {
        "job-name": job,
        "nodes": "2",
        "ntasks-per-node": "3",
        "output": output,
        "partition": request.partition,
        "account": request.account,
        "time": request.time,
        "exclude": request.exclude,
    }
    event("reached sbatch")
    read = sbatch_reads(script, sbatch_conf)
    for key, value in intended.items():
        if value is not None:
            assert read.get(key) == value, (key, read)
    # nothing more than what was written: an injected option would be one more key
    assert set(read) <= set(intended) | {"exclusive", "verbose", "nodes", "ntasks"}, read


def test_the_oracle_sees_an_injection_that_shell_quoting_lets_through(sbatch_conf):
    """Why the shapes exist: shlex.quote is right for bash and wrong for sbatch. A partition
    value quoted the old way gives Slurm a second option; the shape refuses it."""
    value = '\\\'" --bogusopt "'
    script = f"#!/bin/bash\n#SBATCH --partition={shlex.quote(value)}\ntrue\n"
    read = sbatch_reads(script, sbatch_conf)
    assert read.get("partition") != value  # Slurm did not read what bash quoting meant
    with pytest.raises(UsageError, match="a Slurm name is"):
        slurm.Request.parsed(partition=value)


# ------------------------------------------------------------------ a spec's every field


SPEC_FIELDS = sorted(RunSpec().as_dict())


@fuzz
@given(field=st.sampled_from(SPEC_FIELDS), value=hostile_value, benchmark=st.sampled_from(("train", "halo")))
def test_every_spec_field_is_refused_in_one_line_or_reaches_sbatch_and_srun_as_intended(
    sbatch_conf, tmp_path_factory, field, value, benchmark
):
    data = RunSpec(
        launcher="sbatch",
        runtime="apptainer",
        image="/images/fabric.sif",
        fabric="ethernet",
        nodes=2,
        ranks=4,
        benchmark=benchmark,
        partition="gpu",
        time_limit="30",
    ).as_dict()
    data[field] = value
    try:
        spec = RunSpec.from_dict(data, "fuzzed result")
    except UsageError as exc:
        one_line_refusal(exc)
        return
    run_dir = tmp_path_factory.mktemp("run") / "RUN"
    try:
        plan, _ = make_plan(spec, run_dir, Site(fabrics={"ethernet": FabricSite(interface="eth0")}))
    except UsageError as exc:  # a plan may refuse what the spec's shape allows (an image not here, ...)
        one_line_refusal(exc, " by the plan")
        return
    event("reached sbatch")
    script = sbatch_script(spec, plan)
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0
    srun_line = script.rstrip("\n").splitlines()[-1]
    assert shlex.split(srun_line) == srun_argv(spec, plan, rank_env(spec, plan))
    read = sbatch_reads(script, sbatch_conf)
    assert "(error)" not in read, read
    request = slurm.Request.parsed(spec.partition, spec.account, spec.time_limit, spec.exclude_nodes)
    for key, value in (("partition", request.partition), ("account", request.account), ("time", request.time)):
        assert read.get(key) == value, (key, read)
    assert set(read) <= {"job-name", "nodes", "ntasks-per-node", "exclusive", "output", "partition", "account",
                         "time", "exclude", "gpus-per-node", "verbose", "ntasks"}, read  # fmt: skip


# ------------------------------------------------------------------ every entry point


def terminal_stream() -> io.TextIOWrapper:
    """A terminal's stream: UTF-8, strict (a lone surrogate cannot be written, as on a real one;
    a StringIO took anything)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def run_cli(*argv: str, cwd: Path) -> tuple[int, str, str]:
    """`fabric-bench ARGV` in this process (the real entry point, its exit code and output)."""
    from launch.cli.app import main

    out, err = terminal_stream(), terminal_stream()
    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = ["fabric-bench", *argv]
    os.chdir(cwd)
    code: int = 0

    def too_long(signum, frame):
        raise TimeoutError(f"fabric-bench {' '.join(argv)[:200]} took over {ENTRY_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(ENTRY_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.argv = old_argv
        os.chdir(old_cwd)
    return code, out.buffer.getvalue().decode("utf-8"), err.buffer.getvalue().decode("utf-8")


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def entry_point_holds(
    folder: Path, *argv: str, written: tuple[str, ...] = (), answers=(0,), one_per_item: bool = False
) -> None:
    """One entry point given a hostile input: it answers (`answers`: its exit codes with an
    answer) or refuses in one line (`one_per_item`: one line for each item it refuses, as a
    listing does), quickly, printing no escape byte, running no payload, writing only where it may."""
    before = files_under(folder)
    code, out, err = run_cli(*argv, cwd=folder)
    assert code in (*answers, 2), (code, out[-500:], err[-500:])
    assert "Traceback" not in out + err
    assert "\x1b" not in out + err and "\x9b" not in out + err, (out + err)[-300:]
    event(f"exit {code}")
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and (len(lines) == 1 or one_per_item and all(x.startswith("fabric-bench: ") for x in lines)), err
    assert not list(folder.rglob("CANARY*"))  # the payload atom touches it in the working folder
    new = files_under(folder) - before
    allowed = [folder / w for w in written]
    assert all(any(p == a or a in p.parents for a in allowed) for p in new), sorted(map(str, new))[:5]


RESULT_FIELDS = ("model", "run_id", "framework", "engine", "benchmark", "status", "world_size", "argv", "env")


@fuzz
@given(where=st.sampled_from(("spec", "result")), field=st.sampled_from(SPEC_FIELDS + list(RESULT_FIELDS)),
       value=hostile_value)  # fmt: skip
def test_replay_dry_run_holds_against_any_field_of_an_archive(tmp_path_factory, where, field, value):
    folder = tmp_path_factory.mktemp("replay")
    result = hostile_result()
    if where == "spec" and field in result["spec"]:
        result["spec"][field] = value
    else:
        result[field] = value
    archive = write_archive(folder / "other-site.tar.gz", [result])
    entry_point_holds(folder, "replay", str(archive), "--dry-run", written=())


def toml_value(value) -> str:
    """A TOML literal for a hostile value (a value TOML cannot carry becomes a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value == float("inf") else "-inf" if value == float("-inf") else repr(value))
        )
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value) if value is not None else "")


RUN_KEYS = ("partition", "account", "model", "image", "hostfile", "exclude_nodes", "fabric", "iters", "warmup",
            "batch_size", "grid", "max_bytes", "launcher", "runtime", "engine", "nodes", "gpus_per_node")  # fmt: skip


@fuzz
@given(key=st.sampled_from(RUN_KEYS + ("env",)), value=hostile_value, env_name=hostile_text)
def test_sweep_dry_run_holds_against_any_run_key_of_an_experiment_file(tmp_path_factory, key, value, env_name):
    folder = tmp_path_factory.mktemp("sweep")
    if key == "env":
        run = f"[run.env]\n{json.dumps(env_name or 'X')} = {toml_value(value)}\n"
    else:
        run = (
            f'[run]\nlauncher = "sbatch"\n{key} = {toml_value(value)}\n'
            if key != "launcher"
            else (f"[run]\nlauncher = {toml_value(value)}\n")
        )
    experiment = folder / "e.experiment.toml"
    experiment.write_text(f'[experiment]\nname = "fuzz"\n[matrix]\nnodes = [2]\n{run}', encoding="utf-8")
    entry_point_holds(folder, "sweep", str(experiment), "--dry-run", "--dir", str(folder / "s"), written=("s",))


@fuzz
@given(key=st.sampled_from(("name", "description", "repetitions", "time_limit_s")), value=hostile_value)
def test_sweep_dry_run_holds_against_any_key_of_an_experiment_s_head(tmp_path_factory, key, value):
    folder = tmp_path_factory.mktemp("head")
    experiment = folder / "e.experiment.toml"
    experiment.write_text(
        f'[experiment]\n{key} = {toml_value(value)}\n[matrix]\nnodes = [1, 2]\n[run]\nlauncher = "sbatch"\n',
        encoding="utf-8",
    )
    entry_point_holds(
        folder, "sweep", str(experiment), "--one-job", "--dry-run", "--dir", str(folder / "s"), written=("s",)
    )


SAMPLES = st.one_of(
    st.lists(st.one_of(hostile_number, hostile_text, st.none()), max_size=5),
    st.lists(st.floats(0.5, 1e5), min_size=2, max_size=8),  # plausible: compare answers
)


@fuzz
@given(samples=SAMPLES, model=hostile_text, total=hostile_number)
def test_compare_and_report_hold_against_a_result_s_samples_and_names(tmp_path_factory, samples, model, total):
    folder = tmp_path_factory.mktemp("compare")
    ours = hostile_result(run_id="20260101T000000-torch-ddp-resnet18-n2-aaa")
    theirs = hostile_result(run_id="20260101T000000-torch-ddp-resnet18-n2-bbb")
    theirs["model"] = model
    theirs["samples"] = {"total_img_per_s": samples}
    theirs["throughput"] = {"total_img_per_s": total, "ci95_img_per_s": 1.0}
    for result in (ours, theirs):
        run = folder / "results" / result["run_id"]
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(result))
    a, b = (folder / "results" / r["run_id"] / "result.json" for r in (ours, theirs))
    entry_point_holds(folder, "compare", str(a), str(b), written=(), answers=(0, 1))  # 1: not within
    entry_point_holds(folder, "report", str(folder / "results"), "--out", str(folder / "report"), written=("report",))


LOCATE_KEYS = ("slow_nodes", "slow_links", "kind", "pairs", "nodes")


@fuzz
@given(key=st.sampled_from(LOCATE_KEYS), value=hostile_value, repeat=st.sampled_from((1, 3, 20000)))
def test_sweep_exclude_located_holds_against_any_locate_file(tmp_path_factory, key, value, repeat):
    folder = tmp_path_factory.mktemp("locate")
    body = {"kind": "locate", "slow_nodes": [], "slow_links": [["n1", "n2"]] * repeat}
    body[key] = value
    located = folder / "locate.json"
    located.write_text(json.dumps(body))
    experiment = str(REPO / "experiments" / "cpu-small.experiment.toml")
    entry_point_holds(
        folder, "sweep", experiment, "--launcher", "srun", "--exclude-located", str(located), "--dry-run",
        "--dir", str(folder / "s"), written=("s",),
    )  # fmt: skip


REFERENCE_KEYS = ("reference", "runtime", "image_digest", "labels", "sbom")


@fuzz
@given(key=st.sampled_from(REFERENCE_KEYS), value=hostile_value)
def test_image_pull_holds_against_any_field_of_a_reference_file(tmp_path_factory, key, value):
    from launch.provenance import images

    folder = tmp_path_factory.mktemp("pull")
    digest = "sha256:" + "a" * 64
    entry = {"reference": f"127.0.0.1:9/fb/stack@{digest}", "runtime": "apptainer", "image_digest": digest,
             "labels": {}, "sbom": "", key: value}  # fmt: skip
    refs = folder / "images.json"
    refs.write_text(json.dumps({"schema": images.SCHEMA, "images": [entry]}))
    before = files_under(folder)
    code, out, err = run_cli(
        "image", "pull", f"127.0.0.1:9/fb/stack@{digest}", "--out", str(folder / "pulled" / "x.sif"),
        "--reference-file", str(refs), cwd=folder,
    )  # fmt: skip
    # nothing listens on port 9: a pull that gets that far fails in one line, having written nothing
    assert code in (1, 2), (code, err)
    assert "Traceback" not in out + err and "\x1b" not in out + err
    assert err.strip().count("\n") == 0, err
    assert files_under(folder) - before <= {folder / "pulled"}


# ------------------------------------------------------------------ Unicode a terminal must not be handed (issue 64)

# Each Unicode category C* (Cc control, Cf format, Cs a lone surrogate: valid in JSON, written by no
# UTF-8 encoder; Co private use; Cn unassigned) and the line separators (Zl, Zp), alone or among
# the sinks' atoms and any other character
UNPRINTABLE = ("\ud800", "\udbff\udc00", "\udcff", "\udc80", "\ue000", "\U0010fffd", "\u0378", "\u2028", "\u2029",
               "\x85", "\u061c", "\ufeff", "\U000e0001", "$\\foo$", "$x^{$")  # fmt: skip
unicode_text = st.one_of(
    st.text(st.characters(categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), min_size=1, max_size=8),
    st.lists(st.one_of(st.sampled_from(UNPRINTABLE + ATOMS), st.characters(codec=None)), min_size=1, max_size=6).map(
        "".join
    ),
)
foreign_value = st.one_of(
    unicode_text,
    hostile_value,
    st.lists(unicode_text, min_size=1, max_size=2),
    st.dictionaries(unicode_text, unicode_text, min_size=1, max_size=2),
)


def archive_of(folder: Path, result: dict) -> Path:
    """An archive of `result` under a plain member name (its run id may hold what no file name can)."""
    from launch.provenance import archive as archives

    archive = folder / "other-site.tar.gz"
    archives.write({"results/run/result.json": json.dumps(result).encode()}, archive)
    return archive


@settings(fuzz, max_examples=max(1, EXAMPLES // 4))
@given(where=st.sampled_from(("spec", "result")), field=st.sampled_from(SPEC_FIELDS + list(RESULT_FIELDS)),
       value=unicode_text)  # fmt: skip
def test_replay_dry_run_holds_against_unicode_in_any_field_of_an_archive(tmp_path_factory, where, field, value):
    folder = tmp_path_factory.mktemp("replay-unicode")
    result = hostile_result()
    if where == "spec" and field in result["spec"]:
        result["spec"][field] = value
    else:
        result[field] = value
    entry_point_holds(folder, "replay", str(archive_of(folder, result)), "--dry-run", written=())


PREDICT_FIELDS = (
    [("train", f) for f in ("run_id", "engine", "model", "world_size", "compute_img_per_s", "gradient_bytes",
                            "engine_info", "engine_info.bucket_cap_mb", "engine_info.fusion_threshold_bytes",
                            "engine_info.cycle_time_ms", "benchmark", "spec.batch_size", "spec.fabric")]
    + [("allreduce", f) for f in ("run_id", "benchmark", "world_size", "backend", "sizes", "sizes.0.bytes",
                                  "sizes.9.time_us", "link_rate_gbit_s", "spec.fabric")]
)  # fmt: skip


@settings(fuzz, max_examples=max(1, EXAMPLES // 4))
@given(
    at=st.sampled_from(PREDICT_FIELDS),
    value=foreign_value,
    engine=st.sampled_from(("ddp", "horovod")),
    drawn=st.booleans(),
)
def test_predict_holds_against_any_field_of_another_site_s_results(tmp_path_factory, at, value, engine, drawn):
    """`predict` on another site's train and allreduce results: its table, and its figure where
    `drawn` (predict.png: the words on it are text, never mathtext)."""
    folder = tmp_path_factory.mktemp("predict")
    inputs = predict_inputs(engine)
    which, path = at
    *parents, last = path.split(".")
    holder = inputs[which]
    for key in parents:
        holder = holder[int(key) if key.isdigit() else key]
    holder[int(last) if last.isdigit() else last] = value
    for name, result in inputs.items():
        (folder / name).mkdir()
        (folder / name / "result.json").write_text(json.dumps(result))
    output = ("--output", str(folder / "out")) if drawn else ()
    entry_point_holds(
        folder, "predict", "--train", str(folder / "train"), "--allreduce", str(folder / "allreduce"),
        "--ranks", "1,2,8", *output, written=("out",),
    )  # fmt: skip


# ------------------------------------------------------------------ the hostile registry (issue 64)

# A registry that asks for the login (401 until it comes), then answers every request the way
# the drawn plan says: redirects and links to other hosts and schemes, sizes and digests that lie,
# trickled or malformed bodies, hostile annotations and archive headers. A second server stands
# for "another host": whatever reaches it must carry no login.
LOGIN = "fuzz:secret"
LOGIN_HEADER = "Basic " + base64.b64encode(LOGIN.encode()).decode()


class HostileRegistry:
    def __init__(self) -> None:
        self.plan: dict = {}
        self.elsewhere_logins: list[str] = []
        self.registry = self._serve(self._registry)
        self.elsewhere = self._serve(self._elsewhere)

    def _serve(self, answer) -> ThreadingHTTPServer:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle_one(self) -> None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    answer(self)

            do_GET = do_HEAD = do_POST = do_PUT = handle_one  # noqa: N815 (http.server's names)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def address(self, server: ThreadingHTTPServer) -> str:
        return f"127.0.0.1:{server.server_address[1]}"

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
        handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD" and body:
            handler.wfile.write(body)

    def _elsewhere(self, handler: BaseHTTPRequestHandler) -> None:
        self.elsewhere_logins.append(handler.headers.get("Authorization", ""))
        self.send(handler, 200, b'{"tags": []}', {})

    def _registry(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.headers.get("Authorization") != LOGIN_HEADER:
            self.send(handler, 401, b"", {"WWW-Authenticate": 'Basic realm="fuzz"'})
            return
        part = "tags" if "/tags/" in handler.path else "manifest" if "/manifests/" in handler.path else "blob"
        status, body, headers, trickle = self.plan[part]
        headers = {k: v.replace("ELSEWHERE", self.address(self.elsewhere)) for k, v in headers.items()}
        if not trickle:
            self.send(handler, status, body, headers)
            return
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body) + 1000))
        handler.end_headers()
        for byte in body[:40]:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.1)

    def close(self) -> None:
        for server in (self.registry, self.elsewhere):
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def hostile_registry():
    served = HostileRegistry()
    yield served
    served.close()


def pax_archive(length_digits: int, declared: int) -> bytes:
    """A tar.gz whose pax header declares `declared` bytes and holds one record whose length field
    has `length_digits` digits."""
    record = b"9" * length_digits + b" path=x\n"
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, declared
    return gzip.compress(header.tobuf(tarfile.USTAR_FORMAT) + record[:declared] + bytes(1024))


OTHER_PLACES = ("http://ELSEWHERE/v2/x/tags/list", "https://ELSEWHERE/x", "file:///etc/passwd", "ftp://ELSEWHERE/x",
                "//ELSEWHERE/v2/x", "http://ELSEWHERE@127.0.0.1:1/x", "javascript:alert(1)", "\x00", "")  # fmt: skip
headers_drawn = st.dictionaries(
    st.sampled_from(("Location", "Link", "Docker-Content-Digest", "Content-Type", "WWW-Authenticate")),
    st.one_of(
        st.sampled_from(OTHER_PLACES).map(lambda place: place),
        st.sampled_from(OTHER_PLACES).map(lambda place: f'<{place}>; rel="next"'),
        st.text(st.characters(codec="latin-1", exclude_categories=("Cc",)), max_size=40),
    ),
    max_size=2,
)
manifest_drawn = st.one_of(
    st.just("results"),  # a results artifact of drawn annotations and sizes
    st.binary(max_size=64),
    st.sampled_from((b"[" * 5000, b'{"schemaVersion": 2}', b"\xff\xfe", b'{"layers": "x"}')),
)
# half of the answers plain, so that the later steps (manifest, blob, archive) are reached; a trickle
# is rare (it costs the deadline, 1 s)
answer_drawn = st.one_of(
    st.just((200, {}, False)),
    st.tuples(
        st.sampled_from((200, 200, 301, 302, 307, 401, 404, 500)),
        headers_drawn,
        st.sampled_from((False,) * 5 + (True,)),
    ),
)


def manifest_bytes(kind: object, annotation: str, size: int, digest: str) -> bytes:
    if kind != "results":
        return kind if isinstance(kind, bytes) else b""
    from launch.sharing import artifact

    layer = {"mediaType": artifact.ARCHIVE_TYPE, "digest": digest, "size": size}
    signed = {"mediaType": artifact.SIGNED_TYPE, "digest": digest, "size": size}
    return json.dumps({
        "schemaVersion": 2, "mediaType": artifact.MANIFEST_MEDIA_TYPE, "artifactType": artifact.ARTIFACT_TYPE,
        "config": artifact.EMPTY.descriptor(), "layers": [layer, signed],
        "annotations": {"org.fabric-bench.site": "site-a", "org.fabric-bench.fabric": annotation, "reference": annotation},
    }).encode()  # fmt: skip


@settings(fuzz, max_examples=max(1, EXAMPLES // 4))
@given(
    command=st.sampled_from(("list", "pull", "pull-by-digest")),
    tags=answer_drawn,
    tag_body=st.one_of(st.just(b'{"tags": ["a", "b"]}'), st.binary(max_size=40), unicode_text.map(lambda text: text.encode("utf-8", "surrogatepass"))),
    manifest=st.tuples(answer_drawn, manifest_drawn, unicode_text, st.integers(-1, 2**63)),
    blob=st.tuples(answer_drawn, st.integers(1, 200_000), st.integers(0, 200_000)),
)  # fmt: skip
def test_pull_holds_against_a_hostile_registry(
    tmp_path_factory, hostile_registry, command, tags, tag_body, manifest, blob
):
    """`results pull` (listing, pulling every artifact, by digest) against a registry whose every
    answer is drawn: one line or an answer, no traceback, no escape byte, a bounded time, nothing
    written outside its store, and the login never sent anywhere but the registry."""
    folder = tmp_path_factory.mktemp("hostile-registry")
    (manifest_answer, kind, annotation, size), (blob_answer, digits, declared) = manifest, blob
    archive = pax_archive(digits, declared)
    digest = "sha256:" + hashlib.sha256(archive).hexdigest()
    hostile_registry.plan = {
        "tags": (tags[0], tag_body, tags[1], tags[2]),
        "manifest": (manifest_answer[0], manifest_bytes(kind, annotation.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), size, digest), manifest_answer[1], manifest_answer[2]),
        "blob": (blob_answer[0], archive, blob_answer[1], False),
    }  # fmt: skip
    hostile_registry.elsewhere_logins.clear()
    (allowed := folder / "allowed").write_text(
        "site-a ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx0k0+0n6GmCw0aSzqZq9A0zdAzN6dKpV1v7rO8sE7k\n"
    )
    repository = f"{hostile_registry.address(hostile_registry.registry)}/site/results"
    argv = {
        "list": ("results", "pull", repository, "--list", "--json"),
        "pull": ("results", "pull", repository, "--allowed-signers", str(allowed)),
        "pull-by-digest": ("results", "pull", f"{repository}@sha256:{'a' * 64}", "--allowed-signers", str(allowed)),
    }[command]
    environment = {"FABRIC_BENCH_REGISTRY_AUTH": LOGIN, "FABRIC_BENCH_REGISTRY_DEADLINE_S": "1",
                   "FABRIC_BENCH_STORE": str(folder / "store" / "results.sqlite")}  # fmt: skip
    started = time.monotonic()
    with patched_environment(environment):
        entry_point_holds(folder, *argv, written=("store",), one_per_item=True)
    assert time.monotonic() - started < ENTRY_LIMIT_S
    assert hostile_registry.elsewhere_logins == [""] * len(hostile_registry.elsewhere_logins)


@contextlib.contextmanager
def patched_environment(values: dict[str, str]):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
