"""Slurm around a run: what fabric-bench asks of the scheduler beyond the srun and
sbatch argv (launch.ranks.launchers).

- the facts recorded with a result: job id, nodes, job state, Slurm version;
- cancelling the job of a run that timed out or was interrupted (its waiter,
  launch.fleet.sbatch_wait, cancels it on a stop signal; not when killed outright);
- how many nodes a partition or allocation has, to refuse impossible sweeps;
- job scripts: `job_script`, the one sink every job script is written through (a run's,
  launch.ranks.launchers.sbatch_script, and a whole sweep's in one allocation): it takes its
  #SBATCH values only as parsed shapes (launch.shapes, `Request`), its environment checked and
  shell-quoted;
- time limits: Slurm's D-HH:MM:SS <-> whole minutes.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from launch import shapes, trust
from launch.shapes import ModuleName, NodeList, SlurmName, SlurmPath, SlurmTime

QUERY_TIMEOUT_S = 15
# How long a finished run waits for its job to leave COMPLETING: while a job completes,
# slurmctld reports as its NodeList only the nodes still completing (a 4-node job read
# "n[0-2]" once n3 had finished), so the job's nodes are read once it has settled.
SETTLE_S = 20


def _query(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def version() -> str | None:
    """'22.05.8' from `sinfo --version` ('slurm 22.05.8')."""
    out = _query(["sinfo", "--version"])
    return out.split()[-1] if out and out.split() else None


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job -o ID` as a dict (empty once Slurm has forgotten the job)."""
    out = _query(["scontrol", "show", "job", "-o", job_id]) or ""
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def settled_job_fields(job_id: str, wait_s: float | None = None) -> dict[str, str]:
    """`job_fields` once the job has left COMPLETING (polled up to `wait_s`, SETTLE_S by
    default). A job still completing then has no NodeList: Slurm's is a part of its nodes."""
    deadline = time.monotonic() + (SETTLE_S if wait_s is None else wait_s)
    fields = job_fields(job_id)
    while fields.get("JobState") == "COMPLETING" and time.monotonic() < deadline:
        time.sleep(0.5)
        fields = job_fields(job_id)
    if fields.get("JobState") == "COMPLETING":
        fields = {k: v for k, v in fields.items() if k != "NodeList"}
    return fields


def job_of_run(run_dir: Path, batch: bool) -> str | None:
    """The job a run ran in: a batch job writes RUN_DIR/slurm-<id>.out; srun runs inside $SLURM_JOB_ID."""
    if batch:
        ids = [m.group(1) for p in run_dir.glob("slurm-*.out") if (m := re.fullmatch(r"slurm-(\d+)\.out", p.name))]
        return max(ids, key=int) if ids else None
    return os.environ.get("SLURM_JOB_ID")


def jobs_running_script(script: Path) -> list[str]:
    """Ids of queued or running jobs whose batch script is `script`."""
    out = _query(["squeue", "--noheader", "--format=%i|%o"]) or ""
    return [
        line.split("|", 1)[0]
        for line in out.splitlines()
        if "|" in line and line.split("|", 1)[1].strip() == str(script)
    ]


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        _query(["scancel", *job_ids])


def log_tail(run_dir: Path, job_id: str | None, lines: int = 30) -> list[str]:
    path = run_dir / f"slurm-{job_id}.out"
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def after_run(batch: bool, run_dir: Path, job_script: Path | None, stopped: bool) -> tuple[dict, list[str]]:
    """Facts of the job a run used, and the tail of its job log (a batch job: the ranks' output).

    `stopped`: the run timed out or was interrupted; its batch job is cancelled.
    """
    if stopped and batch and job_script is not None:
        cancel(jobs_running_script(job_script))
    job_id = job_of_run(run_dir, batch)
    fields = settled_job_fields(job_id) if job_id else {}
    facts = {
        "job_id": job_id,
        "nodes": fields.get("NodeList") or os.environ.get("SLURM_JOB_NODELIST"),
        "num_nodes": int(fields["NumNodes"]) if fields.get("NumNodes", "").isdigit() else None,
        "job_state": fields.get("JobState"),
        "version": version(),
    }
    return facts, log_tail(run_dir, job_id) if batch else []


