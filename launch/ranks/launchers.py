"""Launchers: turn a RunSpec (plus its runtime and fabric preset) into the Command
that starts every rank.

- local:    N ranks on this host with the framework's own starter (mpirun for
            Horovod/MPI and tf.distribute, horovodrun --gloo, torchrun for DDP);
            with a container runtime the starter runs inside the image.
- mpirun:   the hybrid model: host mpirun starts one container per rank.
- srun:     inside a Slurm allocation, srun --mpi=pmix|pmi2 starts the ranks.
- sbatch:   a job script running the srun line, submitted and waited for (launch.fleet.sbatch_wait).
- emulated: mpirun across network namespaces (launch.fleet.emulate).

Ranks started by mpirun/srun find each other over MPI (bench.rendezvous).

LAUNCHERS is the registry: each Launcher carries its name, how it builds the
command, and the traits other modules ask about (Slurm or not, one host or
many, a queued batch job, emulated nodes, mpirun on this host). Other modules
import the names and traits instead of spelling launcher names.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from bench.gpu_request import GPUS_REQUESTED_ENV
from bench.placement import parse_cpu_list
from containers import stack
from launch import shapes
from launch.fleet import sbatch_wait, slurm
from launch.ranks.command import Command
from launch.kinds import kind, trains
from launch.ranks.runtimes import Bind, Runtime
from launch.ranks.reporting import reporting_env
from launch.shapes import HostFile, ImageRef, ModuleName

PYTHON_IN_IMAGE = "python3"
HIDE_GPUS = "-1"  # CUDA_VISIBLE_DEVICES of a run without GPUs

if TYPE_CHECKING:
    from launch.fleet.emulate.cluster import Cluster


class LaunchedSpec(Protocol):
    """What a launcher reads of a run's spec. launch.ranks.runspec.RunSpec is the one there is
    (mypy checks it wherever a RunSpec is handed to a launcher); it validates its launcher against
    this registry, so this module names the fields it reads rather than import RunSpec back.
    A field a launcher comes to read is added here."""

    @property
    def launcher(self) -> str: ...
    @property
    def benchmark(self) -> str: ...
    @property
    def framework(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def controller(self) -> str: ...
    @property
    def allreduce(self) -> str | None: ...
    @property
    def image(self) -> str | None: ...
    @property
    def nodes(self) -> int: ...
    @property
    def ranks(self) -> int: ...
    @property
    def ranks_per_node(self) -> int: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def hostfile(self) -> str | None: ...
    @property
    def extra_env(self) -> Mapping[str, str]: ...
    @property
    def mpi_plugin(self) -> str: ...
    @property
    def partition(self) -> str | None: ...
    @property
    def account(self) -> str | None: ...
    @property
    def time_limit(self) -> str | None: ...
    @property
    def exclude_nodes(self) -> str | None: ...
    @property
    def uses_nccl(self) -> bool: ...

    def bench_args(self) -> list[str]: ...

    def in_switch_env(self) -> dict[str, str]: ...

    def label_parts(self) -> tuple[str, ...]: ...


def tool_path(name: str) -> str:
    """A launcher tool from this Python's environment first (venv bin), else PATH.

    A tool found nowhere stays a bare name, so a dry run can still show the
    command; preflight refuses to execute it.
    """
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


@dataclass(frozen=True)
class Plan:
    """What the launcher needs besides the spec: resolved by launch.runs.run.prepare."""

    record_dir: Path
    runtime: Runtime
    image: ImageRef | None = None  # the spec's image, parsed (launch.shapes.image): what the runtime runs
    hostfile: HostFile | None = None  # the spec's hostfile, parsed (launch.shapes.hostfile): mpirun's
    fabric_env: dict[str, str] = field(default_factory=dict)
    binds: tuple[Bind, ...] = ()
    mpirun_args: tuple[str, ...] = ()  # e.g. MCA parameters selecting the fabric's transport
    job_script: Path | None = None  # sbatch only
    emulated_cluster: Cluster | None = None  # emulated only: the cluster the ranks run in
    modules: tuple[ModuleName, ...] = ()  # the site's environment modules, loaded by job scripts
    run_files: dict[Path, str] = field(default_factory=dict)  # written before launch (Open MPI rules)


def starts_with_mpi(spec: LaunchedSpec) -> bool:
    """Whether the ranks run under MPI (mpirun/srun/emulated), not horovodrun --gloo or torchrun."""
    if spec.launcher != "local" or not trains(spec.benchmark):
        return True
    return not (spec.engine == "ddp" or (spec.engine == "horovod" and spec.controller == "gloo"))


def cpus_per_rank(spec: LaunchedSpec) -> int:
    """Each rank's share of a node's CPUs: the allocation's on a Slurm node (SLURM_CPUS_ON_NODE,
    where srun runs inside one), else the partition's nodes' (srun outside one: slurm.node_cpus),
    else this host's. Batch jobs count theirs on the node (slurm.cpus_per_rank_lines)."""
    cpus = os.cpu_count() or 1
    if launcher_of(spec).slurm:
        on_node = os.environ.get("SLURM_CPUS_ON_NODE", "")
        cpus = int(on_node) if on_node.isdigit() else (slurm.node_cpus(spec.partition) or cpus)
    return max(1, cpus // spec.ranks_per_node)


def horovod_mpi_gpu_operations(spec: LaunchedSpec) -> bool:
    """Whether the run trains with Horovod handing its GPU gradients to MPI (--allreduce mpi on
    GPUs): the image's second Horovod build does it (containers.stack.HOROVOD_MPI_GPU_DIR)."""
    return trains(spec.benchmark) and spec.engine == "horovod" and spec.allreduce == "mpi" and spec.gpus_per_node > 0


def rank_env(spec: LaunchedSpec, plan: Plan) -> dict[str, str]:
    """Environment of every rank: a CPU share each, the fabric preset, then the user's overrides."""
    # a batch job counts its node's CPUs in its script (slurm.cpus_per_rank_lines), where the
    # image takes OMP_NUM_THREADS from the job's environment; set here, it would be the submitter's
    env = {} if launcher_of(spec).batch else {"OMP_NUM_THREADS": str(cpus_per_rank(spec))}
    env["PYTHONUNBUFFERED"] = "1"
    # the device the run claims (bench.gpu_request): asked for GPUs, a rank that sees none refuses;
    # asked for none, the GPUs are hidden (Apptainer's /dev shows /dev/nvidia* even without --nv):
    # "-1" is an invalid index, and CUDA shows no device from the first invalid one on
    env[GPUS_REQUESTED_ENV] = str(spec.gpus_per_node)
    if spec.gpus_per_node == 0:
        env["CUDA_VISIBLE_DEVICES"] = HIDE_GPUS
    if os.geteuid() == 0:  # Open MPI refuses root without both
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if spec.engine == "horovod" and spec.allreduce in ("mpi", "gloo"):
        env["HOROVOD_CPU_OPERATIONS"] = spec.allreduce
    if plan.runtime.containerised and horovod_mpi_gpu_operations(spec):
        # the image's second Horovod, built with MPI GPU operations (the venv's has NCCL ones): first on
        # the path, `import horovod` finds it (preflight ran this only where the image labels it)
        env["PYTHONPATH"] = stack.HOROVOD_MPI_GPU_DIR
    if spec.engine == "horovod" and starts_with_mpi(spec) and cpus_per_rank(spec) == 1:
        # Horovod's MPI controller negotiates every cycle from a background thread, and
        # Open MPI busy-polls while it waits for the other ranks. With one core per rank
        # that spinning thread takes the core from the rank's own compute thread (measured
        # here: Horovod under mpirun at ~0.45 of the same run under gloo, which blocks in
        # recv). Yielding in the poll loop gives the core back.
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    if launcher_of(spec).slurm and plan.runtime.containerised:
        # the image's PMIx client beside the host's PMIx server (srun --mpi=pmix): the shared-memory
        # data store (gds ds12/ds21) must match on both sides, a known cause of failed starts;
        # the hash store needs nothing shared
        env["PMIX_MCA_gds"] = "hash"
    env.update(reporting_env(spec))  # libraries name their transports (launch.ranks.reporting)
    env.update(plan.fabric_env)
    env.update(spec.in_switch_env())  # --nvls, --sharp: NCCL's in-switch reductions asked on or off
    env.update(spec.extra_env)
    return env


def bench_program(spec: LaunchedSpec, plan: Plan) -> list[str]:
    python = PYTHON_IN_IMAGE if plan.runtime.containerised else sys.executable
    module = kind(spec.benchmark).programs[spec.framework]
    return [python, "-m", module, *spec.bench_args(), "--record-dir", str(plan.record_dir)]


def in_runtime(spec: LaunchedSpec, plan: Plan, argv: list[str], env: dict[str, str]) -> list[str]:
    return plan.runtime.wrap(plan.image, list(plan.binds), env, spec.gpus_per_node > 0, argv)


def cores_here(cpu_root: Path = Path("/sys/devices/system/cpu")) -> int:
    """Physical cores this process may run on: the CPUs of its affinity over the hardware threads
    per core (cpu0's thread_siblings_list: "0,64" or "0-1" is 2). Open MPI's PE=k counts cores."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        siblings = (cpu_root / "cpu0/topology/thread_siblings_list").read_text()
    except OSError:
        return max(1, cpus)
    return max(1, cpus // max(1, len(parse_cpu_list(siblings))))


def mpirun_binding(spec: LaunchedSpec, cores: int | None = None) -> list[str]:
    """How mpirun places and binds the ranks. A CPU run's ranks are each bound to a block of
    `cores // ranks per node` cores (PE), in order over the cores, so a rank stays on its socket
    instead of floating across sockets. The cores are counted where mpirun runs, which the hybrid
    model puts on one of the run's nodes, alike. A GPU run's ranks are left unbound by mpirun,
    which sees no GPUs (and GPU numbering need not follow the sockets): each rank narrows itself
    to its GPU's local CPUs from sysfs (bench.placement.pin_near_gpu). Also unbound: more ranks
    than cores on one host (binding would refuse to overload a core) and emulated nodes
    (namespaces sharing this host's cores, where every node would bind to the same first cores)."""
    cores = cores_here() if cores is None else cores
    per_node = spec.ranks_per_node
    if spec.gpus_per_node > 0 or launcher_of(spec).emulated or per_node > cores:
        return ["--map-by", f"ppr:{per_node}:node", "--bind-to", "none"]
    return ["--map-by", f"ppr:{per_node}:node:PE={max(1, cores // per_node)}", "--bind-to", "core"]


def hostfile_args(hostfile: HostFile | None) -> list[str]:
    """mpirun's --hostfile (a shape: a raw str here is a type error)."""
    return ["--hostfile", hostfile] if hostfile else []


def mpirun_argv(spec: LaunchedSpec, plan: Plan, env: dict[str, str], mpirun: str) -> list[str]:
    argv = [mpirun, "-np", str(spec.ranks), *mpirun_binding(spec), *hostfile_args(plan.hostfile)]
    if spec.ranks_per_node > (os.cpu_count() or 1) and spec.nodes == 1:
        argv.append("--oversubscribe")
    argv += list(plan.mpirun_args)
    for name in sorted(env):
        argv += ["-x", name]
    return argv


def local(spec: LaunchedSpec, plan: Plan) -> Command:
    env = rank_env(spec, plan)
    inside = plan.runtime.containerised
    tool = (lambda name: name) if inside else tool_path  # inside an image: the image's PATH
    program = bench_program(spec, plan)
    n = str(spec.ranks)
    if trains(spec.benchmark) and spec.engine == "horovod" and spec.controller == "gloo":
        starter = [tool("horovodrun"), "-np", n, "-H", f"localhost:{n}", "--gloo"]
    elif trains(spec.benchmark) and spec.engine == "ddp":  # torchrun sets RANK/WORLD_SIZE/MASTER_*
        # --log-dir: torchrun's per-run folder goes with the records, not to a /tmp/torchelastic_* left behind
        starter = [
            tool("torchrun"),
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            n,
            "--log-dir",
            str(plan.record_dir / "torchrun"),
            "--module",
        ]
        program = program[2:]
    else:  # Horovod's MPI controller; tf.distribute and the communication benchmarks bootstrap over MPI
        starter = mpirun_argv(spec, plan, env, tool("mpirun"))
    argv = starter + program
    return Command(in_runtime(spec, plan, argv, env) if inside else argv, env)


def mpirun(spec: LaunchedSpec, plan: Plan) -> Command:
    env = rank_env(spec, plan)
    ranks = in_runtime(spec, plan, bench_program(spec, plan), env)
    return Command(mpirun_argv(spec, plan, env, tool_path("mpirun")) + ranks, env)


def ranks_step_name(run_dir: Path) -> str:
    """The name of a run's ranks' srun step: how the per-node samplers find its job
    (launch.disturbance.nodes) wherever srun runs (an allocation, its own job, a batch job)."""
    return f"fabric-bench-{run_dir.name}"


def srun_argv(spec: LaunchedSpec, plan: Plan, env: dict[str, str]) -> list[str]:
    argv = [
        "srun",
        f"--job-name={ranks_step_name(plan.record_dir.parent)}",
        f"--mpi={spec.mpi_plugin}",
        f"--nodes={spec.nodes}",
        f"--ntasks={spec.ranks}",
        f"--ntasks-per-node={spec.ranks_per_node}",
        "--kill-on-bad-exit=1",
    ]
    if not launcher_of(spec).batch:  # a batch job counts the node's CPUs in its script (SRUN_CPUS_PER_TASK)
        argv.append(f"--cpus-per-task={cpus_per_rank(spec)}")
    # a CPU run's tasks bound each to its own cores, counted by Slurm on the node, in blocks (the
    # first socket filled before the next). A GPU run's tasks get every CPU of their allocation
    # (--cpu-bind=none: Slurm's own binding would spread them over the sockets in turn, away from
    # their GPUs) and each narrows itself to its GPU's local CPUs (bench.placement.pin_near_gpu).
    # The GPUs stay visible to every task (--gpus-per-node, not --gpus-per-task/--gpu-bind): a rank
    # takes its local rank's (bench.torch_device) and NCCL sees the node's whole GPU topology
    argv += ["--cpu-bind=none"] if spec.gpus_per_node else ["--cpu-bind=cores", "--distribution=block:block"]
    if spec.gpus_per_node:
        argv.append(f"--gpus-per-node={spec.gpus_per_node}")
    argv += slurm_request(spec).options()
    return argv + in_runtime(spec, plan, bench_program(spec, plan), env)


def slurm_request(spec: LaunchedSpec) -> slurm.Request:
    """The spec's partition, account, time limit and excluded nodes, parsed into their shapes."""
    return slurm.Request.parsed(spec.partition, spec.account, spec.time_limit, spec.exclude_nodes)


def srun(spec: LaunchedSpec, plan: Plan) -> Command:
    env = rank_env(spec, plan)
    return Command(srun_argv(spec, plan, env), env)


def sbatch_script(spec: LaunchedSpec, plan: Plan) -> str:
    """The run's job script (slurm.job_script checks and quotes every value): the ranks'
    environment exported, each rank's CPU share counted on the node, the srun line."""
    env = rank_env(spec, plan)
    body = slurm.cpus_per_rank_lines(spec.ranks_per_node, omp_threads_given="OMP_NUM_THREADS" in spec.extra_env)
    request = slurm_request(spec)
    return slurm.job_script(
        name=slurm.job_name(*spec.label_parts()),
        nodes=spec.nodes,
        tasks_per_node=spec.ranks_per_node,
        output=shapes.slurm_log("the run's directory", plan.record_dir.parent),
        announce="fabric-bench job",
        body=[*body, shlex.join(srun_argv(spec, plan, env))],
        gpus_per_node=spec.gpus_per_node,
        partition=request.partition,
        account=request.account,
        time=request.time,
        exclude=request.exclude,
        modules=plan.modules,
        env=env,
    )


def sbatch(spec: LaunchedSpec, plan: Plan) -> Command:
    script = plan.job_script or plan.record_dir.parent / "job.sbatch"
    return Command(sbatch_wait.argv(script), {})


def emulated(spec: LaunchedSpec, plan: Plan) -> Command:
    """mpirun inside node 0's namespace; plan.mpirun_args name the nodes and the namespace agent."""
    from launch.fleet.emulate import in_node

    command = mpirun(spec, plan)
    assert plan.emulated_cluster is not None, "an emulated plan names its cluster"
    return Command(in_node(plan.emulated_cluster, 0, command.argv), command.env)


@dataclass(frozen=True)
class Launcher:
    name: str
    build: Callable[[LaunchedSpec, Plan], Command]
    one_host: bool = False  # ranks on this host only
    slurm: bool = False  # started through Slurm: job facts, --time, partition
    batch: bool = False  # a queued batch job: its ranks start later, and print to the job's log
    host_mpirun: bool = False  # mpirun on this host starts the ranks (image or host MPI must match)
    emulated: bool = False  # the nodes are network namespaces on this machine (launch.fleet.emulate)
    site_default: bool = True  # may be a site file's default launcher


LOCAL = Launcher("local", local, one_host=True)
MPIRUN = Launcher("mpirun", mpirun, host_mpirun=True)
SRUN = Launcher("srun", srun, slurm=True)
SBATCH = Launcher("sbatch", sbatch, slurm=True, batch=True)
EMULATED = Launcher("emulated", emulated, host_mpirun=True, emulated=True, site_default=False)
LAUNCHERS = {launcher.name: launcher for launcher in (LOCAL, MPIRUN, SRUN, SBATCH, EMULATED)}
SLURM_LAUNCHERS = tuple(name for name, launcher in LAUNCHERS.items() if launcher.slurm)
SITE_LAUNCHERS = tuple(name for name, launcher in LAUNCHERS.items() if launcher.site_default)


def launcher_of(spec: LaunchedSpec) -> Launcher:
    return LAUNCHERS[spec.launcher]


def build_command(spec: LaunchedSpec, plan: Plan) -> Command:
    return launcher_of(spec).build(spec, plan)


def local_command(spec: LaunchedSpec, record_dir: Path, python: str | None = None) -> Command:
    """The host-runtime local command (kept for callers that need nothing else)."""
    from launch.ranks.runtimes import HostRuntime

    command = local(spec, Plan(record_dir=record_dir, runtime=HostRuntime()))
    if python:
        command = Command([python if a == sys.executable else a for a in command.argv], command.env)
    return command
