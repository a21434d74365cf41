"""Measuring an allocation's pairs as Slurm steps (allocation, each pair's step, its reading,
the rounds, the re-measurement of slow pairs), and `locate` itself: the quiet check, the
measurement and locate.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from launch.disturbance import quiet
from launch.errors import UsageError
from launch.fleet import slurm
from launch.fleet.locate.pairs import Pair, Verdict, disjoint_rounds, judge, pattern_for, rounds, screen_pairs
from launch.fleet.locate.result import write
from launch.fleet.node_names import node_names
from launch.shapes import ImageRef
from bench.collectives import ALLREDUCE  # the pairs run its program (bench.allreduce) and read its records

DEFAULT_BYTES = 4 * 2**20
STEP_TIMEOUT_S = 180
RoundRunner = Callable[[list[tuple[str, str]], str], list[Pair]]
"""Measures one round of pairs under a tag (run_round as Slurm steps; tests pass their own)."""
_STEP_ID = re.compile(r"StepId=(\d+)\.(\d+)")
_GRANTED = re.compile(r"Granted job allocation (\d+)")


# -- Slurm ---------------------------------------------------------------------------------
def _slurm(argv: list[str], timeout: float = 30) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"locate: `{' '.join(argv)}` failed: {exc}") from None
    if proc.returncode != 0:
        raise UsageError(f"locate: `{' '.join(argv)}` failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc.stdout


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm host list, each checked by shape (they name folders and steps)."""
    return node_names(_slurm(["scontrol", "show", "hostnames", nodelist]).split(), "scontrol show hostnames")


