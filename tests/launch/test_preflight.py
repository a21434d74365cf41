"""Host <-> image preflight: real checks on this host (the cpu/ethernet image under
Apptainer), a real ELF ABI mismatch built here, and recorded captures of other hosts."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from containers import stack
from containers.fabrics import profile
from launch.errors import UsageError
from launch.site import elf_versions, preflight
from launch.site.preflight import Check, SideFacts, device_checks, parse_side, worst
from launch.ranks.runspec import RunSpec
from tests.conftest import IMAGE_FLAVOUR, fabric_bench, need

DATA = Path(__file__).parents[1] / "data" / "preflight"
HOST_LIBFABRIC = Path("/usr/lib/x86_64-linux-gnu/libfabric.so.1")
HOST_MTL_OFI = Path("/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_mtl_ofi.so")


def spec(**kw):
    base = dict(
        benchmark="allreduce",
        backend="mpi",
        ranks=2,
        launcher="mpirun",
        runtime="apptainer",
        image="/img.sif",
        fabric="ethernet",
    )
    return RunSpec(**{**base, **kw})


def test_worst_orders_fail_over_warn_over_unknown():
    assert worst([Check("a", "ok", ""), Check("b", "unknown", "")]) == "unknown"
    assert worst([Check("a", "warn", ""), Check("b", "fail", ""), Check("c", "ok", "")]) == "fail"
    assert worst([]) == "ok"


def test_parse_side_reads_the_image_script_output():
    text = (
        "== fi_info\nfi_info: 1.17.0\nlibfabric: 1.17.0\nlibfabric api: 1.17\n== ucx_info\n# Version 1.13.1\n"
        "== ompi_info\nOpen MPI v4.1.4\n== libs\nlib /usr/lib/x86_64-linux-gnu/libfabric.so.1 "
        "/usr/lib/x86_64-linux-gnu/libfabric.so.1.18.2\nprovider /usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so\n"
        "== ld_library_path /opt/host/libfabric:/usr/lib\n== devices\ndev /dev/infiniband/uverbs0 ok crw-rw-rw-\n"
        "dev /dev/infiniband/uverbs1 missing -\n"
    )
    side = parse_side(text)
    assert (side.libfabric, side.ucx, side.openmpi) == ("1.17.0", "1.13.1", "4.1.4")
    assert side.libs["libfabric.so.1"].endswith("1.18.2") and side.providers == ["libmlx5-rdmav34.so"]
    assert side.devices["/dev/infiniband/uverbs1"] == ("missing", "-")
    assert side.ld_library_path.startswith("/opt/host/libfabric")


def test_open_mpi_major_mismatch_fails_minor_warns():
    host, image = SideFacts(openmpi="4.1.4"), SideFacts(openmpi="5.0.3")
    [*_, mpi] = preflight.version_checks(spec(), host, image)
    assert mpi.verdict == "fail" and "module load" in mpi.fix
    [*_, mpi] = preflight.version_checks(spec(), SideFacts(openmpi="4.1.4"), SideFacts(openmpi="4.0.7"))
    assert mpi.verdict == "warn"


def test_tools_missing_in_the_image_are_unknown_never_ok():
    checks = preflight.version_checks(spec(launcher="local"), SideFacts(libfabric="1.17.0"), SideFacts())
    assert {c.verdict for c in checks} == {"unknown"}


# ------------------------------------------------------------ ELF symbol versions (real files)


def test_elf_versions_of_this_hosts_libfabric_and_open_mpi():
    need(HOST_LIBFABRIC.is_file() and HOST_MTL_OFI.is_file(), "Debian libfabric1 + openmpi")
    provider, consumer = HOST_LIBFABRIC.read_bytes(), HOST_MTL_OFI.read_bytes()
    assert elf_versions.soname(provider) == "libfabric.so.1"
    assert "FABRIC_1.6" in elf_versions.defined(provider)  # libfabric 1.17: up to FABRIC_1.6
    assert "FABRIC_1.7" not in elf_versions.defined(provider)
    assert elf_versions.needed(consumer)["libfabric.so.1"] == {"FABRIC_1.0", "FABRIC_1.1", "FABRIC_1.3"}
    assert elf_versions.missing_versions(provider, consumer, "libfabric.so.1")[0] == set()


@pytest.fixture
def plugin_needing_fabric_1_7(tmp_path):
    """A real plugin .so linked against a libfabric stub that defines FABRIC_1.7, as
    aws-ofi-nccl built against libfabric >= 1.18 is (aws/aws-ofi-nccl#241)."""
    need(shutil.which("gcc") is not None, "gcc")
    (tmp_path / "fabric.map").write_text(
        "FABRIC_1.0 { global: fi_getinfo; local: *; };\nFABRIC_1.7 { global: fi_new_in_1_18; } FABRIC_1.0;\n"
    )
    (tmp_path / "stub.c").write_text("int fi_getinfo(void){return 0;}\nint fi_new_in_1_18(void){return 1;}\n")
    (tmp_path / "plugin.c").write_text("int fi_new_in_1_18(void);\nint plugin_init(void){return fi_new_in_1_18();}\n")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            tmp_path / "libfabric.so.1",
            "-Wl,-soname,libfabric.so.1",
            f"-Wl,--version-script={tmp_path / 'fabric.map'}",
            tmp_path / "stub.c",
        ],
        check=True,
    )
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            tmp_path / "libnccl-net.so",
            tmp_path / "plugin.c",
            f"-L{tmp_path}",
            "-l:libfabric.so.1",
        ],
        check=True,
    )
    return tmp_path / "libnccl-net.so"


