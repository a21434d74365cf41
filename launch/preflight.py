"""Preflight: what must hold before a run starts, checked on this host and inside the image.

Two parts:
- the basics (`preflight`): the launcher and runtime binaries, the image and its
  fabric label, Horovod's build, the fabric's required host paths, the emulated
  cluster. A failure raises before anything starts.
- fabric truth (`fabric_checks`): what the image brings against what the host
  provides, for the run's fabric. One `sh` inside the container (the run's own
  runtime, binds and environment) reports the image's libfabric, UCX, Open MPI,
  NCCL and net plugin, rdma-core providers and the device nodes it can open; the
  host's side comes from the same tools and /sys, /dev. Each check has a verdict:
  ok | warn | fail (with the fix) | unknown (could not be checked here: never
  `ok`). A fail stops the run unless --force; every check goes into result.json
  under `preflight`.

What the checks look for, and why (the reports behind them):
- libfabric/UCX/Open MPI versions, host vs image; with host mpirun starting
  containers (the hybrid model) Open MPI must agree across them.
- the host's libfabric bound in (Slingshot): every symbol version the image's
  consumers (aws-ofi-nccl's libnccl-net, Open MPI's mtl ofi) need must be defined
  by the host's library: aws-ofi-nccl built against libfabric 1.18 and run on
  1.17 fails with "version `FABRIC_1.7' not found" (aws/aws-ofi-nccl#241,
  awslabs/awsome-distributed-ai#292); the host's libfabric replacing the image's
  (charliecloud#1449) is exactly this route.
- the host's RDMA drivers vs the image's rdma-core providers (libmlx5 for mlx5_core,
  libefa for efa, libhfi1verbs + libpsm2 for hfi1): without the provider verbs
  sees no device; and the image's libibverbs opening the host's devices (`ibv_devinfo
  -l` in the container): a provider for another kernel ABI than the host driver
  speaks drops the device although its file is there (k8snetworkplumbingwg/sriov-cni#348).
- aws-ofi-nccl on EFA needs libfabric >= 1.18 (aws/aws-ofi-nccl#333).
- device nodes: /dev/infiniband/uverbs* (and rdma_cm), /dev/hfi1_*, /dev/cxi*,
  /dev/nvidia*, /dev/gdrdrv (GPUDirect on), present on the host, openable, and
  present inside the container (a container without /dev/infiniband is
  NVIDIA/nccl-tests#1020's "no IB device").
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from containers.fabrics import PROFILES
from launch.emulate.links import fabric_profile as profile
from launch import emulate
from launch.errors import UsageError
from launch.launchers import launcher_of

VERDICT_ORDER = ("ok", "unknown", "warn", "fail")  # worst last


@dataclass
class Check:
    check: str                 # what was checked: "libfabric", "device /dev/infiniband/uverbs0"
    verdict: str               # ok | warn | fail | unknown
    detail: str                # what was seen
    fix: str = ""              # what to do about a warn or fail
    host: str | None = None    # the host's value (version, path mode)
    image: str | None = None   # the image's value

    def line(self) -> str:
        text = f"{self.verdict:<7} {self.check}: {self.detail}"
        return text + (f" -> {self.fix}" if self.fix and self.verdict in ("warn", "fail") else "")


def worst(checks: list[Check]) -> str:
    return max((c.verdict for c in checks), key=VERDICT_ORDER.index, default="ok")


# ---------------------------------------------------------------- the basics

def horovod_built_for(framework: str) -> bool:
    """Whether this environment's Horovod has the framework's extension compiled in.

    Looks for the extension file instead of importing it: launch never imports
    torch or TensorFlow.
    """
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    folder = {"torch": "torch", "tf": "tensorflow"}[framework]
    return any((package / folder).glob("mpi_lib*.so"))


def check_image_fabric(spec, labels: dict[str, str], required: bool) -> str:
    """The image's fabric label (`labels`: the runtime's reading of them) must match the
    fabric asked for (universal serves any). `required`: an image without the label is
    refused (a .sif: ours carry it); else it passes as unknown (a directory image, say)."""
    from containers.recipe import LABEL_PREFIX

    built_for = labels.get(f"{LABEL_PREFIX}.fabric")
    wanted = profile(spec.fabric).name if spec.fabric else None  # emu-eth-1g is ethernet
    if wanted and built_for is None and required:
        raise UsageError(f"image {spec.image} has no readable {LABEL_PREFIX}.fabric label (not built by "
                         f"`fabric-bench image build`?): cannot tell whether it serves fabric {spec.fabric!r}",
                         fields=("image", "fabric"))
    if wanted and built_for is not None and built_for != wanted and not (built_for in PROFILES
                                                                        and PROFILES[built_for].control):
        raise UsageError(f"image {spec.image} was built for fabric {built_for!r}, not {spec.fabric!r}",
                         fields=("image", "fabric"))
    return f"image built for fabric {built_for or 'unknown (no fabric-bench labels)'}"


def check_image_gpu_framework(spec, labels: dict[str, str]) -> None:
    """A TensorFlow GPU run in an image whose TensorFlow cannot see a GPU is refused: it would
    train on the CPU and be reported as a GPU result (containers.stack.TF_SEES_GPU)."""
    from containers import stack
    from containers.recipe import LABEL_PREFIX

    if (spec.framework == "tf" and spec.gpus_per_node > 0 and not stack.TF_SEES_GPU
            and labels.get(f"{LABEL_PREFIX}.flavour") == "cuda"):
        raise UsageError(f"image {spec.image}: its TensorFlow is built for CUDA {stack.TF_CUDA_MAJOR} and "
                         f"finds no GPU on the image's CUDA {stack.CUDA_VERSION}; run TensorFlow on CPUs "
                         f"(--gpus-per-node 0) or benchmark GPUs with --framework torch",
                         fields=("framework", "image"))


def preflight(spec, prepared, force: bool = False, echo: bool = True) -> list[str]:
    """Checks before a real run; raises on the first failure of the basics, or on a
    failed fabric check unless `force`. Returns what it checked (one line each);
    the fabric checks are left in `prepared.fabric_checks` for the result."""
    checked = []
    tool = prepared.command.argv[0]
    if shutil.which(tool) is None:
        raise UsageError(f"{tool} not found: cannot start the ranks")
    checked.append(f"{tool} present")
    runtime = prepared.plan.runtime
    if runtime.containerised:
        if not runtime.available():
            raise UsageError(f"runtime {runtime.name}: {runtime.binary} not found on PATH", fields=("runtime",))
        if runtime.image_is_file and not Path(spec.image).is_file():
            raise UsageError(f"image {spec.image} not found", fields=("image",))
        checked.append(f"image {spec.image} present")
        prepared.image_labels = runtime.labels(spec.image)  # read once: the result's image record reuses them
        checked.append(check_image_fabric(spec, prepared.image_labels, required=runtime.image_is_file))
        check_image_gpu_framework(spec, prepared.image_labels)
    elif spec.engine == "horovod" and not horovod_built_for(spec.framework):
        raise UsageError(f"Horovod with {spec.framework} support is not installed here; run `make setup`")
    if prepared.preset.missing:
        raise UsageError(f"fabric {spec.fabric} needs {prepared.preset.missing[0]} (missing on this host)",
                         fields=("fabric",))
    if spec.fabric:
        checked.append(f"host paths of fabric {spec.fabric} present")
    if prepared.plan.emulated_cluster is not None:
        checked += emulate.preflight(prepared.plan.emulated_cluster)
    checks = fabric_checks(spec, prepared)
    prepared.fabric_checks = {"verdict": worst(checks), "forced": False,
                              "checks": [asdict(c) for c in checks]}
    if echo:
        for c in checks:
            print(f"preflight: {c.line()}", flush=True)
    failed = [c for c in checks if c.verdict == "fail"]
    if failed and not force:
        raise UsageError(f"preflight failed ({len(failed)} of {len(checks)} checks; --force runs anyway): "
                         + "; ".join(c.line() for c in failed))
    prepared.fabric_checks["forced"] = bool(failed)
    return checked + [c.line() for c in checks]


def preflight_skipped(spec, prepared) -> list[str]:
    """What a dry run did not check (it needs nothing present on this host)."""
    skipped = [f"{prepared.command.argv[0]} present"]
    if spec.containerised:
        skipped += [f"{spec.runtime} present", f"image {spec.image} present and built for fabric {spec.fabric}",
                    "host <-> image libraries (libfabric, UCX, Open MPI, NCCL, providers)"]
    elif spec.engine == "horovod":
        skipped.append(f"Horovod built with {spec.framework}")
    if spec.fabric:
        skipped.append(f"host devices and libraries of fabric {spec.fabric}")
    return skipped


# ---------------------------------------------------------------- facts

# The image's side, printed by one shell inside the container. Sections start
# with "== name"; device lines are "dev PATH STATE MODE" (STATE ok|missing|denied).
IMAGE_SCRIPT = r"""
echo "== fi_info"; fi_info --version 2>/dev/null
echo "== ucx_info"; ucx_info -v 2>/dev/null
echo "== ompi_info"; ompi_info --version 2>/dev/null
echo "== pmix"; python3 -c 'import ctypes; f = ctypes.CDLL("libpmix.so.2").PMIx_Get_version; f.restype = ctypes.c_char_p; print(f().decode())' 2>/dev/null
echo "== libs"
for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib \
         /usr/local/*/lib /usr/local/*/lib64 /opt/*/lib /opt/*/lib64 /opt/host/*; do
  [ -d "$d" ] || continue
  for f in "$d"/libfabric.so.1 "$d"/libnccl.so.2 "$d"/libnccl-net*.so "$d"/libpsm2.so.2 \
           "$d"/libucp.so.0 "$d"/openmpi/lib/openmpi3/mca_mtl_ofi.so "$d"/openmpi/mca_mtl_ofi.so; do
    [ -e "$f" ] && echo "lib $f $(readlink -f "$f")"
  done
  for f in "$d"/libibverbs/lib*-rdmav*.so; do [ -e "$f" ] && echo "provider $f"; done
done
for f in /opt/*/venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
         /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2; do  # torch's pip NCCL
  [ -e "$f" ] && echo "lib $f $f"
