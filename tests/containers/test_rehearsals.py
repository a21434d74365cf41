"""Rehearsal records (containers/rehearsals/, written by `make image-rehearsal`): every
current cuda recipe has one, and what the records say was proven holds together."""

from __future__ import annotations

import json

import pytest

from containers import recipe, rehearse, sources, stack
from containers.fabrics import profile

CURRENT = rehearse.current_hashes("cuda")


def load(image: str) -> dict:
    path = rehearse.record_path(image, "cuda", CURRENT[image])
    assert path.is_file(), (
        f"no rehearsal record for the current cuda {image} recipe "
        f"({CURRENT[image][:16]}): run `make image-rehearsal` and commit "
        f"containers/rehearsals/"
    )
    return json.loads(path.read_text())


@pytest.mark.parametrize("image", list(CURRENT))
def test_every_current_cuda_recipe_has_a_rehearsal_record(image):
    record = load(image)
    assert record["recipe_hash"] == CURRENT[image] and record["base"] == "local"
    assert record["omitted"] == list(sources.omitted())
    assert record["size_bytes"] > 0 and len(record["sif_sha256"]) == 64
    assert not [line for line in record["test_output"] if "FAIL" in line]


def test_fabric_images_of_a_flavour_share_one_stack_digest():
    """'Images differ only in fabric libraries' as an equality: every rehearsed fabric image
    was built FROM the same stack image, whose sha256 the stack's record names."""
    stack = load("stack")
    digests = {fabric: load(fabric)["stack_digest"] for fabric in rehearse.REHEARSED}
    print({fabric: digest[:16] for fabric, digest in digests.items()}, "stack", stack["sif_sha256"][:16])
    assert set(digests.values()) == {stack["sif_sha256"]}


@pytest.mark.parametrize("fabric", rehearse.REHEARSED)
def test_each_image_test_proved_its_preset_components(fabric):
    output = "\n".join(load(fabric)["test_output"])
    for check in recipe.preset_checks(profile(fabric), "cuda", sources.omitted()):
        kind, _, name = check.partition(":")
        shown = {
            "ompi": f"ompi_info: MCA {name.replace(':', ' ')}",
            "fi": f"fi_info -l: {name}",
            "ucx": f"ucx: {name}",
            "nccl-net": f"nccl-net: {name}",
        }[kind]
        assert f"ok: {shown}" in output, check
    for proof in (
        "ompi_info: CUDA support",
        "ucx: CUDA built in",
        "horovod: NCCL GPU operations built",
        "torch: cuda",
        "ldd:",
    ):
        assert proof in output, proof
    if profile(fabric).binds_host_libfabric:  # the host ABI its libfabric users were linked for
        assert f"need at most {recipe.HOST_ABI_NODE}" in output


@pytest.mark.parametrize("fabric", [f for f in rehearse.REHEARSED if "aws-ofi-nccl" in profile(f).source_builds])
def test_the_nccl_plugin_was_built_from_its_pinned_source_and_is_where_nccl_looks(fabric):
    """Issue 38: EFA and Slingshot images carry aws-ofi-nccl (built, not omitted), NCCL_NET_PLUGIN's
    library on the path, its shared libraries resolving."""
    record = load(fabric)
    plugin = sources.source("aws-ofi-nccl")
    assert "aws-ofi-nccl" not in record["omitted"] and record["component_seconds"]["aws-ofi-nccl"] > 0
    assert any(line.startswith(plugin.site_url + "\t") for line in record["sources"])
    output = "\n".join(record["test_output"])
    assert "ok: nccl-net: OFI (NCCL opens /usr/local/aws-ofi-nccl/lib/libnccl-net-ofi.so)" in output
    assert "ok: ldd: 1 shared libraries under /usr/local/aws-ofi-nccl/lib/libnccl-net-ofi.so resolve" in output


def test_the_stack_carries_gdrcopy_and_tensorflows_cuda_libraries():
    """Issue 38: gdrcopy built from its pinned source; TensorFlow a CUDA 12 build whose libraries
    load from their own folder (bench.tf_cuda --check in the image's %test, on a CPU)."""
    record = load("stack")
    assert "gdrcopy" not in record["omitted"] and record["component_seconds"]["gdrcopy"] > 0
    assert any(line.startswith(sources.source("gdrcopy").site_url + "\t") for line in record["sources"])
    output = "\n".join(record["test_output"])
    assert "ok: ldd: 1 shared libraries under /usr/local/gdrcopy/lib resolve" in output
    assert f"shared libraries under {stack.TF_CUDA_DIR} resolve" in output
    assert (
        f"ok: tf-cuda: TensorFlow {stack.python_versions()['tensorflow']} built for CUDA 12." in output
        and f"9 libraries load from {stack.TF_CUDA_DIR}" in output
    )


# issue 49: the records say which base each image was built on, and carry the self-test's report
@pytest.mark.parametrize("image", list(CURRENT))
def test_every_cuda_record_names_its_base_and_carries_the_parsed_self_test(image):
    record = load(image)
    assert record["base_image"] == stack.versions("cuda", "local")["base"]
    assert record["base_python"] == stack.versions("cuda", "local")["python"]
    assert record["self_test"] == rehearse.self_test_report(record["test_output"])
    assert record["self_test"]["fail"] == [] and record["self_test"]["ok"]


