"""Each fabric's NCCL plugin against the hosts it meets (issue 49, item 4): the libfabric floor
aws-ofi-nccl has on EFA and on Slingshot, judged by preflight over plain facts, and the
fork-safety variables set only where the kernel needs them, decided and recorded by the preset."""

from __future__ import annotations

import pytest

from containers.fabrics import EFA, PROFILES, SLINGSHOT
from containers.fabrics.profile import FORK_SAFE_KERNEL
from launch.ranks.runspec import RunSpec
from launch.site import fabric_preset
from launch.site.config import FabricSite, Site
from launch.site.preflight import SideFacts, worst
from launch.site.preflight.nccl import nccl_checks

SITE_VALUES = {
    "nic": "hsn0",
    "hca": "cxi0",
    "host_libfabric": "/opt/cray/libfabric/1.20.1/lib64",
    "host_libcxi": "/usr/lib64/libcxi.so.1",
}
PLUGIN = "/usr/local/aws-ofi-nccl/lib/libnccl-net-ofi.so"


def nccl_run(fabric: str, **changes) -> RunSpec:
    return RunSpec(
        **{
            **dict(
                engine="horovod",
                ranks=2,
                launcher="mpirun",
                runtime="apptainer",
                image="/img/fb.sif",
                fabric=fabric,
                gpus_per_node=1,
                allreduce="nccl",
            ),
            **changes,
        }
    )


def floor_check(fabric: str, libfabric: str | None):
    """The plugin's libfabric check of a containerised NCCL run, the image side as given."""
    prof = PROFILES[fabric]
    image = SideFacts(libfabric=libfabric, libs={"libnccl.so.2": "/usr/lib/libnccl.so.2", "libnccl-net-ofi.so": PLUGIN})
    checks = nccl_checks(nccl_run(fabric), prof, image, prof.environment(SITE_VALUES, nccl=True))
    found = [c for c in checks if c.check.startswith("libfabric for aws-ofi-nccl")]
    assert len(found) == 1, checks
    return found[0], worst(checks)


def test_the_floors_are_what_each_fabrics_plugin_build_needs():
    # aws-ofi-nccl configured --enable-platform-aws stops below libfabric 1.22 (and its efa path
    # refuses an older library at run time); Slingshot's plugin is built against 1.20 headers
    assert "--enable-platform-aws" in EFA.configure_flags["aws-ofi-nccl"]
    assert EFA.nccl_plugin_min_libfabric == (1, 22)
    assert SLINGSHOT.nccl_plugin_min_libfabric == (1, 20)


def test_efa_with_libfabric_1_21_is_refused_in_one_line_naming_found_and_needed():
    check, verdict = floor_check("efa", "1.21.0")
    assert verdict == "fail"
    assert check.line() == (
        "fail    libfabric for aws-ofi-nccl on EFA: image libfabric 1.21.0 (aws-ofi-nccl needs >= 1.22 on EFA)"
        " -> rebuild the image with libfabric >= 1.22"
    )


@pytest.mark.parametrize("version", ["1.22.0", "1.22.0amzn4.0", "2.1.0"])
def test_efa_from_libfabric_1_22_on_passes(version):
    check, _ = floor_check("efa", version)
    assert check.verdict == "ok" and check.fix == ""


def test_slingshot_below_1_20_names_the_bound_host_library_and_the_site_key():
    check, verdict = floor_check("slingshot", "1.19.0")
    assert verdict == "fail"
    assert check.line() == (
        "fail    libfabric for aws-ofi-nccl on SLINGSHOT: host libfabric (bound in) 1.19.0 "
        "(aws-ofi-nccl needs >= 1.20 on SLINGSHOT) -> bind a host libfabric >= 1.20 "
        "(host_libfabric under [fabrics.slingshot] in the site file)"
    )


@pytest.mark.parametrize("version, verdict", [("1.20.1", "ok"), ("1.22.0", "ok"), (None, "unknown")])
def test_slingshot_from_1_20_on_passes_and_an_unread_version_is_unknown(version, verdict):
    check, _ = floor_check("slingshot", version)
    assert check.verdict == verdict


# --------------------------------------------------------------------- fork safety