done
echo "== verbs"  # the image's libibverbs and providers meeting the host's kernel drivers
t=$(command -v ibv_devinfo || ls /usr/local/rdma-core/bin/ibv_devinfo 2>/dev/null)
if [ -n "$t" ]; then "$t" -l 2>&1; else echo "fabric-bench: ibv_devinfo absent"; fi
echo "== ld_library_path $LD_LIBRARY_PATH"
echo "== devices"
for p in "$@"; do
  for f in $p; do
    if [ ! -e "$f" ]; then echo "dev $f missing -"
    elif [ -r "$f" ] && [ -w "$f" ]; then echo "dev $f ok $(stat -c %A "$f" 2>/dev/null)"
    else echo "dev $f denied $(stat -c %A "$f" 2>/dev/null)"; fi
  done
done
"""


@dataclass
class SideFacts:
    """What one side (host or image) has: versions, libraries, providers, device nodes."""
    reachable: bool = True
    why_not: str = ""
    libfabric: str | None = None
    ucx: str | None = None
    openmpi: str | None = None
    pmix: str | None = None           # the PMIx library's version (PMIx_Get_version)
    libs: dict | None = None          # basename -> resolved path
    providers: list | None = None     # provider file basenames: libmlx5-rdmav34.so
    devices: dict | None = None       # path -> (state, mode)
    verbs: list | None = None         # `ibv_devinfo -l` lines (stdout and stderr); None: not run
    ld_library_path: str = ""


def parse_side(text: str) -> SideFacts:
    """IMAGE_SCRIPT's output -> facts."""
    libs: dict = {}
    providers: list = []
    devices: dict = {}
    facts = SideFacts(libs=libs, providers=providers, devices=devices)
    section = None
    for line in text.splitlines():
        if line.startswith("== "):
            section, _, rest = line[3:].partition(" ")
            if section == "ld_library_path":
                facts.ld_library_path = rest.strip()
            continue
        if section == "fi_info" and (m := re.match(r"libfabric:\s*(\S+)", line)):
            facts.libfabric = m.group(1)
        elif section == "ucx_info" and (m := re.match(r"#\s*Version\s+(\S+)", line)):
            facts.ucx = m.group(1)
        elif section == "ompi_info" and (m := re.search(r"Open MPI v?(\d\S*)", line)):
            facts.openmpi = m.group(1)
        elif section == "pmix" and (m := re.search(r"PMIx v?(\d+\.\d+\.\d+)", line)):
            facts.pmix = m.group(1)
        elif section == "libs":
            kind, _, rest = line.partition(" ")
            if kind == "lib":
                path, _, resolved = rest.partition(" ")
                libs.setdefault(Path(path).name, resolved or path)
            elif kind == "provider":
                name = Path(rest.strip()).name
                if name not in providers:
                    providers.append(name)
        elif section == "verbs" and line.strip() and "ibv_devinfo absent" not in line:
            facts.verbs = [*(facts.verbs or []), line.strip()]
        elif section == "devices" and line.startswith("dev "):
            parts = line.split()
            if len(parts) >= 3:
                devices[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "-")
    return facts