def test_abi_check_fails_a_plugin_needing_a_newer_host_libfabric(plugin_needing_fabric_1_7):
    need(HOST_LIBFABRIC.is_file(), "Debian libfabric1")
    image = SideFacts(libs={"libnccl-net.so": "/usr/local/aws-ofi-nccl/lib/libnccl-net.so"})
    checks = preflight.abi_checks(
        spec(fabric="slingshot"),
        None,
        image,
        lambda path: plugin_needing_fabric_1_7.read_bytes(),
        str(HOST_LIBFABRIC.parent),
    )
    [abi] = checks
    assert abi.verdict == "fail"
    assert "needs FABRIC_1.7" in abi.detail and "defines up to FABRIC_1.6" in abi.detail
    # the failure it predicts is the one recorded in awslabs/awsome-distributed-ai#292
    assert "version `FABRIC_1.7' not found" in (DATA / "awsome-292-dlerror" / "nccl_info.log").read_text()


def test_abi_check_passes_open_mpi_against_this_hosts_libfabric():
    need(HOST_LIBFABRIC.is_file() and HOST_MTL_OFI.is_file(), "Debian libfabric1 + openmpi")
    image = SideFacts(libs={"mca_mtl_ofi.so": str(HOST_MTL_OFI)})
    [abi] = preflight.abi_checks(
        spec(fabric="slingshot"), None, image, lambda p: Path(p).read_bytes(), str(HOST_LIBFABRIC.parent)
    )
    assert abi.verdict == "ok" and "FABRIC_1.3" in abi.detail


def test_abi_check_of_a_missing_host_libfabric_fails_with_the_path(tmp_path):
    [check] = preflight.abi_checks(spec(fabric="slingshot"), None, SideFacts(libs={}), lambda p: None, str(tmp_path))
    assert check.verdict == "fail" and str(tmp_path) in check.detail


# ------------------------------------------------------------ providers vs drivers


def test_provider_check_on_a_connectx_host_with_and_without_libmlx5():
    drivers = {"mlx5_0": "mlx5_core"}  # a ConnectX HCA (tests/data/probe/connectx-infiniband)
    good = SideFacts(providers=["libefa-rdmav34.so", "libmlx5-rdmav34.so"], libs={})
    [check] = preflight.provider_checks(profile("infiniband"), good, drivers)
    assert check.verdict == "ok"
    [check] = preflight.provider_checks(
        profile("infiniband"), SideFacts(providers=["libefa-rdmav34.so"], libs={}), drivers
    )
    assert check.verdict == "fail" and "libmlx5" in check.fix


def test_provider_check_without_rdma_devices_fails_an_rdma_fabric():
    [check] = preflight.provider_checks(profile("efa"), SideFacts(providers=[], libs={}), {})
    assert check.verdict == "fail"


def test_omnipath_needs_libpsm2_in_the_image():
    checks = preflight.provider_checks(
        profile("omnipath"), SideFacts(providers=["libhfi1verbs-rdmav34.so"], libs={}), {"hfi1_0": "hfi1"}
    )
    assert [c.verdict for c in checks] == ["ok", "fail"]


