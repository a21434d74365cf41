"""The driver floor judged on the nodes that ran the ranks (issue 49, item 5): each Slurm node's
sampler keeps its /proc/driver/nvidia/version (launch.disturbance.nodes), and the result's
preflight record gets one driver check per node in place of the launching host's "unknown".
Files: the recorded real ones in tests/data/nvidia_driver (SOURCE.md there)."""

from __future__ import annotations

from pathlib import Path

from launch.disturbance.nodes import driver_version_file
from launch.site.preflight import driver

RECORDED = Path(__file__).resolve().parents[1] / "data" / "nvidia_driver"
LOGIN_NODE = {
    "verdict": "unknown",
    "forced": False,
    "checks": [
        {
            "check": "NVIDIA driver",
            "verdict": "unknown",
            "detail": "nvidia-smi not available on this host",
            "fix": "",
            "host": None,
            "image": None,
        },
        {"check": "libfabric", "verdict": "ok", "detail": "1.22", "fix": "", "host": None, "image": None},
    ],
}


def node_file(name: str) -> dict:
    return {"snapshots": [], "driver_version_file": driver_version_file(RECORDED / name / "version")}


def test_the_kernel_module_line_names_the_driver():
    assert driver.driver_version((RECORDED / "open-565" / "version").read_text()) == "565.57.01"
    assert driver.driver_version((RECORDED / "proprietary-580" / "version").read_text()) == "580.173.02"
    assert driver_version_file(RECORDED / "nowhere") is None


def test_a_node_below_the_floor_fails_where_the_login_node_could_only_say_unknown():
    files = {"gpu01": node_file("proprietary-580"), "gpu02": node_file("open-565")}
    judged = driver.on_nodes(LOGIN_NODE, files, "13.0.2")  # CUDA 13 needs R580
    by_check = {c["check"]: c for c in judged["checks"]}
    assert by_check["NVIDIA driver on gpu01"]["verdict"] == "ok"
    assert (
        by_check["NVIDIA driver on gpu02"]["verdict"] == "fail"
        and "565.57.01" in by_check["NVIDIA driver on gpu02"]["detail"]
    )
    assert "NVIDIA driver" not in by_check and by_check["libfabric"]["verdict"] == "ok"
    assert judged["verdict"] == "fail" and judged["driver_read_on"] == ["gpu01", "gpu02"]
    # CUDA 12 (R525): both pass
    assert driver.on_nodes(LOGIN_NODE, files, "12.9.1")["verdict"] == "ok"


def test_without_node_readings_the_record_is_left_as_it_was():
    assert driver.on_nodes(LOGIN_NODE, {"gpu01": {"snapshots": []}}, "13.0") is LOGIN_NODE
    assert driver.on_nodes(None, {"gpu01": node_file("open-565")}, "13.0") is None
