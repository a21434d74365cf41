"""RunSpec: everything that defines one benchmark run, as plain validated data."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field

from bench import catalog
from containers.fabrics import HOST_FABRICS
from launch import shapes, trust
from launch.fleet import slurm
from launch.errors import UsageError
from launch.kinds import BENCHMARKS, DEFAULT, field_help, help_text, kind, trains
from launch.kinds.sizes import DEVICE_BACKENDS
from launch.ranks.launchers import LAUNCHERS, LOCAL
from launch.ranks.runtimes import HOST, runtime_name
from launch.schema import number

ALLREDUCE = ("nccl", "mpi", "gloo")
MPI_PLUGINS = ("pmix", "pmi2")
# Horovod's GPU operations are fixed when its wheel is built (HOROVOD_GPU_OPERATIONS): the image's
# own build has NCCL ones, its second build (containers.stack.HOROVOD_MPI_GPU_DIR) MPI ones, which
# --allreduce mpi selects where the image says it has them (launch.site.preflight). No build has gloo
# GPU operations: --allreduce gloo sets only the CPU operations (HOROVOD_CPU_OPERATIONS), so on GPUs
# NCCL would still move the gradients and the gloo arm would measure NCCL again.
HOROVOD_CPU_ONLY = ("gloo",)
HOROVOD_GPU_OPERATIONS_REFUSAL = (
    "--allreduce {allreduce} with Horovod on GPUs is refused: no Horovod build has {allreduce} GPU operations "
    "(the image's own is built with HOROVOD_GPU_OPERATIONS=NCCL), so NCCL would still move the GPU buffers; "
    "use --allreduce nccl, --allreduce mpi (CUDA-aware MPI, where the image has it), or run on CPUs"
)
NCCL_MAX_BYTES = 8 * 2**30  # the allreduce sweep's top on GPUs (issue 42, item 3)
HOST_MAX_BYTES = 256 * 2**20
GPU_BATCH_SIZE = 256  # images per rank per batch when the run has GPUs (issue 42, item 9)
CPU_BATCH_SIZE = 32
# The bounds of every count a spec can carry (a file's value outside them is refused in one
# line): far above any real run, far below what would exhaust a host or overflow a buffer size
MAGNITUDES: dict[str, tuple[float, float]] = {
    "ranks": (1, 2**20),
    "nodes": (1, 2**16),
    "gpus_per_node": (0, 64),
    "batch_size": (1, 2**16),
    "image_size": (8, 4096),
    "warmup": (0, 100_000),
    "iters": (1, 1_000_000),
    "batches_per_iter": (1, 10_000),
    "seed": (0, 2**32 - 1),
    "min_bytes": (1, 2**40),
    "max_bytes": (1, 2**40),
    "max_seconds_per_size": (0.01, 86_400.0),
    "grid": (2, 2**16),
    "fusion_threshold_mb": (0.0, 2.0**16),
    "cycle_time_ms": (0.0, 60_000.0),
    "bucket_cap_mb": (0.0, 2.0**16),
}
# the in-switch settings and the NCCL variable each sets (1 on, 0 off; unset: NCCL's default, NVLS
# on where the NVSwitch offers it, CollNet off). SHARP also needs the SHARP plugin (HPC-X's
# nccl-rdma-sharp-plugins) in the image or bound from the site: NCCL_COLLNET_ENABLE is the switch
# its documentation names; the plugin's own SHARP_COLL_* tuning stays the site's [env].
IN_SWITCH_ENV = {"nvls": "NCCL_NVLS_ENABLE", "sharp": "NCCL_COLLNET_ENABLE"}
# fields added after sweeps recorded their points' keys: at their default they leave a key as it was
LATER_FIELDS = (*IN_SWITCH_ENV, "max_seconds_per_size")
MAX_RANKS_PER_NODE = 1024
ONE_HOST_RANKS_PER_CORE = 4  # a one-host launcher's ranks: oversubscribed at most this far


def _of_type(value: object, hint: object) -> bool:
    """Whether a JSON value fits a RunSpec annotation (int, float, str, bool, X | None, dict[str, str])."""
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_of_type(value, arm) for arm in typing.get_args(hint))
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return number(value) is not None
    return isinstance(hint, type) and isinstance(value, hint)  # str


def _type_name(hint: object) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arm) for arm in typing.get_args(hint))
    return {type(None): "null", dict: "an object of strings"}.get(
        typing.get_origin(hint) or hint, getattr(hint, "__name__", str(hint))
    )


# What a field is part of, and the roles the rest of the bundle asks about (one place, so
# adding a setting is its field, its validation and, where the user sets it, its option):
#   baseline: a 1-rank baseline must share it with the runs it serves (launch.plan.experiment)
#   workload: it defines the measured work; results compare only where it is equal
#             (launch.analysis.compare)
PARTS = ("workload", "communication", "placement", "start", "slurm", "emulation")


def setting(
    default=dataclasses.MISSING,
    *,
    part: str,
    baseline: bool = False,
    workload: bool = False,
    factory=None,
    help: str = "",
    cli: bool = True,
):
    """A RunSpec field: its part of the run, its roles, and its `fabric-bench run` option (`help`;
    `cli=False`: the command sets it from other options). The run command is generated from these
    (launch.cli.app), so an option's default is the field's."""
    metadata = {"part": part, "baseline": baseline, "workload": workload, "help": help, "cli": cli}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class RunSpec:
    # what to run: the training workload
    framework: str = setting("torch", part="workload", baseline=True, workload=True, help="torch | tf")
    engine: str = setting(
        "ddp", part="workload", baseline=True, workload=True, help="torch: horovod | ddp; tf: horovod | native"
    )
    model: str = setting(
        "resnet18", part="workload", baseline=True, workload=True, help="torchvision / keras.applications model name"
    )
    ranks: int = setting(2, part="placement", cli=False)
    batch_size: int | None = setting(
        None,
        part="workload",
        baseline=True,
        workload=True,
        help=f"images per rank per batch (default: {GPU_BATCH_SIZE} on GPUs, {CPU_BATCH_SIZE} on CPUs)",
    )
    image_size: int | None = setting(
        None, part="workload", baseline=True, workload=True, help="square input size (default: the model's)"
    )
    warmup: int = setting(5, part="workload", baseline=True, help="untimed warm-up batches")
    iters: int = setting(10, part="workload", baseline=True, help="timed iterations")
    batches_per_iter: int = setting(5, part="workload", baseline=True, help="batches per timed iteration")
    precision: str = setting(
        "fp32", part="workload", baseline=True, workload=True, help="torch: fp32 | amp; tf: fp32 | mixed"
    )
    controller: str = setting(
        "mpi", part="start", baseline=True, help="Horovod controller: mpi (mpirun) | gloo (horovodrun)"
    )  # how Horovod ranks are started and coordinated
    fp16_allreduce: bool = setting(False, part="workload", help="Horovod fp16 gradient compression")
    fusion_threshold_mb: float | None = setting(None, part="workload", help="Horovod fusion buffer (MiB)")
    cycle_time_ms: float | None = setting(None, part="workload", help="Horovod cycle time (ms)")
    bucket_cap_mb: float | None = setting(None, part="workload", help="DDP bucket size (MiB)")
    # GPU numerics (bench.numerics): the same defaults for torch and TF, recorded in every result
    tf32: str = setting(
        "on", part="workload", baseline=True, help="on | off: TF32 math for float32 convolutions and matmuls on GPUs"
    )
    memory_format: str | None = setting(
        None, part="workload", baseline=True, help="channels_last | channels_first (default: channels_last on GPUs)"
    )  # None: channels_last on GPUs
    cudnn_benchmark: str = setting(
        "on", part="workload", baseline=True, help="on | off: cuDNN autotuning of convolutions"
    )
    seed: int = setting(
        1234,
        part="workload",
        baseline=True,
        help="random seed; rank r uses seed + r (the engine must make the weights equal)",
    )
    benchmark: str = setting(DEFAULT, part="workload", baseline=True, workload=True, help=help_text())
    extra_env: dict[str, str] = setting(part="start", factory=dict, cli=False)
    # where and how the ranks run
    launcher: str = setting(LOCAL.name, part="start", cli=False)
    runtime: str = setting(HOST, part="start", baseline=True, cli=False)
    image: str | None = setting(
        None, part="start", baseline=True, help="container image (SIF path, podman name, ch-run dir)"
    )
    fabric: str | None = setting(
        None, part="placement", help="fabric preset: " + " | ".join(HOST_FABRICS)
    )  # None: no fabric preset, the libraries choose
    nodes: int = setting(1, part="placement", help="nodes")
    gpus_per_node: int = setting(0, part="placement", help="GPUs on each node (0: CPU run)")
    hostfile: str | None = setting(None, part="placement", help="mpirun hostfile")
    allreduce: str | None = setting(
        None, part="start", help="nccl | mpi | gloo (default: the engine's choice)"
    )  # None: the engine's default for the device
    gpudirect: str | None = setting(
        None, part="start", help="on | off (GPUDirect RDMA for NCCL/UCX)"
    )  # "on" | "off" | None (library default)
    # NCCL's in-switch reductions (issue 49): sweep axes like gpudirect; None leaves NCCL's default
    nvls: str | None = setting(
        None, part="start", help="on | off: NVLink SHARP in the NVSwitch (NCCL_NVLS_ENABLE; default: NCCL's)"
    )
    sharp: str | None = setting(
        None,
        part="start",
        help="on | off: SHARP in InfiniBand switches, NCCL's CollNet through the SHARP plugin (NCCL_COLLNET_ENABLE)",
    )
    mpi_plugin: str = setting("pmix", part="slurm", help="srun --mpi= plugin: pmix | pmi2")  # srun --mpi=
    partition: str | None = setting(None, part="slurm", help="Slurm partition (default: the site's)")
    account: str | None = setting(None, part="slurm", help="Slurm account (default: the site's)")
    time_limit: str | None = setting(None, part="slurm", help="Slurm time limit (default: the site's)")
    exclude_nodes: str | None = setting(
        None, part="slurm", help="Slurm nodes to leave out (srun/sbatch --exclude), e.g. n1,n[3-4]"
    )
    link_rate: str | None = setting(
        None, part="emulation", help="emulated launcher: link rate, e.g. 1gbit"
    )  # emulated launcher: shaped link rate, e.g. "1gbit"
    # communication benchmarks: the size sweeps (launch.kinds.sizes: allreduce, alltoall) and halo (bench.halo)
    # (their help: what each kind that reads them says, launch.kinds.field_help)
    backend: str = setting("mpi", part="communication", workload=True, help=field_help("backend"))
    min_bytes: int = setting(8, part="communication", workload=True, help=field_help("min_bytes"))
    max_bytes: int | None = setting(None, part="communication", workload=True, help=field_help("max_bytes"))
    # how long each size is measured (None: the bench's 5 s), not what is measured: results with
    # other budgets still compare
    max_seconds_per_size: float | None = setting(None, part="communication", help=field_help("max_seconds_per_size"))
    grid: int = setting(96, part="communication", workload=True, help=field_help("grid"))

    def __post_init__(self) -> None:
        # the batch the run will use is recorded like every other setting: resolved here, never None
        # in a spec's dict (256 on GPUs: NVIDIA's published ResNet-50 figures use it, and 32 leaves an
        # H100-class GPU launch-bound in eager mode; 32 on CPUs)
        if self.batch_size is None:
            object.__setattr__(self, "batch_size", GPU_BATCH_SIZE if self.gpus_per_node > 0 else CPU_BATCH_SIZE)
        if isinstance(self.max_seconds_per_size, int):  # a file's `= 1`: the key of `= 1.0`
            object.__setattr__(self, "max_seconds_per_size", float(self.max_seconds_per_size))
        if self.max_bytes is None:
            # NCCL on 8 x 400G nodes reaches a quarter to half of the line rate at 256 MiB: sweep to the
            # sizes where it is judged (launch.results.plausibility); the bench cuts to the GPU's memory
            device_buffers = self.gpus_per_node > 0 and self.backend in DEVICE_BACKENDS
            object.__setattr__(self, "max_bytes", NCCL_MAX_BYTES if device_buffers else HOST_MAX_BYTES)

    @classmethod
    def fields_where(cls, role: str) -> tuple[str, ...]:
        """The fields with a role ("baseline", "workload"), in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(role))

    @classmethod
    def part(cls, name: str) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("part") == name)

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes

    @classmethod
    def from_dict(cls, data: object, where: str) -> "RunSpec":
        """A spec read from a file (a result, an archive): fields known here, of their declared
        types, before any value is used; each flaw is one UsageError naming `where` and the field."""
        if not isinstance(data, dict):
            raise UsageError(f"{where}: spec is not an object")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise UsageError(f"{where}: spec fields unknown here: {', '.join(sorted(map(str, unknown)))}")
        hints = typing.get_type_hints(cls)
        for name, value in data.items():
            if not _of_type(value, hints[name]):
                raise UsageError(
                    f"{where}: spec field {name} must be {_type_name(hints[name])}, got {value!r}"[:300], fields=(name,)
                )
        return cls(**data).validated()

    def validated(self) -> "RunSpec":
        """This spec, checked by type and value (launch.trust's checks among them); once: the door a
        spec enters by (the CLI's run, an experiment file, a result, an archive) checks it, and a
        spec already checked passes as it is (dataclasses.replace makes a new, unchecked one)."""
        if self.__dict__.get("_validated"):
            return self
        for f in dataclasses.fields(self):  # whatever may reach a shell line or a job script
            trust.check_text(f"--{f.name.replace('_', '-')}", getattr(self, f.name))
        trust.check_env(self.extra_env)
        slurm.Request.parsed(self.partition, self.account, self.time_limit, self.exclude_nodes)
        # what reaches the argv of a container runtime, mpirun or tc: each of its shape (launch.shapes;
        # the launchers parse them again into the types their argv takes, launch.runs.run.make_plan)
        runtime_name("--runtime", self.runtime)
        if self.image:
            shapes.image("--image", self.image)
        if self.hostfile:
            shapes.hostfile("--hostfile", self.hostfile)
        if self.link_rate:
            shapes.link_rate("--link-rate", self.link_rate)
        if self.framework not in catalog.ENGINES:  # every kind's program is chosen by it
            raise UsageError(
                f"unknown framework {self.framework!r}; choose from {', '.join(catalog.ENGINES)}",
                fields=("framework",),
            )
        if self.benchmark not in BENCHMARKS:
            raise UsageError(
                f"unknown benchmark {self.benchmark!r}; choose from {', '.join(BENCHMARKS)}", fields=("benchmark",)
            )
        self.validate_placement()
        self.validate_magnitudes()
        kind(self.benchmark).validate(self)  # the fields its kind reads (launch.kinds)
        object.__setattr__(self, "_validated", True)  # not a field: no part of the spec's value
        return self

    def validate_magnitudes(self) -> None:
        """Every count within what a real run could ask (MAGNITUDES), and a one-host run's ranks
        within what this host's cores and GPUs can carry: a replayed 100000-rank run on one host
        would otherwise start 100000 processes."""
        for name, (low, high) in MAGNITUDES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, float):
                shapes.sample(f"--{name.replace('_', '-')}", value, low, high)
            else:
                shapes.count(f"--{name.replace('_', '-')}", value, int(low), int(high))
        if self.ranks // max(1, self.nodes) > MAX_RANKS_PER_NODE:
            raise UsageError(
                f"{self.ranks // self.nodes} ranks per node: at most {MAX_RANKS_PER_NODE}", fields=("ranks", "nodes")
            )
        if LAUNCHERS[self.launcher].one_host:
            carried = max(ONE_HOST_RANKS_PER_CORE * (os.cpu_count() or 1), self.gpus_per_node, 2)
            if self.ranks > carried:
                raise UsageError(
                    f"{self.ranks} ranks on this one host: at most {carried} ({ONE_HOST_RANKS_PER_CORE} per core, "
                    "or one per GPU)",
                    fields=("ranks",),
                )

    def validate_placement(self) -> None:
        choices = {"launcher": LAUNCHERS, "mpi_plugin": MPI_PLUGINS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UsageError(
                    f"unknown {name.replace('_', '-')} {getattr(self, name)!r}; choose from {', '.join(allowed)}",
                    fields=(name,),
                )
        if self.allreduce is not None and self.allreduce not in ALLREDUCE:
            raise UsageError(
                f"unknown allreduce {self.allreduce!r}; choose from {', '.join(ALLREDUCE)}", fields=("allreduce",)
            )
        if self.gpudirect not in (None, "on", "off"):
            raise UsageError(f"--gpudirect must be on or off, got {self.gpudirect!r}", fields=("gpudirect",))
        for name in IN_SWITCH_ENV:
            if getattr(self, name) not in (None, "on", "off"):
                raise UsageError(f"--{name} must be on or off, got {getattr(self, name)!r}", fields=(name,))
            if getattr(self, name) == "on" and not (self.uses_nccl and self.gpus_per_node > 0):
                raise UsageError(
                    f"--{name} on is NCCL's: it needs GPUs (--gpus-per-node) and NCCL (--allreduce nccl)",
                    fields=(name, "gpus_per_node", "allreduce"),
                )
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise UsageError("--nodes must be >= 1 and --gpus-per-node >= 0", fields=("nodes", "gpus_per_node"))
        if self.ranks % self.nodes:
            raise UsageError(
                f"{self.ranks} ranks do not divide evenly over {self.nodes} nodes", fields=("ranks", "nodes")
            )
        launcher = LAUNCHERS[self.launcher]
        if launcher.one_host and self.nodes > 1:
            raise UsageError(
                "--launcher local runs on this host only; use mpirun, srun, sbatch or emulated for --nodes > 1",
                fields=("launcher", "nodes"),
            )
        if self.engine == "horovod" and self.controller == "gloo" and launcher is not LOCAL:
            raise UsageError(
                "Horovod's gloo controller is started by horovodrun: use --launcher local, or --controller mpi",
                fields=("controller", "launcher"),
            )
        if self.engine == "ddp" and self.allreduce == "mpi":
            raise UsageError(
                "DDP has no MPI backend in PyTorch's wheels; use --allreduce gloo or nccl",
                fields=("allreduce", "engine"),
            )
        if self.allreduce == "nccl" and self.gpus_per_node == 0:
            raise UsageError("--allreduce nccl needs GPUs: give --gpus-per-node", fields=("allreduce", "gpus_per_node"))
        if (
            self.engine == "horovod"
            and self.allreduce in HOROVOD_CPU_ONLY
            and self.gpus_per_node > 0
            and trains(self.benchmark)
        ):
            raise UsageError(
                HOROVOD_GPU_OPERATIONS_REFUSAL.format(allreduce=self.allreduce),
                fields=("allreduce", "engine", "gpus_per_node"),
            )
        if self.gpudirect == "on" and (self.allreduce == "gloo" or self.gpus_per_node == 0):
            raise UsageError(
                "--gpudirect on needs GPUs (--gpus-per-node) and NCCL or CUDA-aware MPI (--allreduce nccl or mpi)",
                fields=("gpudirect", "gpus_per_node", "allreduce"),
            )
        if self.containerised and not self.image:
            raise UsageError(f"--runtime {self.runtime} needs --image", fields=("runtime", "image"))
        if launcher.emulated and self.nodes < 2:
            raise UsageError("the emulated launcher needs --nodes >= 2", fields=("launcher", "nodes"))
        if self.link_rate and not launcher.emulated:
            raise UsageError("--link-rate applies to --launcher emulated only", fields=("link_rate", "launcher"))

    @property
    def emulated(self) -> bool:
        """Whether the ranks run on emulated nodes (the launcher registry's trait)."""
        return LAUNCHERS[self.launcher].emulated

    @property
    def containerised(self) -> bool:
        """Whether the ranks run inside an image (any runtime but the host's)."""
        return self.runtime != HOST

    @property
    def uses_nccl(self) -> bool:
        """Whether the run's collectives go through NCCL: asked for, or the engines' own
        choice on GPUs (DDP's backend, Horovod's GPU operations, TF's collective)."""
        return self.allreduce == "nccl" or (self.allreduce is None and self.gpus_per_node > 0)

    @property
    def hands_gpu_buffers_to_mpi(self) -> bool:
        """Whether the run hands GPU buffers to MPI (a CUDA-aware MPI must move them): training with
        --allreduce mpi on GPUs, or a collective micro-benchmark's mpi backend on GPUs."""
        if self.gpus_per_node <= 0:
            return False
        if trains(self.benchmark):
            return self.allreduce == "mpi"
        return kind(self.benchmark).communicates_by == "backend" and self.backend == "mpi"

    @property
    def effective_image_size(self) -> int:
        return self.image_size or catalog.MODELS[self.framework][self.model]

    def in_switch_env(self) -> dict[str, str]:
        """NCCL_NVLS_ENABLE / NCCL_COLLNET_ENABLE for the settings given (--nvls, --sharp)."""
        return {
            var: "1" if getattr(self, name) == "on" else "0"
            for name, var in IN_SWITCH_ENV.items()
            if getattr(self, name)
        }

    def bench_args(self) -> list[str]:
        """The bench program's own arguments (the part after `python -m bench.X`): its kind's."""
        return kind(self.benchmark).bench_args(self)

    def label_parts(self) -> tuple[str, ...]:
        """What a run id names: framework, engine, model; or the communication benchmark (its kind's)."""
        return kind(self.benchmark).label_parts(self)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