@pytest.mark.parametrize(
    "release, version",
    [
        ("5.10.0-28-amd64", (5, 10)),
        ("4.18.0-553.el8_10.x86_64", (4, 18)),
        ("5.13.0-52-generic", (5, 13)),
        ("6.18.44-fc-v1252", (6, 18)),
        ("5.4.0-1103-aws", (5, 4)),
        ("3.10.0-1160.el7.x86_64", (3, 10)),
        ("6.8", (6, 8)),
        ("", None),
        ("unknown", None),
        ("6-rc1", None),
    ],
)
def test_the_kernel_release_is_read_as_major_minor(release, version):
    assert fabric_preset.kernel_version(release) == version


def test_only_efa_carries_fork_safety_variables_and_none_in_its_every_run_environment():
    # grep FORK over the profiles: EFA's libfabric and rdma-core switches; InfiniBand, RoCE and
    # Omni-Path (UCX, PSM2) set none, so they have nothing to move
    carrying = {name for name, p in PROFILES.items() if p.fork_safe_env}
    assert carrying == {"efa"}
    for prof in PROFILES.values():
        every_run = {*prof.env, *prof.nccl_env, *(v for e in prof.gpudirect_env.values() for v in e)}
        assert not any("FORK" in name for name in every_run), prof.name
    assert dict(EFA.fork_safe_env) == {"FI_EFA_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1"}


EFA_SITE = Site(fabrics={"efa": FabricSite(interface="ens5", device="rdmap16s27")})


@pytest.mark.parametrize(
    "kernel, wanted",
    [
        ("5.10.0-28-amd64", True),  # Debian 11, Amazon Linux 2's 5.10
        ("4.14.355-275.582.amzn2.x86_64", True),
        ("5.12.19", True),
        ("5.13.0-52-generic", False),
        ("6.1.0-18-cloud-amd64", False),
        ("not-a-release", True),  # unread: set, as setting them is harmless where unneeded
    ],
)
def test_the_efa_preset_sets_fork_safety_only_below_5_13_and_records_why(kernel, wanted):
    preset = fabric_preset.resolve(nccl_run("efa"), EFA_SITE, kernel=kernel)
    assert ("FI_EFA_FORK_SAFE" in preset.env) is wanted and ("RDMAV_FORK_SAFE" in preset.env) is wanted
    record = preset.decisions["fork_safety"]
    assert record["kernel"] == kernel and record["set"] is wanted and record["read_on"] is None  # given
    assert record["variables"] == ["FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE"]
    floor = ".".join(map(str, FORK_SAFE_KERNEL))
    assert (f"< {floor}" in record["why"] or "not read" in record["why"]) is wanted
    assert (f">= {floor}" in record["why"]) is not wanted


def test_the_preset_reads_this_hosts_kernel_without_a_parameter(monkeypatch):
    monkeypatch.setattr(fabric_preset, "kernel_release", lambda: "5.4.0-1103-aws")
    monkeypatch.setattr(fabric_preset, "kernel_host", lambda: "login1")
    preset = fabric_preset.resolve(nccl_run("efa"), EFA_SITE)
    record = preset.decisions["fork_safety"]
    assert preset.env["RDMAV_FORK_SAFE"] == "1" and (record["kernel"], record["read_on"]) == (
        "5.4.0-1103-aws",
        "login1",
    )


def test_the_sites_own_env_still_wins_over_the_decision():
    site = Site(fabrics=EFA_SITE.fabrics, env={"RDMAV_FORK_SAFE": "0"})
    preset = fabric_preset.resolve(nccl_run("efa"), site, kernel="5.10.0")
    assert preset.env["RDMAV_FORK_SAFE"] == "0" and preset.env["FI_EFA_FORK_SAFE"] == "1"


def test_a_fabric_without_fork_safety_variables_records_no_decision():
    site = Site(fabrics={"infiniband": FabricSite(interface="ib0", device="mlx5_0")})
    preset = fabric_preset.resolve(nccl_run("infiniband"), site, kernel="4.18.0-553.el8_10.x86_64")
    assert preset.decisions == {} and not any("FORK" in name for name in preset.env)