def step_facts(records: list[dict], facts: dict) -> dict:
    """The job's facts completed from its ranks' records (bench.record.slurm_step): the steps
    they ran in, the hosts they ran on, and the job id where the run could not see it (an
    srun outside an allocation makes a job of its own)."""
    steps = sorted({str(r["slurm_step"]) for r in records if isinstance(r.get("slurm_step"), str)})
    hosts = sorted({str(r["host"]) for r in records if isinstance(r.get("host"), str)})
    out = {**facts, "steps": steps, "rank_hosts": hosts}
    if not out.get("job_id") and steps:
        out["job_id"] = steps[0].split(".")[0]
        fields = settled_job_fields(out["job_id"])
        out["nodes"] = out.get("nodes") or fields.get("NodeList")
        if fields.get("NumNodes", "").isdigit():
            out["num_nodes"] = int(fields["NumNodes"])
        out["job_state"] = out.get("job_state") or fields.get("JobState")
    return out


_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")


def failed_nodes(run_dir: Path) -> list[str]:
    """Nodes Slurm declared failed during a run: srun's "Node failure on NODES" (its node-fail
    message from slurmctld) in the run's log or its batch job's log."""
    found: set[str] = set()
    for path in [run_dir / "output.log", *run_dir.glob("slurm-*.out")]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for listed in _NODE_FAILURE.findall(text):
            found.update((_query(["scontrol", "show", "hostnames", listed]) or listed).split())
    return sorted(found)


def expand_nodes(nodelist: str) -> list[str]:
    """The node names of a Slurm node list (n1,n[3-4]); by Slurm where it answers, else the
    plain names of a list without ranges."""
    expanded = _query(["scontrol", "show", "hostnames", nodelist])
    return expanded.split() if expanded else [n for n in nodelist.split(",") if n]


def nodes_available(in_allocation: bool, partition: str | None) -> int | None:
    """Nodes a run can use: the allocation's (srun inside one), else the partition's (None: unknown)."""
    if in_allocation and os.environ.get("SLURM_JOB_NUM_NODES", "").isdigit():
        return int(os.environ["SLURM_JOB_NUM_NODES"])
    argv = ["sinfo", "--noheader", "--format=%D"] + ([f"--partition={partition}"] if partition else [])
    out = _query(argv)
    counts = [int(n) for n in (out or "").split() if n.isdigit()]
    return sum(counts) if counts else None


@functools.lru_cache(maxsize=8)
def node_cpus(partition: str | None) -> int | None:
    """The CPUs of the partition's smallest node (`sinfo %c`; None when Slurm cannot be asked):
    what srun outside an allocation can give each node's ranks. The submitting host's own count
    is another machine's: a login node's, or, on an emulated cluster, all the cores its nodes share."""
    argv = ["sinfo", "--noheader", "--format=%c"] + ([f"--partition={partition}"] if partition else [])
    counts = [int(n.rstrip("+")) for n in (_query(argv) or "").split() if n.rstrip("+").isdigit()]
    return min(counts) if counts else None


def cluster_nodes() -> list[str] | None:
    """Every node name of the cluster (`sinfo --Node`; None when Slurm cannot be asked)."""
    out = _query(["sinfo", "--noheader", "--Node", "--format=%N"])
    return sorted(set(out.split())) if out is not None else None


def job_script(
    *,
    name: SlurmName,
    nodes: int,
    tasks_per_node: int,
    output: SlurmPath,
    announce: str,
    body: list[str],
    gpus_per_node: int = 0,
    partition: SlurmName | None = None,
    account: SlurmName | None = None,
    time: SlurmTime | None = None,
    exclude: NodeList | None = None,
    modules: tuple[ModuleName, ...] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """A job script: shebang and #SBATCH lines, the site's modules, `set -euo pipefail`, a line
    naming the job (`announce`), the exported environment, then `body` (the caller's lines, their
    values quoted). The #SBATCH values come parsed (launch.shapes): sbatch reads those lines with
    its own tokenizer (a backslash escapes even inside single quotes), so a name holds nothing it
    could read as quoting and goes in bare; the output path goes in double quotes, holding no
    quote, backslash or '%'. The environment is checked here (names identifiers, values one line),
    then quoted for bash."""
    env = env or {}
    trust.check_env(env, "job script: ")
    lines = _header(name, nodes, tasks_per_node, output, gpus_per_node, partition, account, time, exclude)
    lines += _module_loads(modules)
    lines += ["set -euo pipefail", f'echo "{announce} $SLURM_JOB_ID on $SLURM_JOB_NODELIST"']
    lines += [f"export {var}={shlex.quote(value)}" for var, value in sorted(env.items())]
    return "\n".join(lines + body) + "\n"


def _header(
    name: SlurmName,
    nodes: int,
    tasks_per_node: int,
    output: SlurmPath,
    gpus_per_node: int,
    partition: SlurmName | None,
    account: SlurmName | None,
    time: SlurmTime | None,
    exclude: NodeList | None,
) -> list[str]:
    """Shebang and #SBATCH lines, in the forms sbatch's tokenizer reads back exactly."""
    # --exclusive: whole nodes, so the ranks share every core of a node between them (without
    # it, Slurm's default gives each task one CPU, shared by its NCCL proxy, DDP reducer and Python)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={int(nodes)}",
        f"#SBATCH --ntasks-per-node={int(tasks_per_node)}",
        "#SBATCH --exclusive",
        f'#SBATCH --output="{output}"',
    ]
    for flag, value in (("--partition", partition), ("--account", account), ("--time", time), ("--exclude", exclude)):
        if value:
            lines.append(f"#SBATCH {flag}={value}")
    if gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={int(gpus_per_node)}")
    return lines


