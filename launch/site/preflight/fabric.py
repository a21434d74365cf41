"""Fabric truth: every check family for the run's fabric, host against image (see the
package's docstring)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from launch.ranks.launchers import launcher_of
from launch.site.preflight.checks import Check
from launch.site.preflight.devices import device_checks, device_patterns
from launch.site.preflight.driver import driver_check, driver_version
from launch.site.preflight.facts import (
    Runner,
    SideFacts,
    existing_binds,
    host_rdma_drivers,
    host_side,
    image_side,
    run_command,
)
from launch.site.preflight.nccl import nccl_checks
from launch.site.preflight.ports import port_checks
from launch.site.preflight.rdma import provider_checks, verbs_checks
from launch.site.preflight.versions import abi_checks, pmix_checks, version_checks


def fabric_checks(spec, prepared, run: Runner = run_command, opener=None, root: Path = Path("/")) -> list[Check]:
    """Host <-> image checks for the run's fabric (see the module docstring)."""
    if prepared.plan.emulated_cluster is not None and not spec.containerised:
        return [Check("fabric", "ok", "emulated links on this host: no devices or host libraries involved")]
    if not spec.containerised and not spec.fabric and spec.gpus_per_node == 0:
        return [Check("fabric", "ok", "no fabric preset, no container, no GPU: nothing to check")]
    fabric = prepared.preset.profile  # resolved once for the run (launch.site.fabric_preset)
    patterns = device_patterns(spec, prepared.preset.device_nodes)
    image = image_side(spec, prepared, [p for p, _, _ in patterns], run)
    host = host_side(run) if spec.containerised else SideFacts()
    checks: list[Check] = []
    if spec.containerised and not image.reachable:
        checks.append(
            Check(
                "image",
                "fail",
                f"the preflight shell did not run inside the image: {image.why_not}",
                fix=f"check `{spec.runtime}` can run {spec.image} here",
            )
        )
    if spec.containerised and not image.reachable:
        return checks + device_checks(spec, patterns, image, opener)
    if spec.containerised:
        checks += version_checks(spec, host, image)
    if spec.containerised and launcher_of(spec).slurm and spec.mpi_plugin == "pmix":
        checks += pmix_checks(spec, image, run(["srun", "--mpi=list"]) if shutil.which("srun") else None)
    drivers = host_rdma_drivers(root)
    checks += provider_checks(fabric, image, drivers)
    checks += verbs_checks(fabric, image, drivers)
    env = dict(prepared.command.env)
    checks += nccl_checks(spec, fabric, image, {**prepared.plan.fabric_env, **env})
    checks += port_checks(fabric, {**prepared.plan.fabric_env, **env}, root)
    host_libfabric = None
    if fabric and fabric.library_path:
        host_libfabric = next((b.source for b in prepared.plan.binds if b.target == "/opt/host/libfabric"), None)

    def read_image_file(path: str) -> bytes | None:
        if not spec.containerised:
            try:
                return Path(path).read_bytes()
            except OSError:
                return None
        argv = prepared.plan.runtime.wrap(
            prepared.plan.image, existing_binds(prepared.plan.binds), {}, False, ["cat", path]
        )
        try:
            return subprocess.run(argv, capture_output=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    checks += abi_checks(spec, prepared, image, read_image_file, host_libfabric)
    checks += device_checks(spec, patterns, image, opener)
    if spec.gpus_per_node > 0:
        code, out = (
            run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
            if shutil.which("nvidia-smi")
            else (127, "")
        )
        from containers.recipe import LABEL_PREFIX

        cuda = (getattr(prepared, "image_labels", None) or {}).get(f"{LABEL_PREFIX}.version.cuda")
        checks.append(driver_check(driver_version(out) if code == 0 else None, cuda))
    if not checks:
        checks.append(Check("fabric", "ok", "nothing to check for this run"))
    return checks