def image_verbs(text: str) -> SideFacts:
    """The image side as parse_side reads the preflight shell's `== verbs` section."""
    return parse_side("== verbs\n" + text)


def test_verbs_check_names_a_provider_that_does_not_speak_the_host_drivers_kernel_abi():
    """Recorded in a pod (sriov-cni#348): provider files present, device dropped."""
    image = image_verbs((DATA / "sriov-cni-348-kernel-abi" / "ibv_devinfo.txt").read_text())
    checks = preflight.verbs_checks(profile("infiniband"), image, {"bnxt_re2": "bnxt_en"})
    assert [c.verdict for c in checks] == ["fail", "fail"]
    assert (
        checks[0].detail
        == ("the image's bnxt_re provider supports kernel ABI 1 to 1, the host's driver speaks 6 (bnxt_re2)")
        and "rdma-core" in checks[0].fix
    )
    assert "sees no device (No IB devices found)" in checks[1].detail


def test_verbs_check_names_devices_without_a_provider():
    """Recorded (libfabric#975): three uverbs devices, no provider library for them."""
    image = image_verbs((DATA / "libfabric-975-no-provider" / "fi_info.txt").read_text())
    checks = preflight.verbs_checks(profile("infiniband"), image, {"usnic_0": "usnic_verbs"})
    assert checks[0].verdict == "fail" and checks[0].detail.endswith("no provider for uverbs0, uverbs1, uverbs2")


def test_verbs_check_passes_opened_devices_and_is_unknown_without_the_tool():
    # ibv_devinfo -l's format (rdma-core's devinfo.c): "%d HCA%s found:", then one name per line
    opened = image_verbs("2 HCAs found:\n\tmlx5_0\n\tmlx5_1\n\n")
    [check] = preflight.verbs_checks(profile("infiniband"), opened, {"mlx5_0": "mlx5_core"})
    assert (check.verdict, check.detail) == ("ok", "the image's libibverbs opened 2 devices: mlx5_0, mlx5_1")
    absent = image_verbs("fabric-bench: ibv_devinfo absent\n")
    assert absent.verbs is None
    [check] = preflight.verbs_checks(profile("efa"), absent, {"rdmap0s6": "efa"})
    assert check.verdict == "unknown"
    assert preflight.verbs_checks(profile("ethernet"), opened, {"mlx5_0": "mlx5_core"}) == []
    assert preflight.verbs_checks(profile("infiniband"), opened, {}) == []  # provider_checks fails that


# ------------------------------------------------------------ device nodes


def test_device_that_exists_but_cannot_be_opened_fails_with_path_and_permission(tmp_path):
    node = tmp_path / "uverbs0"
    node.write_text("")
    node.chmod(0o600)

    def refuse(path):
        raise PermissionError(13, "Permission denied")

    [check] = device_checks(
        spec(runtime="host"), [(str(tmp_path / "uverbs*"), "verbs", "fail")], SideFacts(), opener=refuse
    )
    assert check.verdict == "fail"
    assert str(node) in check.check and "-rw-------" in check.detail and "Permission denied" in check.detail


def test_gdrdrv_absent_is_a_warning_with_the_fix(tmp_path):
    [check] = device_checks(spec(runtime="host"), [(str(tmp_path / "gdrdrv"), "gdrcopy", "warn")], SideFacts())
    assert check.verdict == "warn" and "modprobe gdrdrv" in check.fix


def test_uverbs_nodes_not_bound_into_the_container_fail(tmp_path):
    """rdma-core PR #1060: four HCAs in sysfs, only uverbs0 and uverbs2 in the container's /dev."""
    capture = DATA / "rdma-core-pr1060"
    hcas = (capture / "ls_sys_class_infiniband.txt").read_text().split()
    inside = set((capture / "ls_dev_infiniband.txt").read_text().split())
    for i, _ in enumerate(hcas):  # the host: one uverbs node per HCA
        (tmp_path / f"uverbs{i}").write_text("")
    image = SideFacts(
        devices={
            str(tmp_path / f"uverbs{i}"): ("ok" if f"uverbs{i}" in inside else "missing", "-") for i in range(len(hcas))
        }
    )
    checks = device_checks(
        spec(fabric="infiniband"),
        [(str(tmp_path / "uverbs*"), "verbs", "fail")],
        image,
        opener=lambda p: __import__("os").open(p, 0),
    )
    verdicts = {Path(c.check.split()[-1]).name: c.verdict for c in checks}
    assert verdicts == {"uverbs0": "ok", "uverbs1": "fail", "uverbs2": "ok", "uverbs3": "fail"}
    assert "NOT in the container" in next(c for c in checks if c.verdict == "fail").detail