def cpus_per_rank_lines(tasks_per_node: int, omp_threads_given: bool) -> list[str]:
    """Job-script lines giving each rank its share of the node's CPUs, counted on the node the job
    runs on (SLURM_CPUS_ON_NODE), not on the host that submitted it: srun reads
    SRUN_CPUS_PER_TASK as its --cpus-per-task; OMP_NUM_THREADS follows unless the user set it."""
    lines = [
        f"cpus_per_rank=$(( ${{SLURM_CPUS_ON_NODE:-{tasks_per_node}}} / {tasks_per_node} ))",
        "(( cpus_per_rank >= 1 )) || cpus_per_rank=1",
        "export SRUN_CPUS_PER_TASK=$cpus_per_rank",
    ]
    if not omp_threads_given:
        lines.append("export OMP_NUM_THREADS=$cpus_per_rank")
    return lines


def _module_loads(modules: tuple[ModuleName, ...]) -> list[str]:
    """The site's environment modules, loaded at the top of a job script (before `set -u`:
    some module systems read unset variables)."""
    return [f"module load {shlex.quote(name)}" for name in modules]


def sweep_job_script(
    *,
    name: SlurmName,
    nodes: int,
    tasks_per_node: int,
    gpus_per_node: int,
    minutes: int,
    output: SlurmPath,
    request: Request,
    argv: list[str],
    modules: tuple[ModuleName, ...] = (),
) -> str:
    """One allocation for a whole sweep; inside it, `argv` (the sweep with --launcher srun) runs each point."""
    return job_script(
        name=name,
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        output=output,
        announce="fabric-bench sweep job",
        body=["exec " + shlex.join(argv)],
        gpus_per_node=gpus_per_node,
        partition=request.partition,
        account=request.account,
        time=shapes.slurm_time("sweep time", minutes),
        exclude=request.exclude,
        modules=modules,
    )


@dataclass(frozen=True)
class Request:
    """What a run asks of Slurm by name, each value parsed into its shape (launch.shapes)."""

    partition: SlurmName | None = None
    account: SlurmName | None = None
    time: SlurmTime | None = None
    exclude: NodeList | None = None

    @classmethod
    def parsed(
        cls, partition: object = None, account: object = None, time: object = None, exclude: object = None
    ) -> "Request":
        """From raw values (a spec's, a file's); unset ones stay None; each refusal is one line."""
        return cls(
            partition=shapes.slurm_name("--partition", partition) if partition else None,
            account=shapes.slurm_name("--account", account) if account else None,
            time=shapes.slurm_time("--time-limit", time) if time else None,
            exclude=shapes.node_list("--exclude-nodes", exclude) if exclude else None,
        )

    def options(self) -> list[str]:
        """srun's or salloc's argv options for the values set."""
        pairs = (("--partition", self.partition), ("--account", self.account), ("--time", self.time))
        return [f"{flag}={value}" for flag, value in (*pairs, ("--exclude", self.exclude)) if value]


def job_name(*parts: str) -> SlurmName:
    """A job name from the bundle's prefix and a run's or sweep's name."""
    return shapes.slurm_name("job name", "-".join(("fabric-bench", *parts)), longest=128)


# Time limits ----------------------------------------------------------------
def minutes_for(seconds: float) -> int:
    """Whole minutes covering `seconds` (Slurm's --time in its plain-minutes form), at least 1."""
    return max(1, math.ceil(seconds / 60))
