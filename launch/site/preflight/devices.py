"""Device nodes: which a run needs (its fabric profile's, the GPUs'), present and openable on
the host and present inside the container."""

from __future__ import annotations

import glob
from typing import Sequence

from containers.fabrics import DeviceNode
from launch.site.preflight.checks import Check
from launch.site.preflight.facts import SideFacts, host_device_state


def device_patterns(spec, fabric_nodes: Sequence[DeviceNode]) -> list[tuple[str, str, str]]:
    """(glob, why, severity when absent on the host) of the device nodes this run needs: its
    fabric's (the preset's, launch.site.fabric_preset) and its GPUs'."""
    needed = [(node.glob, node.why, str(node.severity)) for node in fabric_nodes]
    if spec.gpus_per_node > 0:
        needed += [
            ("/dev/nvidiactl", "NVIDIA driver control node", "fail"),
            ("/dev/nvidia-uvm", "CUDA unified memory", "fail"),
            ("/dev/nvidia[0-9]*", "GPU device nodes", "fail"),
        ]
        if spec.gpudirect == "on":
            needed.append(("/dev/gdrdrv", "gdrcopy (UCX gdr_copy, NCCL GDRCOPY, FI_HMEM_CUDA_USE_GDRCOPY)", "warn"))
    return needed


def device_checks(spec, patterns, image: SideFacts, opener=None) -> list[Check]:
    checks = []
    containerised = spec.containerised
    for pattern, why, severity in patterns:
        found = sorted(glob.glob(pattern))
        if not found:
            fix = (
                "modprobe gdrdrv (gdrcopy's module) or turn GPUDirect off"
                if "gdrdrv" in pattern
                else "run on a node with the device and its driver loaded"
            )
            checks.append(Check(f"device {pattern}", severity, f"absent on this host ({why})", fix=fix))
            continue
        for path in found:
            state, mode = host_device_state(path, opener)
            if state != "ok":
                checks.append(
                    Check(
                        f"device {path}",
                        "fail",
                        f"host: {mode}, cannot open: {state.split(': ', 1)[-1]}",
                        fix=f"ask the admins for access to {path} (group / udev rule), mode is {mode}",
                        host=mode,
                    )
                )
                continue
            if not containerised:
                checks.append(Check(f"device {path}", "ok", f"host: {mode}, opens", host=mode))
                continue
            inside = (image.devices or {}).get(path)
            if not image.reachable or inside is None:
                checks.append(
                    Check(f"device {path}", "unknown", f"host: {mode}, opens; container not checked", host=mode)
                )
            elif inside[0] == "ok":
                checks.append(
                    Check(
                        f"device {path}",
                        "ok",
                        f"host: {mode}, opens; bound into the container",
                        host=mode,
                        image=inside[1],
                    )
                )
            elif inside[0] == "missing":
                checks.append(
                    Check(
                        f"device {path}",
                        "fail",
                        f"host: {mode}, opens; NOT in the container",
                        fix=f"bind {path} (the runtime's minimal /dev drops it)",
                        host=mode,
                    )
                )
            else:
                checks.append(
                    Check(
                        f"device {path}",
                        "fail",
                        f"in the container: {inside[1]}, not readable+writable",
                        fix=f"bind {path} read-write; check the container's uid mapping",
                        host=mode,
                        image=inside[1],
                    )
                )
    return checks