def test_device_patterns_follow_the_fabric_gpus_and_gpudirect():
    gpu = spec(fabric="infiniband", gpus_per_node=4, allreduce="nccl", gpudirect="on")
    paths = [p for p, _, _ in preflight.device_patterns(gpu, profile("infiniband").needed_device_nodes(True))]
    assert "/dev/infiniband/uverbs*" in paths and "/dev/gdrdrv" in paths and "/dev/nvidiactl" in paths
    assert preflight.device_patterns(spec(), profile("ethernet").needed_device_nodes(False)) == []
    nodes = profile("slingshot").needed_device_nodes(False)
    assert [p for p, _, _ in preflight.device_patterns(spec(fabric="slingshot"), nodes)] == ["/dev/cxi*"]


def test_nvidia_driver_without_nvidia_smi_is_unknown(monkeypatch):
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None if name == "nvidia-smi" else "/usr/bin/" + name)
    from launch.runs.run import prepare

    s = spec(
        runtime="host",
        launcher="local",
        fabric="ethernet",
        benchmark="allreduce",
        backend="torch",
        gpus_per_node=1,
        allreduce=None,
        image=None,
    )
    prepared = prepare(s, Path("/tmp/never-made"))
    checks = preflight.fabric_checks(s, prepared, run=lambda argv: (0, ""))
    driver = next(c for c in checks if c.check == "NVIDIA driver")
    assert driver.verdict == "unknown"


# ------------------------------------------------------------ real runs here