Runner = Callable[[list[str]], tuple[int, str]]


def run_command(argv: list[str], timeout_s: float = 60.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout + ("\n" + proc.stderr if proc.returncode else "")


def device_patterns(spec, fabric: str | None, site_device: str | None = None) -> list[tuple[str, str, str]]:
    """(glob, why, severity when absent on the host) of the device nodes this run needs."""
    needed = [(node.glob, node.why, str(node.severity))
              for node in (profile(fabric).needed_device_nodes(spec.uses_nccl) if fabric else [])]
    if spec.gpus_per_node > 0:
        needed += [("/dev/nvidiactl", "NVIDIA driver control node", "fail"),
                   ("/dev/nvidia-uvm", "CUDA unified memory", "fail"),
                   ("/dev/nvidia[0-9]*", "GPU device nodes", "fail")]
        if spec.gpudirect == "on":
            needed.append(("/dev/gdrdrv", "gdrcopy (UCX gdr_copy, NCCL GDRCOPY, FI_HMEM_CUDA_USE_GDRCOPY)",
                           "warn"))
    return needed


def host_device_state(path: str, opener: Callable[[str], int] | None = None) -> tuple[str, str]:
    """(ok | denied: <errno text> | missing, mode) of a device node on this host: opened for real."""
    try:
        mode = stat.filemode(os.stat(path).st_mode)
    except OSError:
        return "missing", "-"
    opener = opener or (lambda p: os.open(p, os.O_RDWR | os.O_NONBLOCK))
    try:
        os.close(opener(path))
    except PermissionError as exc:
        return f"denied: {exc.strerror}", mode
    except OSError as exc:  # ENXIO / ENODEV: a node without its device behind it
        return f"denied: {exc.strerror}", mode
    return "ok", mode


def host_side(run: Runner = run_command) -> SideFacts:
    """This host's libfabric, UCX and Open MPI versions (tools absent: None)."""
    facts = SideFacts(libs={}, providers=[], devices={})
    text = []
    for title, argv in (("fi_info", ["fi_info", "--version"]), ("ucx_info", ["ucx_info", "-v"]),
                        ("ompi_info", ["ompi_info", "--version"])):
        text.append(f"== {title}")
        if shutil.which(argv[0]):
            text.append(run(argv)[1])
    parsed = parse_side("\n".join(text))
    facts.libfabric, facts.ucx, facts.openmpi = parsed.libfabric, parsed.ucx, parsed.openmpi
    return facts


def _existing(binds) -> list:
    """The run's binds whose source exists now (the run directory is made after preflight)."""
    return [b for b in binds if os.path.exists(b.source)]


def image_side(spec, prepared, patterns: list[str], run: Runner = run_command) -> SideFacts:
    """The image's facts, from one shell inside the container with the run's binds and env."""
    runtime = prepared.plan.runtime
    if not runtime.containerised:
        argv = ["sh", "-c", IMAGE_SCRIPT, "preflight", *patterns]
    else:
        argv = runtime.wrap(spec.image, _existing(prepared.plan.binds), dict(prepared.plan.fabric_env),
                            spec.gpus_per_node > 0, ["sh", "-c", IMAGE_SCRIPT, "preflight", *patterns])
    code, out = run(argv)
    if code != 0 and "== devices" not in out:
        last = (out.strip().splitlines() or ["no output"])[-1]
        return SideFacts(reachable=False, why_not=f"exit {code}: {last[:200]}")
    return parse_side(out)


def host_rdma_drivers(root: Path = Path("/")) -> dict[str, str]:
    """RDMA device -> its kernel driver (mlx5_0 -> mlx5_core), from /sys/class/infiniband."""
    drivers = {}
    for dev in sorted((root / "sys/class/infiniband").glob("*")):
        link = dev / "device" / "driver"
        try:
            drivers[dev.name] = Path(os.readlink(link)).name
        except OSError:
            drivers[dev.name] = "?"
    return drivers


# kernel driver -> the rdma-core provider library that serves it
PROVIDER_OF_DRIVER = {"mlx5_core": "libmlx5", "mlx4_core": "libmlx4", "hfi1": "libhfi1verbs", "efa": "libefa",
                      "irdma": "libirdma", "bnxt_en": "libbnxt_re", "qedr": "libqedr", "rdma_rxe": "librxe",
                      "siw": "libsiw", "ib_qib": "libipathverbs", "mana": "libmana", "erdma": "liberdma",
                      "hns3": "libhns", "cxgb4": "libcxgb4", "vmw_pvrdma": "libvmw_pvrdma"}


def _major_minor(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    numbers = re.findall(r"\d+", version)
    return tuple(int(n) for n in numbers[:2]) if numbers else None


# ---------------------------------------------------------------- the checks

def version_checks(spec, host: SideFacts, image: SideFacts) -> list[Check]:
    checks = []
    containerised = spec.containerised
    for name, attr in (("libfabric", "libfabric"), ("UCX", "ucx")):
        h, i = getattr(host, attr), getattr(image, attr)
        if not containerised:
            checks.append(Check(name, "ok" if h else "unknown", f"host {h or 'not installed'} (no container)", host=h))
        elif i is None:
            checks.append(Check(name, "unknown", f"image has no {name} tool; host {h or 'none'}", host=h))
        else:
            same = "same version" if h == i else "versions differ; the image's own is loaded (the host's is not bound in)"
            checks.append(Check(name, "ok", f"host {h or 'none'}, image {i}: {same}", host=h, image=i))
    if launcher_of(spec).host_mpirun and containerised:
        h, i = host.openmpi, image.openmpi
        if h is None or i is None:
            checks.append(Check("Open MPI (host mpirun -> image)", "unknown" if i else "fail",
                                f"host {h or 'none'}, image {i or 'none'}",
                                fix="" if i else "build the image with Open MPI (the hybrid model runs the image's MPI)",
                                host=h, image=i))
        elif (host_mm := _major_minor(h)) is None or (image_mm := _major_minor(i)) is None:
            checks.append(Check("Open MPI (host mpirun -> image)", "unknown", f"host {h}, image {i}: unreadable "
                                "version", host=h, image=i))
        elif host_mm == image_mm:
            checks.append(Check("Open MPI (host mpirun -> image)", "ok", f"host {h}, image {i}", host=h, image=i))
        elif host_mm[:1] == image_mm[:1]:
            checks.append(Check("Open MPI (host mpirun -> image)", "warn",
                                f"host {h}, image {i}: same major, different minor",
                                fix="use the same Open MPI series on the host as in the image", host=h, image=i))
        else:
            checks.append(Check("Open MPI (host mpirun -> image)", "fail",
                                f"host {h}, image {i}: different major versions do not interoperate",
                                fix="load the host Open MPI that matches the image's (module load openmpi/...)",
                                host=h, image=i))
    return checks


def abi_checks(spec, prepared, image: SideFacts, read_image_file: Callable[[str], bytes | None],
               host_libfabric_dir: str | None) -> list[Check]:
    """The host's libfabric bound into the image (the Slingshot route): soname and symbol versions."""
    from launch import elf_versions

    if not host_libfabric_dir:
        return []
    host_lib = Path(host_libfabric_dir) / "libfabric.so.1"
    try:
        provider = host_lib.read_bytes()
    except OSError as exc:
        return [Check("host libfabric (bound in)", "fail", f"{host_lib}: {exc.strerror}",
                      fix="set host_libfabric in the site file to the directory holding the cxi libfabric.so.1")]
    try:
        name = elf_versions.soname(provider)
        have = elf_versions.defined(provider)
    except (elf_versions.NotElf, ValueError, IndexError, Exception) as exc:  # a truncated or foreign file
        return [Check("host libfabric (bound in)", "fail", f"{host_lib}: unreadable ELF ({exc})")]
    checks = []
    if name != "libfabric.so.1":
        checks.append(Check("host libfabric soname", "fail", f"{host_lib} has soname {name!r}, the image loads libfabric.so.1",
                            fix="bind a libfabric 1.x (soname libfabric.so.1)"))
    newest = max(have, key=elf_versions.version_key, default="none")
    consumers = {k: v for k, v in (image.libs or {}).items() if k.startswith("libnccl-net") or k == "mca_mtl_ofi.so"}
    if not consumers:
        checks.append(Check("libfabric ABI (host lib, image consumers)", "unknown",
                            f"host defines up to {newest}; no libfabric consumer found in the image"))
    for base, path in sorted(consumers.items()):
        data = read_image_file(path)
        if data is None:
            checks.append(Check(f"libfabric ABI ({base})", "unknown", f"could not read {path} from the image"))
            continue
        want = elf_versions.needed(data).get("libfabric.so.1", set())
        lacking = sorted(want - have, key=elf_versions.version_key)
        if lacking:
            checks.append(Check(f"libfabric ABI ({base})", "fail",
                                f"{path} needs {', '.join(lacking)}; host {host_lib} defines up to {newest}",
                                fix="bind a newer host libfabric, or rebuild the image against the host's version",
                                host=newest, image=max(want, key=elf_versions.version_key)))
        else:
            checks.append(Check(f"libfabric ABI ({base})", "ok",
                                f"needs {', '.join(sorted(want, key=elf_versions.version_key)) or 'nothing'}; "
                                f"host defines up to {newest}", host=newest))
    return checks


# fabrics whose traffic goes through rdma-core's verbs providers on the host's RDMA devices
def provider_checks(spec, image: SideFacts, drivers: dict[str, str]) -> list[Check]:
    """The host's RDMA kernel drivers meet the image's rdma-core providers."""
    fabric = profile(spec.fabric) if spec.fabric else None
    if fabric is None or not fabric.verbs:
        return []
    if not drivers:
        return [Check("rdma-core provider", "unknown" if fabric.control else "fail",
                      "no RDMA device in /sys/class/infiniband on this host",
                      fix="" if fabric.control else "load the NIC's driver (or run on a node that has one)")]
    if image.providers is None or not image.reachable:
        return [Check("rdma-core provider", "unknown", "the image's providers could not be listed")]
    checks = []
    for driver in sorted(set(drivers.values())):
        wanted = PROVIDER_OF_DRIVER.get(driver)
        devices = ", ".join(d for d, v in drivers.items() if v == driver)
        if wanted is None:
            checks.append(Check(f"rdma-core provider for {driver}", "unknown", f"{devices}: no known provider"))
            continue
        found = [p for p in image.providers if p.startswith(wanted + "-rdmav")]
        if found:
            checks.append(Check(f"rdma-core provider for {driver}", "ok", f"{devices}: image has {found[0]}",
                                image=found[0]))
        else:
            checks.append(Check(f"rdma-core provider for {driver}", "fail",
                                f"{devices}: the image has no {wanted} provider "
                                f"({', '.join(image.providers) or 'no providers'}); verbs will see no device",
                                fix=f"install {wanted} (rdma-core / ibverbs-providers) in the image"))
    if "hfi1" in drivers.values() and fabric.psm2:
        ok = "libpsm2.so.2" in (image.libs or {})
        checks.append(Check("libpsm2 for hfi1", "ok" if ok else "fail",
                            "image has libpsm2.so.2" if ok else "the image has no libpsm2.so.2",
                            fix="" if ok else "build the image with libpsm2"))
    return checks


# libibverbs' own words when a provider cannot drive a device (rdma-core's verbs/init.c)
_KERNEL_ABI = re.compile(r"Driver (\S+) does not support the kernel ABI of (\d+) \(supports (\d+) to (\d+)\) "
                         r"for device (\S+)")
_NO_PROVIDER = re.compile(r"no userspace device-specific driver found for (\S+)")
_HCAS = re.compile(r"^(\d+) HCAs? found")


def verbs_checks(spec, image: SideFacts, drivers: dict[str, str]) -> list[Check]:
    """The image's libibverbs opening the host's devices (`ibv_devinfo -l` inside the
    container): a provider built for another kernel ABI than the host driver speaks, or no
    provider for a device, leaves verbs with no device (k8snetworkplumbingwg/sriov-cni#348,
    ofiwg/libfabric#975); the provider files being present does not show it."""
    if not (spec.fabric and profile(spec.fabric).verbs) or not drivers or not image.reachable:
        return []
    if image.verbs is None:
        return [Check("verbs in the image", "unknown",
                      "ibv_devinfo is not in the image: its libibverbs was not tried on the host's devices")]
    lines = image.verbs
    mismatched: dict[str, set] = {}
    for m in filter(None, map(_KERNEL_ABI.search, lines)):
        mismatched.setdefault(f"{m.group(1)} provider supports kernel ABI {m.group(3)} to {m.group(4)}, "
                              f"the host's driver speaks {m.group(2)}", set()).add(Path(m.group(5)).name)
    checks = [Check("verbs kernel ABI", "fail", f"the image's {what} ({', '.join(sorted(devices))})",
                    fix="run an image whose rdma-core matches the host's kernel driver (rebuild it with the "
                        "host's rdma-core version), or update the host's driver")
              for what, devices in sorted(mismatched.items())]
    orphans = sorted({Path(m.group(1)).name for m in filter(None, map(_NO_PROVIDER.search, lines))})
    if orphans:
        checks.append(Check("verbs provider", "fail", f"the image's libibverbs has no provider for "
                            f"{', '.join(orphans)}", fix="install the NIC's rdma-core provider in the image"))
    header = next((i for i, line in enumerate(lines) if _HCAS.match(line)), None)
    count = _HCAS.match(lines[header]) if header is not None else None
    found = int(count.group(1)) if count else 0
    if header is not None and found and not checks:
        names = lines[header + 1:header + 1 + found]  # ibv_devinfo -l: one name per line after the count
        checks.append(Check("verbs in the image", "ok", f"the image's libibverbs opened {found} device"
                            f"{'s' if found != 1 else ''}: {', '.join(names)}"))
    elif not found:
        checks.append(Check("verbs in the image", "fail", "the image's libibverbs sees no device "
                            f"({'; '.join(lines[-1:])})", fix="bind /dev/infiniband and /sys/class/infiniband "
                            "into the container, and check the messages above"))
    return checks


def nccl_checks(spec, image: SideFacts, env: dict[str, str]) -> list[Check]:
    if not spec.uses_nccl or not spec.containerised:
        return []
    libs = image.libs or {}
    found = "libnccl.so.2" in libs
    checks = [Check("NCCL", "ok" if found else "fail",
                    f"libnccl.so.2 at {libs['libnccl.so.2']}" if found else "no libnccl.so.2 in the image",
                    fix="" if found else "a cuda-flavour image (or torch's nvidia-nccl wheel)")]
    plugin = [k for k in libs if k.startswith("libnccl-net")]
    if env.get("NCCL_NET") == "OFI":
        checks.append(Check("NCCL net plugin", "ok" if plugin else "fail",
                            f"{', '.join(plugin)} present" if plugin else "NCCL_NET=OFI but no libnccl-net*.so in the image",
                            fix="" if plugin else "build aws-ofi-nccl into the image (cuda flavour)"))
        fabric = profile(spec.fabric)
        floor = fabric.nccl_plugin_min_libfabric
        if floor and plugin:
            version, wanted = image.libfabric, ".".join(map(str, floor))
            found_mm = _major_minor(version)
            old = found_mm is not None and found_mm < floor
            checks.append(Check(f"libfabric for aws-ofi-nccl on {fabric.name.upper()}",
                                "fail" if old else ("ok" if version else "unknown"),
                                f"image libfabric {version or 'unknown'} (aws-ofi-nccl needs >= {wanted} on "
                                f"{fabric.name.upper()})",
                                fix=f"rebuild the image with libfabric >= {wanted}" if old else ""))
    elif plugin and env.get("NCCL_NET") in ("IB", "Socket"):
        checks.append(Check("NCCL net plugin", "ok", f"{', '.join(plugin)} present but NCCL_NET={env['NCCL_NET']} "
                                                     "keeps NCCL on its own transport"))
    return checks


def device_checks(spec, patterns, image: SideFacts, opener=None) -> list[Check]:
    checks = []
    containerised = spec.containerised
    for pattern, why, severity in patterns:
        found = sorted(glob.glob(pattern))
        if not found:
            fix = ("modprobe gdrdrv (gdrcopy's module) or turn GPUDirect off" if "gdrdrv" in pattern
                   else "run on a node with the device and its driver loaded")
            checks.append(Check(f"device {pattern}", severity, f"absent on this host ({why})", fix=fix))
            continue
        for path in found:
            state, mode = host_device_state(path, opener)
            if state != "ok":
                checks.append(Check(f"device {path}", "fail", f"host: {mode}, cannot open: {state.split(': ', 1)[-1]}",
                                    fix=f"ask the admins for access to {path} (group / udev rule), mode is {mode}",
                                    host=mode))
                continue
            if not containerised:
                checks.append(Check(f"device {path}", "ok", f"host: {mode}, opens", host=mode))
                continue
            inside = (image.devices or {}).get(path)
            if not image.reachable or inside is None:
                checks.append(Check(f"device {path}", "unknown", f"host: {mode}, opens; container not checked",
                                    host=mode))
            elif inside[0] == "ok":
                checks.append(Check(f"device {path}", "ok", f"host: {mode}, opens; bound into the container",
                                    host=mode, image=inside[1]))
            elif inside[0] == "missing":
                checks.append(Check(f"device {path}", "fail", f"host: {mode}, opens; NOT in the container",
                                    fix=f"bind {path} (the runtime's minimal /dev drops it)", host=mode))
            else:
                checks.append(Check(f"device {path}", "fail", f"in the container: {inside[1]}, not readable+writable",
                                    fix=f"bind {path} read-write; check the container's uid mapping", host=mode,
                                    image=inside[1]))
    return checks


# PMIx clients and servers of different releases interoperate from these releases on
# (Open MPI's PMIx cross-version matrix: first cross-version compatible 1.2.5, 2.0.3,
# 2.1.1, 3.0.0); before them, client and server must be the same series.
PMIX_CROSS_VERSION_FROM = (2, 1, 1)


def slurm_pmix_majors(srun_mpi_list: str) -> list[int]:
    """`srun --mpi=list` -> the major versions of Slurm's pmix plugins ("pmix_v4" -> 4)."""
    return sorted({int(m) for m in re.findall(r"\bpmix_v(\d+)\b", srun_mpi_list)})


def pmix_checks(spec, image: SideFacts, srun_mpi_list: tuple[int, str] | None) -> list[Check]:
    """srun --mpi=pmix: Slurm's PMIx server (on the host) meets the image's PMIx client.
    `srun_mpi_list`: exit code and output of `srun --mpi=list` (None: no srun here)."""
    name = "PMIx (Slurm srun --mpi=pmix -> image)"
    if srun_mpi_list is None:
        return [Check(name, "unknown", "srun not found here: Slurm's PMIx plugins unknown")]
    code, listing = srun_mpi_list
    if code != 0:
        last = (listing.strip().splitlines() or ["no output"])[-1][:200]
        return [Check(name, "unknown", f"`srun --mpi=list` failed (exit {code}): {last}")]
    plugins = re.findall(r"^\s+(\S+)\s*$", listing, re.M)
    majors = slurm_pmix_majors(listing)
    host = ",".join(f"pmix_v{m}" for m in majors) or None
    if "pmix" not in plugins:
        return [Check(name, "fail", f"Slurm here has no pmix plugin (has {', '.join(plugins) or 'none'})",
                      fix="use --mpi-plugin pmi2 with an image built with Slurm's PMI-2, or ask for Slurm's pmix plugin")]
    if image.pmix is None:
        return [Check(name, "unknown", f"host {host or 'pmix'}; the image's libpmix.so.2 was not found or not readable",
                      host=host)]
    client = tuple(int(n) for n in image.pmix.split("."))
    if not majors:
        return [Check(name, "unknown", f"Slurm's pmix plugin does not name its version; image PMIx {image.pmix}",
                      image=image.pmix)]
    if client[0] in majors:
        return [Check(name, "ok", f"host {host}, image PMIx {image.pmix}: same series", host=host, image=image.pmix)]
    if client >= PMIX_CROSS_VERSION_FROM and min(majors) >= 3:
        return [Check(name, "ok", f"host {host}, image PMIx {image.pmix}: different series, cross-version "
                                  f"compatible (both >= 2.1.1)", host=host, image=image.pmix)]
    return [Check(name, "fail", f"host {host}, image PMIx {image.pmix}: these releases do not interoperate",
                  fix="build the image with a PMIx >= 2.1.1 (cross-version compatible) or the host's series",
                  host=host, image=image.pmix)]


def fabric_checks(spec, prepared, run: Runner = run_command, opener=None, root: Path = Path("/")) -> list[Check]:
    """Host <-> image checks for the run's fabric (see the module docstring)."""
    if prepared.plan.emulated_cluster is not None and not spec.containerised:
        return [Check("fabric", "ok", "emulated links on this host: no devices or host libraries involved")]
    if not spec.containerised and not spec.fabric and spec.gpus_per_node == 0:
        return [Check("fabric", "ok", "no fabric preset, no container, no GPU: nothing to check")]
    patterns = device_patterns(spec, spec.fabric)
    image = image_side(spec, prepared, [p for p, _, _ in patterns], run)
    host = host_side(run) if spec.containerised else SideFacts()
    checks: list[Check] = []
    if spec.containerised and not image.reachable:
        checks.append(Check("image", "fail", f"the preflight shell did not run inside the image: {image.why_not}",
                            fix=f"check `{spec.runtime}` can run {spec.image} here"))
    if spec.containerised and not image.reachable:
        return checks + device_checks(spec, patterns, image, opener)
    if spec.containerised:
        checks += version_checks(spec, host, image)
    if spec.containerised and launcher_of(spec).slurm and spec.mpi_plugin == "pmix":
        checks += pmix_checks(spec, image, run(["srun", "--mpi=list"]) if shutil.which("srun") else None)
    drivers = host_rdma_drivers(root)
    checks += provider_checks(spec, image, drivers)
    checks += verbs_checks(spec, image, drivers)
    env = dict(prepared.command.env)
    checks += nccl_checks(spec, image, {**prepared.plan.fabric_env, **env})
    host_libfabric = None
    if spec.fabric and profile(spec.fabric).library_path:
        host_libfabric = next((b.source for b in prepared.plan.binds if b.target == "/opt/host/libfabric"), None)

    def read_image_file(path: str) -> bytes | None:
        if not spec.containerised:
            try:
                return Path(path).read_bytes()
            except OSError:
                return None
        argv = prepared.plan.runtime.wrap(spec.image, _existing(prepared.plan.binds), {}, False, ["cat", path])
        try:
            return subprocess.run(argv, capture_output=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    checks += abi_checks(spec, prepared, image, read_image_file, host_libfabric)
    checks += device_checks(spec, patterns, image, opener)
    if spec.gpus_per_node > 0:
        code, out = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) \
            if shutil.which("nvidia-smi") else (127, "")
        driver = out.strip().splitlines()[0] if code == 0 and out.strip() else None
        checks.append(Check("NVIDIA driver", "ok" if driver else "unknown",
                            f"driver {driver}" if driver else "nvidia-smi not available on this host", host=driver))
    if not checks:
        checks.append(Check("fabric", "ok", "nothing to check for this run"))
    return checks