@pytest.mark.parametrize("image", list(CURRENT))
def test_the_cuda_aware_mpi_both_horovods_and_nccl_tests_were_proven(image):
    """Issue 49 on a CPU: ompi_info says CUDA support with pml ucx (UCX 1.22.0, CUDA and gdrcopy
    built in), both Horovod builds import and report their operations, nccl-tests' binaries
    resolve."""
    report = load(image)["self_test"]
    sections = report["sections"]
    assert any(line.endswith("mpi_built_with_cuda_support:value:true") for line in sections["ompi_info"])
    assert any(line.startswith("MCA pml: ucx") for line in sections["ompi_info"])
    ucx_v = "\n".join(sections["ucx_info -v"])
    assert f"# Library version: {stack.UCX.version}" in ucx_v  # 1.22's form (1.13: "# Version")
    assert "--with-cuda=/usr/local/cuda" in ucx_v and "--with-gdrcopy=/usr/local/gdrcopy" in ucx_v
    assert any(m.startswith("libuct_cuda.so") for m in sections["ucx modules"])
    assert any(m.startswith("libuct_cuda_gdrcopy.so") for m in sections["ucx modules"])
    assert sections["ucx_info -d"]  # what has a device here (tcp, shared memory); CUDA needs a GPU
    nccl, mpi = report["horovod"]["nccl"], report["horovod"]["mpi"]
    assert nccl["nccl_built"] == "True" and nccl["cuda_built"] == "True"
    assert mpi["nccl_built"] == "False" and mpi["cuda_built"] == "True" and mpi["mpi_built"] == "True"
    assert mpi["file"].startswith(stack.HOROVOD_MPI_GPU_DIR + "/horovod/")
    assert "all_reduce_perf" in sections["nccl-tests"]
    assert any("libnccl.so.2" in line for line in sections["nccl-tests"])


@pytest.mark.parametrize("fabric", [f for f in rehearse.REHEARSED if "aws-ofi-nccl" in profile(f).source_builds])
def test_the_nccl_plugin_record_says_which_libfabric_it_was_built_against(fabric):
    lines = load(fabric)["self_test"]["sections"]["aws-ofi-nccl"]
    assert lines[0].startswith("libfabric ") and any("needs FABRIC_" in line for line in lines)
    declared = any("HAVE_DECL_FI_OPT_CUDA_API_PERMITTED 1" in line for line in lines)
    # EFA: the stack's libfabric 2.1; Slingshot: libfabric 1.20 at sites, the distribution's 1.17
    # in a rehearsal that cannot fetch it (sources.omitted())
    if profile(fabric).binds_host_libfabric and "libfabric-shs" in sources.omitted():
        assert not declared and lines[0].startswith("libfabric 1.17")
    else:
        assert declared


# podman (cpu): CI builds the cpu stack with Apptainer only; `make podman-rehearsal` builds
# the stack and the ethernet image from their Dockerfiles and runs them
PODMAN = rehearse.podman_hashes()


def load_podman(image: str) -> dict:
    path = rehearse.record_path(image, "cpu", PODMAN[image], "podman")
    assert path.is_file(), (
        f"no podman record for the current cpu {image} Dockerfile "
        f"({PODMAN[image][:16]}): run `make podman-rehearsal` and commit "
        f"containers/rehearsals/"
    )
    return json.loads(path.read_text())


@pytest.mark.parametrize("image", rehearse.PODMAN_REHEARSED)
def test_every_current_cpu_dockerfile_was_built_with_podman(image):
    record = load_podman(image)
    assert record["runtime"] == "podman" and record["dockerfile_hash"] == PODMAN[image]
    assert record["size_bytes"] > 0 and record["sif_sha256"]
    # the cpu stack built its communication stack from the verified sources (gdrcopy and
    # aws-ofi-nccl are the cuda flavour's)
    # (by the build's own URL: the cpu flavour's UCX is bookworm's 1.13.1, source "ucx-cpu")
    assert {line.split("\t")[0] for line in record["sources"]} >= {build.url for build in stack.CPU_SOURCE_BUILDS}


def test_the_podman_image_passed_its_self_test_and_two_ranks_left_nothing_running():
    stack, ethernet = load_podman("stack"), load_podman("ethernet")
    assert ethernet["stack_digest"] == stack["sif_sha256"] != ethernet["sif_sha256"]
    output = "\n".join(ethernet["test_output"])
    assert "FAIL" not in output and "python imports" in output
    for check in recipe.preset_checks(profile("ethernet"), "cpu"):
        assert check.split(":")[-1] in output, check
    run = ethernet["two_ranks"]
    assert run["status"] == "ok" and run["correct"] is True and run["world_size"] == 2
    assert run["launch_argv"][0].endswith("mpirun") and run["launch_argv"].count("podman") == 1
    assert run["image_labels"]["org.fabric-bench.fabric"] == "ethernet"
    assert run["image_stack_digest"] == stack["sif_sha256"]
    assert len(run["rank_pids"]) == 2 and run["ranks_alive_after"] == [] and run["containers_running_after"] == []