@pytest.mark.slow
def test_real_apptainer_run_records_host_image_checks(cpu_ethernet_image, tmp_path):
    out = fabric_bench(
        "run",
        "--runtime",
        "apptainer",
        "--image",
        str(cpu_ethernet_image.image),
        "--launcher",
        "mpirun",
        "--fabric",
        "ethernet",
        "--benchmark",
        "allreduce",
        "--backend",
        "mpi",
        "--max-bytes",
        "65536",
        "--results",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # the host's libfabric is Debian's, the image's its flavour's
    assert (
        f"preflight: ok      libfabric: host 1.17.0, image {stack.versions(IMAGE_FLAVOUR)['libfabric']}" in out.stdout
    )
    [result] = [json.loads(p.read_text()) for p in tmp_path.glob("*/result.json")]
    checks = {c["check"]: c for c in result["preflight"]["checks"]}
    assert checks["Open MPI (host mpirun -> image)"]["verdict"] == "ok"
    assert checks["UCX"]["image"] == checks["UCX"]["host"]
    assert result["preflight"]["verdict"] == "ok" and result["preflight"]["forced"] is False
    # the image's labels, and the digest of the stack image it was built FROM
    assert result["image"]["stack_digest"] == cpu_ethernet_image.stack_digest != ""
    assert result["image"]["labels"]["org.fabric-bench.fabric"] == "ethernet"


@pytest.mark.slow
def test_a_failed_check_stops_the_run_and_force_runs_it(cpu_ethernet_image, tmp_path):
    """A real fail here: a GPU run asks for /dev/nvidia*, which this host lacks."""
    args = [
        "run",
        "--runtime",
        "apptainer",
        "--image",
        str(cpu_ethernet_image.image),
        "--launcher",
        "mpirun",
        "--fabric",
        "ethernet",
        "--benchmark",
        "allreduce",
        "--backend",
        "torch",
        "--max-bytes",
        "4096",
        "--gpus-per-node",
        "1",
        "--results",
        str(tmp_path),
    ]
    need(not Path("/dev/nvidiactl").exists(), "this host has a GPU")
    stopped = fabric_bench(*args)
    assert stopped.returncode == 2 and "preflight failed" in stopped.stderr and "/dev/nvidiactl" in stopped.stderr
    assert not list(tmp_path.glob("*/result.json"))


# ------------------------------------------------------------ PMIx: Slurm's server, the image's client

SRUN_MPI_LIST = (Path(__file__).parents[1] / "data" / "probe" / "this-host" / "srun_mpi_list.txt").read_text()


@pytest.mark.parametrize(
    "image_pmix, verdict", [("4.2.2", "ok"), ("3.2.3", "ok"), ("5.0.1", "ok"), ("2.0.1", "fail"), (None, "unknown")]
)
def test_pmix_server_and_client_versions_on_a_recorded_slurm(image_pmix, verdict):
    [check] = preflight.pmix_checks(spec(launcher="srun"), SideFacts(pmix=image_pmix), (0, SRUN_MPI_LIST))
    assert check.verdict == verdict and (check.host is None or check.host == "pmix_v4"), check


def test_pmix_without_the_plugin_or_without_srun():
    no_pmix = "MPI plugin types are...\n\tnone\n\tpmi2\n"
    [check] = preflight.pmix_checks(spec(launcher="srun"), SideFacts(pmix="4.2.2"), (0, no_pmix))
    assert check.verdict == "fail" and "no pmix plugin (has none, pmi2)" in check.detail
    [check] = preflight.pmix_checks(spec(launcher="srun"), SideFacts(pmix="4.2.2"), None)
    assert check.verdict == "unknown"
    failed = (1, "srun: fatal: Could not establish a configuration source\n")
    [check] = preflight.pmix_checks(spec(launcher="srun"), SideFacts(pmix="4.2.2"), failed)
    assert check.verdict == "unknown" and "Could not establish" in check.detail


def test_the_image_script_reads_the_pmix_library_version():
    facts = parse_side("== pmix\nOpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, Stable ABI: 0.0, Provisional ABI: 0.0)\n")
    assert facts.pmix == "4.2.2"


@pytest.mark.parametrize(
    "fabric, labels, required, outcome",
    [
        ("ethernet", {"org.fabric-bench.fabric": "ethernet"}, True, "image built for fabric ethernet"),
        ("emu-eth-1g", {"org.fabric-bench.fabric": "ethernet"}, True, "image built for fabric ethernet"),
        ("infiniband", {"org.fabric-bench.fabric": "universal"}, True, "image built for fabric universal"),
        (None, {}, True, "image built for fabric unknown (no fabric-bench labels)"),
        ("efa", {}, False, "image built for fabric unknown (no fabric-bench labels)"),
        ("infiniband", {"org.fabric-bench.fabric": "ethernet"}, True, "built for fabric 'ethernet', not 'infiniband'"),
        ("efa", {}, True, "has no readable org.fabric-bench.fabric label"),
    ],
)
def test_image_fabric_check_reads_the_labels_it_is_given(fabric, labels, required, outcome):
    """One reading of the labels serves the check and the result's image record; a .sif
    (required) without them is refused, a directory image passes as unknown."""
    from launch.errors import UsageError

    spec = RunSpec(fabric=fabric, image="img.sif")
    if outcome.startswith("image built"):
        assert preflight.check_image_fabric(spec, fabric and profile(fabric), labels, required) == outcome
    else:
        with pytest.raises(UsageError, match=outcome):
            preflight.check_image_fabric(spec, fabric and profile(fabric), labels, required)


def test_tensorflow_on_gpus_in_the_cuda_image_is_refused_only_where_it_cannot_work():
    """Issue 38: the cuda image carries TensorFlow's CUDA 12 libraries (label tensorflow-cuda);
    a TF GPU run is refused only in an older image without them, or with Horovod (two CUDA
    runtimes in one process)."""
    from containers import stack
    from containers.recipe import LABEL_PREFIX, labels

    built = labels("ethernet", "cuda", "x")  # what a cuda image built now carries
    assert built[f"{LABEL_PREFIX}.version.tensorflow-cuda"] == stack.tf_cuda_version() == "12.9"
    tf_native = RunSpec(
        framework="tf", engine="native", model="ResNet50", gpus_per_node=1, image="c.sif", runtime="apptainer"
    )
    preflight.check_image_gpu_framework(tf_native, built)  # runs: TensorFlow's own CUDA and NCCL
    tf_horovod = RunSpec(
        framework="tf", engine="horovod", model="ResNet50", gpus_per_node=1, image="c.sif", runtime="apptainer"
    )
    with pytest.raises(
        UsageError,
        match=r"TensorFlow \+ Horovod on GPUs is not supported: .* CUDA 13, "
        r"TensorFlow runs CUDA 12\.9",
    ) as err:
        preflight.check_image_gpu_framework(tf_horovod, built)
    assert "\n" not in str(err.value)
    older = {f"{LABEL_PREFIX}.flavour": "cuda"}  # a cuda image from before the libraries
    with pytest.raises(UsageError, match=r"built for CUDA 12 and the image carries no CUDA 12 libraries"):
        preflight.check_image_gpu_framework(tf_native, older)
    # what runs anywhere: TF on CPUs, torch on the GPU, TF in a CPU image
    cpu_tf = RunSpec(framework="tf", engine="horovod", model="ResNet50", image="c.sif", runtime="apptainer")
    preflight.check_image_gpu_framework(cpu_tf, older)
    preflight.check_image_gpu_framework(RunSpec(gpus_per_node=1, image="c.sif", runtime="apptainer"), older)
    preflight.check_image_gpu_framework(tf_horovod, {f"{LABEL_PREFIX}.flavour": "cpu"})


PROBES = Path(__file__).parents[1] / "data" / "probe"
DRIVERS = Path(__file__).parents[1] / "data" / "nvidia_smi"


@pytest.mark.parametrize(
    "capture, version",
    [
        ("driver-550-rtx4070/nvidia_smi_banner.txt", "550.40.07"),  # "Driver Version:" banner
        ("driver-610-b200-kmd/nvidia_smi_banner.txt", "610.43.02"),  # R610's "KMD Version:" banner
        ("driver-396-gtx1080-q/nvidia_smi_q.txt", "396.54"),  # nvidia-smi -q
        ("driver-535-rtx4090-q-process/nvidia_smi_q.txt", "535.154.05"),  # R535's -q
    ],
)
def test_the_driver_version_is_read_from_recorded_nvidia_smi_outputs(capture, version):
    from launch.site.preflight.driver import driver_version

    assert driver_version((DRIVERS / capture).read_text()) == version


def test_a_driver_below_the_cuda_13_floor_fails_naming_found_and_needed():
    """Issue 42, item 5: the cuda images carry CUDA 13, which needs R580."""
    from launch.site import probe
    from launch.site.preflight.driver import driver_check, driver_version

    cuda = stack.CUDA_VERSION
    assert cuda.startswith("13.")
    low = driver_check(driver_version((DRIVERS / "driver-550-rtx4070" / "nvidia_smi_banner.txt").read_text()), cuda)
    assert low.verdict == "fail" and low.line().startswith(
        f"fail    NVIDIA driver: driver 550.40.07 found, R580 or newer needed for the image's CUDA {cuda}"
    )
    fields = ("power.limit", "power.min_limit", "power.max_limit", "memory.total", "vbios_version", "driver_version")
    (gpu,) = probe.parse_nvidia_smi((PROBES / "nvidia-smi-rtx2080" / "nvidia_smi.txt").read_text(), fields)
    assert driver_check(gpu.driver, cuda).verdict == "fail" and "440.64" in driver_check(gpu.driver, cuda).detail
    high = driver_check(driver_version((DRIVERS / "driver-610-b200-kmd" / "nvidia_smi_banner.txt").read_text()), cuda)
    assert high.verdict == "ok" and "R580+" in high.detail
    assert driver_check("550.40.07", "12.4").verdict == "ok"  # CUDA 12 needs R525
    assert driver_check("550.40.07", None).verdict == "ok" and "no floor" in driver_check("550.40.07", None).detail


def test_preflight_refuses_a_cuda_13_image_on_an_older_driver_in_one_line(monkeypatch):
    from containers.recipe import LABEL_PREFIX
    from launch.runs.run import prepare

    banner = (DRIVERS / "driver-550-rtx4070" / "nvidia_smi_banner.txt").read_text()
    monkeypatch.setattr(preflight.shutil, "which", lambda name: "/usr/bin/" + name)
    s = spec(
        runtime="host",
        launcher="local",
        fabric="ethernet",
        benchmark="allreduce",
        backend="torch",
        gpus_per_node=1,
        allreduce=None,
        image=None,
    )
    prepared = prepare(s, Path("/tmp/never-made"))
    prepared.image_labels = {f"{LABEL_PREFIX}.version.cuda": stack.CUDA_VERSION}
    checks = preflight.fabric_checks(s, prepared, run=lambda argv: (0, banner))
    (driver,) = [c for c in checks if c.check == "NVIDIA driver"]
    assert driver.verdict == "fail" and driver.host == "550.40.07" and driver.image == stack.CUDA_VERSION
    assert "\n" not in driver.line() and "R580" in driver.fix