def allocate(nodes: int | None, nodelist: str | None, exclude: str | None, minutes: int) -> str:
    """A job allocation (`salloc --no-shell`) for the steps; its id."""
    argv = ["salloc", "--no-shell", "--exclusive", f"--time={minutes}", "--job-name=fabric-bench-locate"]
    if nodes:
        argv.append(f"--nodes={nodes}")
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    if exclude:
        argv.append(f"--exclude={exclude}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise UsageError("locate: no allocation within 120 s (salloc)") from None
    match = _GRANTED.search(proc.stderr + proc.stdout)
    if proc.returncode != 0 or not match:
        raise UsageError(f"locate: salloc failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return match.group(1)


def step_env(interface: str | None, image: str | None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "OMPI_MCA_btl": "self,tcp"}
    if interface:
        env.update(OMPI_MCA_btl_tcp_if_include=interface, OMPI_MCA_oob_tcp_if_include=interface)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if image:
        env["PMIX_MCA_gds"] = "hash"  # the image's PMIx client beside the host's server (launch.ranks.launchers)
    return env


def step_argv(job_id: str, pair: tuple[str, str], record_dir: Path, nbytes: int, image: ImageRef | None) -> list[str]:
    program = [
        "-m",
        "bench.allreduce",
        "--backend",
        "mpi",
        "--min-bytes",
        str(nbytes),
        "--max-bytes",
        str(nbytes),
        "--warmup",
        "1",
        "--iters",
        "5",
        "--max-seconds-per-size",
        "1.5",
        "--in-place-only",  # a pair is judged by its in-place busbw and its ping-pong (read_pair)
        "--record-dir",
        str(record_dir),
    ]
    ranks = ["apptainer", "exec", image, "python3", *program] if image else [sys.executable, *program]
    return [
        "srun",
        "-v",
        f"--jobid={job_id}",
        "--mpi=pmix",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(pair)}",
        "--exact",
        "--kill-on-bad-exit=1",
        *ranks,
    ]


def read_pair(pair: tuple[str, str], record_dir: Path, log: str, job_id: str, returncode: int) -> Pair:
    step = _STEP_ID.search(log)
    result = Pair(pair[0], pair[1], None, None, job_id, f"{step.group(1)}.{step.group(2)}" if step else None)
    records = []
    for path in sorted(record_dir.glob("rank-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("kind") == ALLREDUCE.name:
                records.append(record)
    result.hosts = sorted({str(r.get("host")) for r in records})
    first = next((r for r in records if r.get("rank") == 0), None)
    try:
        if first is None:
            raise KeyError("rank 0")
        result.bandwidth_gbit_s = float(first["p2p"][-1]["bandwidth_gbit_s"])
        result.busbw_gbit_s = float(first["sizes"][-1]["busbw_gbit_s"])
    except (TypeError, KeyError, IndexError, ValueError):
        tail = [line for line in log.splitlines() if line.strip()][-1:] or [f"exit code {returncode}"]
        result.error = f"no measurement (exit code {returncode}): {tail[0][:300]}"
    return result


def run_round(
    job_id: str,
    pairs: list[tuple[str, str]],
    out: Path,
    tag: str,
    nbytes: int,
    image: ImageRef | None,
    interface: str | None,
) -> list[Pair]:
    """The round's steps at the same time (disjoint nodes), each waited for."""
    env = step_env(interface, image)
    started = []
    for pair in pairs:
        record_dir = out / "steps" / f"{tag}-{pair[0]}-{pair[1]}"
        record_dir.mkdir(parents=True, exist_ok=True)
        log = open(record_dir / "srun.log", "w+")
        proc = subprocess.Popen(
            step_argv(job_id, pair, record_dir, nbytes, image),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        started.append((pair, record_dir, log, proc))
    measured = []
    for pair, record_dir, log, proc in started:
        try:
            code = proc.wait(timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log.seek(0)
        measured.append(read_pair(pair, record_dir, log.read(), job_id, code))
        log.close()
    return measured


def measure(
    job_id: str,
    nodes: list[str],
    out: Path,
    nbytes: int = DEFAULT_BYTES,
    image: ImageRef | None = None,
    interface: str | None = None,
    expected_gbit_s: float | None = None,
    echo: Callable[[str], None] = print,
    pattern: str = "all-pairs",
    run: RoundRunner | None = None,
) -> tuple[list[Pair], Verdict, int, int]:
    """The pattern's pairs in rounds (the screen: then all pairs among its suspects), then the
    slow ones once more; (pairs, verdict, rounds run, steps run). `run(pairs, tag)` measures one
    round (default: Slurm steps, run_round)."""

    def slurm_round(round_pairs: list[tuple[str, str]], tag: str) -> list[Pair]:
        return run_round(job_id, round_pairs, out, tag, nbytes, image, interface)

    run = run or slurm_round
    pairs: dict[tuple[str, str], Pair] = {}
    done = steps = 0

    def run_rounds(schedule: list[list[tuple[str, str]]], stage: str, tag: str) -> None:
        nonlocal done, steps
        for k, round_pairs in enumerate(schedule):
            steps += len(round_pairs)
            for p in run(round_pairs, f"{tag}{k}"):
                pairs[(p.a, p.b)] = p
                echo(
                    f"{stage} round {k + 1}/{len(schedule)}: {p.a}-{p.b} "
                    + (f"{p.bandwidth_gbit_s:.3f} Gbit/s{_step(p)}" if p.error is None else p.error)
                )
            done += 1

    if pattern == "screen":
        run_rounds(disjoint_rounds(screen_pairs(nodes)), "screen", "s")
        screened = judge(nodes, list(pairs.values()), expected_gbit_s)
        suspects = sorted({node for pair in (*screened.slow_pairs, *screened.failed_pairs) for node in pair})
        echo(f"screen: {len(suspects)} suspect node(s){': ' + ','.join(suspects) if suspects else ''}")
        schedule = [[pair for pair in r if pair not in pairs] for r in rounds(suspects)]
        run_rounds([r for r in schedule if r], "suspects", "k")
    else:
        run_rounds(rounds(nodes), "all-pairs", "r")
    first = judge(nodes, list(pairs.values()), expected_gbit_s)
    for k, round_pairs in enumerate(disjoint_rounds(list(first.slow_pairs))):
        steps += len(round_pairs)
        for p in run(round_pairs, f"again{k}"):
            pairs[(p.a, p.b)].remeasured_gbit_s = p.bandwidth_gbit_s
            echo(
                f"again: {p.a}-{p.b} "
                + (f"{p.bandwidth_gbit_s:.3f} Gbit/s{_step(p)}" if p.bandwidth_gbit_s is not None else str(p.error))
            )
        done += 1
    ordered = [pairs[pair] for pair in sorted(pairs)]
    return ordered, judge(nodes, ordered, expected_gbit_s), done, steps


def _step(pair: Pair) -> str:
    return f" (step {pair.step_id})" if pair.step_id else ""


def locate(
    out: Path,
    nodes: int | None = None,
    nodelist: str | None = None,
    exclude: str | None = None,
    nbytes: int = DEFAULT_BYTES,
    image: ImageRef | None = None,
    interface: str | None = None,
    expected_gbit_s: float | None = None,
    minutes: int = 20,
    echo: Callable[[str], None] = print,
    pattern: str = "auto",
    quiet_seconds: float = quiet.QUIET_SECONDS,
) -> dict:
    """Inside an allocation (SLURM_JOB_ID) its nodes; else a fresh allocation, cancelled afterwards.
    First every node's quiet check (one task each), so a busy node is told from a slow one."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    own = not os.environ.get("SLURM_JOB_ID")
    if own and not nodes and not nodelist:
        nodes = slurm.nodes_available(False, None)
        if exclude and nodes:
            nodes -= len(hostnames(exclude))
    job_id = allocate(nodes, nodelist, exclude, minutes) if own else os.environ["SLURM_JOB_ID"]
    try:
        fields = dict(t.split("=", 1) for t in _slurm(["scontrol", "show", "job", "-o", job_id]).split() if "=" in t)
        names = hostnames(fields.get("NodeList", ""))
        if len(names) < 2:
            raise UsageError(f"locate needs an allocation of >= 2 nodes, job {job_id} has {len(names)}")
        chosen = pattern_for(pattern, len(names))
        if chosen == "screen":
            plan = f"the screen's {len(screen_pairs(names))} pairs, then all pairs among its suspects"
        else:
            plan = f"{len(names) * (len(names) - 1) // 2} pairs in {len(rounds(names))} rounds"
        echo(f"locate: job {job_id}, nodes {','.join(names)}: {chosen}: {plan}")
        checked = (
            quiet.check_nodes(
                ["srun", f"--jobid={job_id}", f"--nodes={len(names)}", f"--ntasks={len(names)}", "--ntasks-per-node=1"],
                quiet_seconds,
            )
            if quiet_seconds
            else []
        )
        for line in quiet.busy_lines(checked):
            echo(f"locate: quiet check: {line}")
        pairs, verdict, done, steps = measure(
            job_id, names, out, nbytes, image, interface, expected_gbit_s, echo, pattern=chosen
        )
    finally:
        if own:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    verdict.busy = {r["host"]: "; ".join(r["causes"]) for r in checked if r.get("verdict") == "busy"}
    return write(out, names, pairs, verdict, done, steps, job_id, nbytes, time.monotonic() - started, chosen, checked)
