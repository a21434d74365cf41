"""Which environment variables a run may take from a file that travels between sites.

One gate, whatever the file: a replayed archive's runs (RunSpec.extra_env) and an experiment
file's [run.env] pass it alike. The local site file's own [env] is the site's choice and is
not judged here, only shaped (identifier names, one-line values: launch.trust.check_env).

Open MPI, PRRTE, PMIx, UCX, libfabric, NCCL, Horovod, TensorFlow and the C/Python runtimes
each read variables that start a program (OMPI_MCA_orte_fork_agent, UCX_GDB_COMMAND), load a
library (NCCL_NET_PLUGIN, FI_PROVIDER_PATH, LD_PRELOAD), read a file or list that sets
anything else (OMPI_MCA_mca_base_param_files, OMPI_MCA_mca_base_env_list, NCCL_CONF_FILE) or
write a file where they are told (HOROVOD_TIMELINE, NCCL_DEBUG_FILE, UCX_LOG_FILE); every
release adds some. So no family is admitted: a name passes only when it is in KNOBS, the
variables the bundle's presets, launchers and engines set plus the tuning knobs a site is
known to change, each with the shape its value must have and the documentation that defines
it. Within its shape a value can name no program, library or path.

Some names are never admitted, not even by --accept-env: those of a class in NEVER (programs,
launcher and container options, components, settings, rendezvous, paths), recognised by the
words of the name whatever its case and prefix (OMPI_MCA_, PRTE_MCA_, PMIX_MCA_, UCX_MPI_, ...),
and the names in KNOWN_HAZARDS, whose words do not say what they do.

Verdicts (`judge`), shown one per variable by `replay --dry-run`:
  allowed          in KNOBS and its value has the knob's shape
  refused          a name of a never-admitted class or in KNOWN_HAZARDS (--accept-env cannot
                   admit these); a knob whose value has the wrong shape, unless this site
                   accepts it by name
  needs-accept     any other name: this site may accept it by name (--accept-env NAME)
  accepted         a name this site accepted; its value still may hold no path (no "/")

Files a run writes (timelines, debug logs, dumps) are the bundle's to place under the run
directory; none is ever taken from a file from elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Mapping

# Where each knob is documented (the text a reviewer looks up)
DOCS = {
    "nccl": "NCCL User Guide, Environment Variables (docs.nvidia.com/deeplearning/nccl)",
    "ompi": "Open MPI 4.1 MCA parameters and their synonyms (ompi_info --all --level 9 --parsable; "
    "docs.open-mpi.org, The Modular Component Architecture: environment variables, parameter files, "
    "mca_base_env_list)",
    "ompi-installdirs": "Open MPI installdirs env component: OPAL_PREFIX, OPAL_EXEC_PREFIX, OPAL_BINDIR ... "
    "OPAL_PKGLIBDIR move the installation, its components included",
    "prrte": "PRRTE (Open MPI 5's runtime; docs.prrte.org): PRTE_MCA_ parameters (prte_fork_agent, "
    "prte_launch_agent, plm_ssh_agent and its rsh synonyms); its ompi personality reads "
    "OMPI_MCA_mca_base_env_list",
    "pmix": "PMIx MCA parameters (pmix_info --all); PMIx environment: PMIX_SERVER_URI*, PMIX_SYSTEM_TMPDIR, "
    "PMIX_INSTALL_PREFIX",
    "ucx": "UCX configuration (ucx_info -f; openucx.readthedocs.io); UCX_<prefix>_NAME overrides UCX_NAME "
    "(ucp_config_read)",
    "libfabric": "libfabric man pages: fi_provider(7) (FI_PROVIDER_PATH, FI_HOOK), fi_tcp(7), fi_efa(7), "
    "fi_cxi(7), fi_psm2(7), fi_mr(3)",
    "psm2": "Intel PSM2 Programmer's Guide, environment variables",
    "verbs": "rdma-core: ibv_fork_init(3) (RDMAV_FORK_SAFE, IBV_FORK_SAFE)",
    "horovod": "Horovod docs: Tensor Fusion, Autotune, Timeline, Gloo, Process Sets (horovod.readthedocs.io)",
    "torch": "PyTorch docs: torch.distributed environment variables",
    "python": "Python documentation, Command line and environment",
    "tf": "TensorFlow: logging and GPU threading variables, TF_CONFIG (tensorflow.org); XLA_FLAGS --xla_dump_to",
    "openmp": "OpenMP 5.2 specification, chapter Environment Variables (OMP_TOOL_LIBRARIES)",
    "intel": "Intel oneAPI: KMP_AFFINITY, KMP_BLOCKTIME; oneMKL: MKL_NUM_THREADS",
    "cuda": "CUDA C++ Programming Guide, CUDA Environment Variables; CUPTI: CUDA_INJECTION64_PATH",
    "nvidia-container": "NVIDIA Container Toolkit: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES",
    "fabric-bench": "fabric-bench: bench.gpu_request (the GPUs per node a run asked for; docs/gpu.md)",
    "slurm": "Slurm srun(1), sbatch(1), salloc(1): INPUT ENVIRONMENT VARIABLES (SLURM_TASK_PROLOG, "
    "SLURM_EXPORT_ENV, SBATCH_EXPORT, ...)",
    "containers": "Apptainer User Guide: Environment and Metadata (APPTAINERENV_*), Bind Paths and Mounts "
    "(APPTAINER_BIND; SINGULARITY* the legacy names); containers.conf(5) (CONTAINERS_CONF)",
    "glibc": "ld.so(8): LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, LD_DEBUG_OUTPUT; iconv_open(3): GCONV_PATH",
    "shell": "bash(1): INVOCATION (BASH_ENV, ENV), Shell Variables (SHELLOPTS, PS4)",
}


@dataclass(frozen=True)
class Shape:
    """What a value must look like: `describe` is shown when it does not."""

    describe: str
    fits: Callable[[str], bool]


def _pattern(describe: str, regex: str) -> Shape:
    compiled = re.compile(regex)
    return Shape(describe, lambda value: compiled.fullmatch(value) is not None)


def integer(low: int = 0, high: int = 2**31 - 1) -> Shape:
    def fits(value: str) -> bool:
        return re.fullmatch(r"-?\d{1,12}", value) is not None and low <= int(value) <= high

    return Shape(f"an integer {low}..{high}", fits)


def one_of(*values: str, integers: tuple[int, int] | None = None) -> Shape:
    """An enumeration, compared case-insensitively (the libraries do); `integers`: a numeric range too."""
    allowed = {v.lower() for v in values}
    number = integer(*integers) if integers else None

    def fits(value: str) -> bool:
        return value.lower() in allowed or (number is not None and number.fits(value))

    return Shape(
        "one of " + ", ".join(values) + (f" or an integer {integers[0]}..{integers[1]}" if integers else ""), fits
    )


def list_of(*values: str, negate: bool = True, separator: str = ",") -> Shape:
    """A list of enumerated items (`^` first: all but these, where the library reads it so)."""
    allowed = {v.lower() for v in values}

    def fits(value: str) -> bool:
        items = value[1:] if negate and value.startswith("^") else value
        return bool(items) and all(item.lower() in allowed for item in items.split(separator))

    return Shape(
        f"a {separator!r}-separated list of {', '.join(values)}" + (" (^ first: all but)" if negate else ""), fits
    )


BOOLEAN = one_of("0", "1", "yes", "no", "y", "n", "true", "false", "on", "off", "enable", "disable")
COUNT = integer()
NUMBER = _pattern("a decimal number", r"\d{1,9}(\.\d{1,9})?")
SIZE = _pattern("a size in bytes (digits, then optionally k, m or g)", r"\d{1,15}[kKmMgG]?[bB]?")
# Linux interface names (IFNAMSIZ 16), comma-separated; NCCL reads a leading ^ (exclude) or = (exact);
# Open MPI's if_include also takes IPv4 subnets in CIDR form
_IFNAME = r"[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,14}"
_CIDR = r"\d{1,3}(\.\d{1,3}){3}/\d{1,2}"
INTERFACES = _pattern(
    "interface names (eth0,ib0; NCCL: ^ or = first) or IPv4 subnets",
    rf"[\^=]?({_IFNAME}|{_CIDR})(,({_IFNAME}|{_CIDR})){{0,63}}",
)
# RDMA devices, optionally with a port (mlx5_0:1), comma-separated; NCCL: ^ or = first; UCX: "all"
_DEVICE = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:\d{1,3})?"
DEVICES = _pattern(
    "device names (mlx5_0, mlx5_0:1, ...; ^ or = first) or all", rf"all|[\^=]?{_DEVICE}(,{_DEVICE}){{0,63}}"
)
GPUS = _pattern(
    "GPU indices or UUIDs (0,1 / GPU-... / MIG-...), all or none",
    r"all|none|void|NoDevFiles|-1|[A-Za-z0-9-]{1,64}(,[A-Za-z0-9-]{1,64}){0,63}",
)
# OpenMP / Intel affinity strings: words, numbers, commas, = and braces, never a path
AFFINITY = _pattern("an affinity list (words, numbers, ',', '=', ':', braces)", r"[A-Za-z0-9_,=:{}\[\]-]{1,200}")

BTL = ("self", "vader", "sm", "tcp", "openib", "uct", "ofi", "smcuda", "usnic")
UCX_TRANSPORTS = (
    "all",
    "self",
    "sm",
    "shm",
    "mm",
    "posix",
    "sysv",
    "xpmem",
    "cma",
    "knem",
    "tcp",
    "ib",
    "rc",
    "rc_v",
    "rc_x",
    "rc_verbs",
    "rc_mlx5",
    "ud",
    "ud_v",
    "ud_x",
    "ud_verbs",
    "ud_mlx5",
    "dc",
    "dc_x",
    "dc_mlx5",
    "srd",
    "cuda",
    "cuda_copy",
    "cuda_ipc",
    "gdr_copy",
    "rocm",
    "rocm_copy",
    "rocm_ipc",
    "rdmacm",
    "sockcm",
    "cm",
)
FI_PROVIDERS = (
    "tcp",
    "udp",
    "sockets",
    "shm",
    "verbs",
    "efa",
    "psm2",
    "psm3",
    "opx",
    "cxi",
    "ucx",
    "rxm",
    "rxd",
    "ofi_rxm",
    "ofi_rxd",
    "tcp;ofi_rxm",
    "verbs;ofi_rxm",
    "udp;ofi_rxd",
    "lnx",
    "sm2",
    "net",
)
NCCL_SUBSYSTEMS = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "ALL",
)
GDR_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")


@dataclass(frozen=True)
class Knob:
    shape: Shape
    doc: str  # a key of DOCS


def _knobs(doc: str, shapes: Mapping[str, Shape]) -> dict[str, Knob]:
    return {name: Knob(shape, doc) for name, shape in shapes.items()}


# fmt: off
KNOBS: dict[str, Knob] = {
    **_knobs("nccl", {
        "NCCL_NET": one_of("IB", "Socket", "OFI", "AWS Libfabric"),
        "NCCL_IB_DISABLE": BOOLEAN, "NCCL_IB_HCA": DEVICES, "NCCL_SOCKET_IFNAME": INTERFACES,
        "NCCL_NET_GDR_LEVEL": one_of(*GDR_LEVELS, integers=(0, 5)), "NCCL_NET_GDR_READ": BOOLEAN,
        "NCCL_CROSS_NIC": integer(0, 2), "NCCL_IB_GID_INDEX": integer(-1, 255), "NCCL_IB_TC": integer(0, 255),
        "NCCL_IB_SL": integer(0, 15), "NCCL_IB_TIMEOUT": integer(1, 31), "NCCL_IB_RETRY_CNT": integer(0, 7),
        "NCCL_IB_QPS_PER_CONNECTION": integer(1, 128), "NCCL_IB_ROCE_VERSION_NUM": integer(1, 2),
        "NCCL_IB_ADDR_FAMILY": one_of("AF_INET", "AF_INET6"), "NCCL_IB_PCI_RELAXED_ORDERING": integer(0, 2),
        "NCCL_IB_ADAPTIVE_ROUTING": BOOLEAN, "NCCL_SOCKET_NTHREADS": integer(1, 16),
        "NCCL_NSOCKS_PERTHREAD": integer(1, 64), "NCCL_BUFFSIZE": SIZE, "NCCL_NTHREADS": integer(64, 1024),
        "NCCL_MIN_NCHANNELS": integer(1, 256), "NCCL_MAX_NCHANNELS": integer(1, 256),
        "NCCL_MIN_CTAS": integer(1, 256), "NCCL_MAX_CTAS": integer(1, 256),
        "NCCL_ALGO": list_of("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"),
        "NCCL_PROTO": list_of("LL", "LL128", "Simple"),
        "NCCL_P2P_DISABLE": BOOLEAN, "NCCL_SHM_DISABLE": BOOLEAN, "NCCL_NVLS_ENABLE": BOOLEAN,
        "NCCL_P2P_LEVEL": one_of(*GDR_LEVELS, integers=(0, 5)), "NCCL_COLLNET_ENABLE": BOOLEAN,
        "NCCL_PXN_DISABLE": BOOLEAN, "NCCL_CUMEM_ENABLE": BOOLEAN, "NCCL_IGNORE_CPU_AFFINITY": BOOLEAN,
        "NCCL_GDRCOPY_ENABLE": BOOLEAN, "NCCL_DMABUF_ENABLE": BOOLEAN, "NCCL_NET_SHARED_BUFFERS": BOOLEAN,
        "NCCL_DEBUG": one_of("NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"),
        "NCCL_DEBUG_SUBSYS": list_of(*NCCL_SUBSYSTEMS),
    }),
    **_knobs("ompi", {
        "OMPI_MCA_pml": list_of("ob1", "ucx", "cm", "v", "monitoring"), "OMPI_MCA_btl": list_of(*BTL),
        "OMPI_MCA_mtl": list_of("ofi", "psm2", "psm", "portals4"), "OMPI_MCA_osc": list_of("ucx", "rdma", "pt2pt", "sm"),
        "OMPI_MCA_coll": list_of("basic", "libnbc", "self", "sm", "sync", "tuned", "inter", "han", "adapt", "hcoll",
                                 "ucc", "cuda"),
        "OMPI_MCA_btl_tcp_if_include": INTERFACES, "OMPI_MCA_btl_tcp_if_exclude": INTERFACES,
        "OMPI_MCA_oob_tcp_if_include": INTERFACES, "OMPI_MCA_oob_tcp_if_exclude": INTERFACES,
        "OMPI_MCA_btl_tcp_links": integer(1, 64), "OMPI_MCA_mtl_ofi_provider_include": list_of(*FI_PROVIDERS, negate=False),
        "OMPI_MCA_mtl_ofi_provider_exclude": list_of(*FI_PROVIDERS, negate=False),
        "OMPI_MCA_pml_ucx_tls": list_of("any", *UCX_TRANSPORTS), "OMPI_MCA_pml_ucx_devices": DEVICES,
        "OMPI_MCA_mpi_yield_when_idle": BOOLEAN, "OMPI_MCA_mpi_leave_pinned": integer(-1, 1),
        "OMPI_MCA_btl_vader_single_copy_mechanism": one_of("none", "cma", "knem", "xpmem", "emulated"),
        "OMPI_MCA_coll_tuned_use_dynamic_rules": BOOLEAN, "OMPI_MCA_coll_tuned_allreduce_algorithm": integer(0, 6),
        "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": SIZE, "OMPI_MCA_coll_hcoll_enable": BOOLEAN,
        "OMPI_MCA_opal_cuda_support": BOOLEAN, "OMPI_MCA_pml_base_verbose": integer(0, 100),
        "OMPI_MCA_btl_base_verbose": integer(0, 100), "OMPI_MCA_mtl_base_verbose": integer(0, 100),
        "OMPI_MCA_mtl_ofi_verbose": integer(0, 100), "OMPI_MCA_pml_ucx_verbose": integer(0, 100),
    }),
    **_knobs("pmix", {"PMIX_MCA_gds": list_of("hash", "ds12", "ds21"), "PMIX_MCA_psec": list_of("native", "none", "munge")}),
    **_knobs("ucx", {
        "UCX_TLS": list_of(*UCX_TRANSPORTS), "UCX_NET_DEVICES": DEVICES,
        "UCX_IB_GPU_DIRECT_RDMA": one_of("yes", "no", "try", "y", "n"), "UCX_IB_GID_INDEX": one_of("auto", integers=(0, 255)),
        "UCX_IB_SL": integer(0, 15), "UCX_IB_TRAFFIC_CLASS": integer(0, 255), "UCX_IB_ROCE_REACHABILITY_MODE": one_of("all", "local_subnet"),
        "UCX_IB_PCI_RELAXED_ORDERING": one_of("on", "off", "auto", "try"), "UCX_MAX_RNDV_RAILS": integer(1, 16),
        "UCX_RNDV_THRESH": one_of("auto", "inf", integers=(0, 2**31 - 1)),
        "UCX_RNDV_SCHEME": one_of("auto", "get_zcopy", "put_zcopy", "am", "get_ppln", "put_ppln"),
        "UCX_ZCOPY_THRESH": one_of("auto", "inf", integers=(0, 2**31 - 1)), "UCX_MEMTYPE_CACHE": BOOLEAN,
        "UCX_WARN_UNUSED_ENV_VARS": BOOLEAN,
        "UCX_LOG_LEVEL": one_of("fatal", "error", "warn", "diag", "info", "debug", "trace", "req", "data", "async",
                                "func", "poll"),
    }),
    **_knobs("libfabric", {
        "FI_PROVIDER": list_of(*FI_PROVIDERS), "FI_TCP_IFACE": INTERFACES, "FI_EFA_FORK_SAFE": BOOLEAN,
        "FI_EFA_USE_DEVICE_RDMA": BOOLEAN, "FI_EFA_USE_HUGE_PAGE": BOOLEAN, "FI_EFA_ENABLE_SHM_TRANSFER": BOOLEAN,
        "FI_HMEM_CUDA_USE_GDRCOPY": BOOLEAN,
        "FI_MR_CACHE_MONITOR": one_of("userfaultfd", "memhooks", "kdreg2", "cuda", "disabled"),
        "FI_CXI_DEFAULT_CQ_SIZE": COUNT, "FI_CXI_DEFAULT_TX_SIZE": COUNT, "FI_CXI_DISABLE_HOST_REGISTER": BOOLEAN,
        "FI_CXI_RDZV_EAGER_SIZE": COUNT, "FI_CXI_RDZV_GET_MIN": COUNT, "FI_CXI_RDZV_THRESHOLD": COUNT,
        "FI_CXI_RDZV_PROTO": one_of("default", "alt_read", "alt_write"),
        "FI_CXI_RX_MATCH_MODE": one_of("hardware", "software", "hybrid"),
        "FI_LOG_LEVEL": one_of("warn", "trace", "info", "debug"),
    }),
    **_knobs("psm2", {"PSM2_DEVICES": list_of("self", "shm", "hfi", negate=False), "PSM2_MULTIRAIL": integer(0, 2),
                      "HFI_UNIT": integer(0, 15), "HFI_PORT": integer(0, 2)}),
    **_knobs("verbs", {"RDMAV_FORK_SAFE": BOOLEAN, "IBV_FORK_SAFE": BOOLEAN}),
    **_knobs("horovod", {
        "HOROVOD_CPU_OPERATIONS": one_of("mpi", "gloo", "ccl"), "HOROVOD_FUSION_THRESHOLD": SIZE,
        "HOROVOD_CYCLE_TIME": NUMBER, "HOROVOD_CACHE_CAPACITY": COUNT, "HOROVOD_HIERARCHICAL_ALLREDUCE": BOOLEAN,
        "HOROVOD_HIERARCHICAL_ALLGATHER": BOOLEAN, "HOROVOD_AUTOTUNE": BOOLEAN, "HOROVOD_GLOO_IFACE": INTERFACES,
        "HOROVOD_LOG_LEVEL": one_of("trace", "debug", "info", "warning", "error", "fatal"),
        "HOROVOD_NUM_NCCL_STREAMS": integer(1, 64),
    }),
    "GLOO_SOCKET_IFNAME": Knob(INTERFACES, "torch"),
    # what the launchers set on every rank (launch.ranks.launchers.rank_env)
    **_knobs("ompi", {"OMPI_ALLOW_RUN_AS_ROOT": BOOLEAN, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": BOOLEAN}),
    "PYTHONUNBUFFERED": Knob(BOOLEAN, "python"),
    "FABRIC_BENCH_GPUS_PER_NODE": Knob(integer(0, 1024), "fabric-bench"),
    **_knobs("torch", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": integer(0, 3), "TORCH_NCCL_BLOCKING_WAIT": BOOLEAN,
                       "TORCH_DISTRIBUTED_DEBUG": one_of("OFF", "INFO", "DETAIL")}),
    **_knobs("tf", {"TF_CPP_MIN_LOG_LEVEL": integer(0, 3), "TF_ENABLE_ONEDNN_OPTS": BOOLEAN,
                    "TF_GPU_THREAD_MODE": one_of("global", "gpu_private", "gpu_shared"),
                    "TF_GPU_THREAD_COUNT": integer(1, 64), "TF_CUDNN_USE_AUTOTUNE": BOOLEAN,
                    "TF_FORCE_GPU_ALLOW_GROWTH": BOOLEAN, "TF_USE_LEGACY_KERAS": BOOLEAN}),
    **_knobs("openmp", {"OMP_NUM_THREADS": _pattern("thread counts (4 or 4,2)", r"\d{1,4}(,\d{1,4}){0,7}"),
                        "OMP_PROC_BIND": list_of("true", "false", "close", "spread", "master", "primary", negate=False),
                        "OMP_PLACES": AFFINITY, "OMP_WAIT_POLICY": one_of("active", "passive")}),
    **_knobs("intel", {"KMP_AFFINITY": AFFINITY, "KMP_BLOCKTIME": one_of("infinite", integers=(0, 2**31 - 1)),
                       "MKL_NUM_THREADS": integer(1, 4096)}),
    **_knobs("cuda", {"CUDA_VISIBLE_DEVICES": GPUS, "CUDA_DEVICE_MAX_CONNECTIONS": integer(1, 32),
                      "CUDA_DEVICE_ORDER": one_of("FASTEST_FIRST", "PCI_BUS_ID")}),
    **_knobs("nvidia-container", {
        "NVIDIA_VISIBLE_DEVICES": GPUS,
        "NVIDIA_DRIVER_CAPABILITIES": list_of("all", "compute", "utility", "graphics", "video", "display", "compat32",
                                              negate=False)}),
}

# fmt: on


# ------------------------------------------------------------------ never admitted

# The prefixes Open MPI's Modular Component Architecture reads a parameter under: Open MPI 4.1
# only OMPI_MCA_ (its mpirun ignores PRTE_MCA_, OPAL_MCA_ and any other case: tried), Open MPI 5
# OMPI_MCA_ for its own frameworks and PRTE_MCA_ for PRRTE's (PRRTE_MCA_ before PRRTE 2), PMIx
# PMIX_MCA_; the parameter after the prefix has the same meaning whichever reads it
MCA_PREFIXES = ("OMPI_MCA_", "OPAL_MCA_", "ORTE_MCA_", "PRTE_MCA_", "PRRTE_MCA_", "PMIX_MCA_")


def canonical(name: str) -> str:
    """How the tables below spell a name: upper-case, any MCA prefix written OMPI_MCA_."""
    upper = name.upper()
    prefix = next((p for p in MCA_PREFIXES if upper.startswith(p)), None)
    return "OMPI_MCA_" + upper[len(prefix) :] if prefix else upper


@dataclass(frozen=True)
class Hazard:
    """A class of variables no file from elsewhere may set, and how a name says it is one.

    A canonical name is of the class when it starts with one of `families`, one of its words
    (split at "_") is a `word`, or its last word is a `last` (words that name a path only at the
    end: UCX_RC_VERBS_PATH_MTU is a network path, UCX_IB_SUBNET_PREFIX_LEN a length)."""

    does: str
    docs: tuple[str, ...]  # keys of DOCS: where the libraries document members of the class
    word: str | None = None  # a regular expression a whole word matches
    last: str | None = None
    families: tuple[str, ...] = ()

    def said_by(self, key: str) -> str | None:
        """What in the canonical name `key` puts it in this class (None: nothing does)."""
        words = key.split("_")
        family = next((f for f in self.families if key.startswith(f)), None)
        if family and family.startswith("OMPI_MCA_"):  # any MCA prefix (`canonical`)
            return f"the MCA parameter {family.removeprefix('OMPI_MCA_').lower()}*"
        if family:
            return f"the prefix {family}"
        said = next((w for w in words if self.word and re.fullmatch(self.word, w)), None)
        if said is None and self.last and re.fullmatch(self.last, words[-1]):
            said = words[-1]
        return f"the word {said}" if said else None


# fmt: off
NEVER: dict[str, Hazard] = {
    "program": Hazard(
        "starts a program (an agent, launcher, debugger or command) or hands one its arguments",
        ("ompi", "prrte", "pmix", "ucx", "shell"),
        word=r"AGENTS?|LAUNCHERS?|DEBUGGERS?|GDB|XTERM|EXEC|EXECUTABLE|PROLOG|EPILOG",
        last=r"COMMANDS?|CMD|ARGS|ARGV|SCRIPTS?|SHELL|BROWSER|EDITOR|VISUAL|PAGER"),
    "launcher option": Hazard(
        "sets an option of the job launcher or container runtime (what runs before the ranks, what is "
        "bound, exported or written)",
        ("slurm", "containers"),
        families=("SLURM_", "SRUN_", "SBATCH_", "SALLOC_", "APPTAINER", "SINGULARITY", "CONTAINERS_", "PODMAN_",
                  "DOCKER_")),
    "component": Hazard(
        "loads a library, plug-in, hook or module into the process",
        ("ompi", "nccl", "libfabric", "glibc", "cuda", "openmp"),
        word=r"PLUGINS?|PRELOAD|HOOKS?|AUDIT|INJECTION\d*|LIBRARY|LIBRARIES", last=r"LIBS?"),
    "settings": Hazard(
        "sets other parameters or variables (a parameter or configuration file, an environment list, flags)",
        ("ompi", "prrte", "pmix", "nccl", "tf"),
        word=r"CONF|CONFIG", last=r"\w*FLAGS",
        families=("OMPI_MCA_MCA_",)),  # the MCA parameter system itself, under every MCA prefix
    "rendezvous": Hazard(
        "points the ranks or their launcher at a server or address of its choosing",
        ("ompi", "pmix", "horovod", "nccl"),
        word=r"RENDEZVOUS|RNDZ|URI\d*", last=r"SERVER"),
    "path": Hazard(
        "names a file or directory to read or write (a log, dump, timeline, profile, session or "
        "installation directory)",
        ("ompi", "ompi-installdirs", "pmix", "ucx", "nccl", "horovod", "python", "glibc"),
        word=r"\w*DIRS?|DIRECTORY|FILENAME|\w*FILES?|TIMELINE|DUMP",
        last=r"\w*PATHS?|\w*PREFIX(ES)?|\w*HOME|DEST|OUTPUT|LOG"),
}

# Names whose words do not say what they do (and a few that do, for a reason that says more).
# Matched in any case, an Open MPI parameter under every MCA prefix (`canonical`).
KNOWN_HAZARDS: dict[str, str] = {
    # Open MPI (4.1: orte; 5: prte) and PMIx
    "OMPI_MCA_orte_fork_agent": "runs a program in front of every rank",
    "OMPI_MCA_prte_fork_agent": "runs a program in front of every rank",
    "OMPI_MCA_plm_rsh_agent": "runs a program to start remote daemons",
    "OMPI_MCA_mca_base_param_files": "reads a file that sets any MCA parameter",
    "OMPI_MCA_mca_base_env_list": "sets any variable in every rank, as mpirun -x does",
    "OMPI_MCA_orte_report_events": "reports events to a URI of its choosing",
    "OMPI_MCA_rmaps_base_topology": "reads a topology file of its choosing",
    "OMPI_MCA_orte_default_dash_host": "starts the ranks on hosts of its choosing",
    "OMPI_MCA_prte_default_dash_host": "starts the ranks on hosts of its choosing",
    # UCX, NCCL, Horovod
    "UCX_HANDLE_ERRORS": "debug/freeze start a debugger or stop the process on an error",
    "NCCL_COMM_ID": "sends the ranks to a bootstrap address of its choosing",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "sends ranks to a rendezvous server of its choosing",
    # TensorFlow
    "TF_CONFIG": "points the workers at a cluster of its choosing",
    "TF_XLA_FLAGS": "XLA flags write dumps to chosen paths (--xla_dump_to)",
    "XLA_FLAGS": "XLA flags write dumps to chosen paths (--xla_dump_to)",
    # the C and Python runtimes, the shell
    "LD_PRELOAD": "loads a library into every process",
    "PATH": "changes which programs run",
    "PYTHONPATH": "changes which Python code imports",
    "PYTHONUSERBASE": "changes where Python imports user packages from",
    "PYTHONSTARTUP": "runs a Python file",
    "PYTHONWARNINGS": "imports a module named in a warning filter",
    "PYTHONBREAKPOINT": "runs a callable of its choosing",
    "HOSTALIASES": "reads a file that renames hosts",
    "BASH_ENV": "runs a file in every bash started",
    "ENV": "runs a file in every sh started",
    "SHELLOPTS": "turns on options (xtrace, ...) in every bash started",
    "PS4": "runs command substitutions in every traced bash line",
}
# Files the bundle itself places under the run directory: refused from elsewhere like any hazard
BUNDLE_PLACED: dict[str, str] = {
    "OMPI_MCA_coll_tuned_dynamic_rules_filename": "reads a rules file; the bundle writes the run's own "
                                                  "under the run directory (launch.site.fabric_preset)",
}
KNOWN_HAZARDS.update(BUNDLE_PLACED)
# fmt: on
_KNOWN = {canonical(name): why for name, why in KNOWN_HAZARDS.items()}


def never(name: str) -> str | None:
    """Why no file from elsewhere may set `name`, however spelled (None: its value may be judged)."""
    key = canonical(name)
    if key in _KNOWN:
        return _KNOWN[key]
    for hazard in NEVER.values():
        said = hazard.said_by(key)
        if said:
            return f"{said} says it {hazard.does}"
    return None


Status = Literal["allowed", "accepted", "refused", "needs-accept"]


@dataclass(frozen=True)
class Verdict:
    name: str
    value: str
    status: Status
    reason: str

    @property
    def passes(self) -> bool:
        return self.status in ("allowed", "accepted")

    def explained(self) -> str:
        return f"refused, {self.reason}" if self.status == "refused" else self.reason

    def line(self) -> str:
        """What `replay --dry-run` shows for it."""
        words = {
            "allowed": "allowed by name",
            "accepted": "accepted by --accept-env",
            "refused": "refused",
            "needs-accept": "needs --accept-env",
        }
        return f"env {self.name}={self.value}: {words[self.status]} ({self.reason})"


def judge(name: str, value: str, accepted: Iterable[str] = ()) -> Verdict:
    """One variable from elsewhere, judged by its name (exact for a knob, any spelling for a
    hazard) and its value's shape."""
    hazard = never(name)
    if hazard:
        return Verdict(name, value, "refused", hazard + "; --accept-env cannot admit it")
    knob = KNOBS.get(name)
    if knob is not None and knob.shape.fits(value):
        return Verdict(name, value, "allowed", f"documented in {DOCS[knob.doc]}")
    if name in set(accepted):
        if "/" in value:
            return Verdict(
                name, value, "refused", "accepted by name, but a value from another site may not hold a path"
            )
        return Verdict(name, value, "accepted", "accepted here with --accept-env")
    if knob is not None:
        return Verdict(name, value, "refused", f"its value must be {knob.shape.describe}")
    return Verdict(name, value, "needs-accept", f"not on the allow-list; --accept-env {name} only if you trust it")


def judge_all(env: Mapping[str, str], accepted: Iterable[str] = ()) -> list[Verdict]:
    accepted = tuple(accepted)
    return [judge(name, value, accepted) for name, value in sorted(env.items())]
