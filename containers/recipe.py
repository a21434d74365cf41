"""One hpccm recipe: a stack image per flavour, and any (fabric, flavour) image FROM it.

The stack image holds the common stack (communication libraries, Python
stack, bench/): identical for every fabric, built once. A fabric image is the
stack image plus its fabric layer only, between `# >>> fabric layer` /
`# <<< fabric layer` markers (`Bootstrap: localimage` / `FROM` the stack), and
carries the stack image's digest in its labels: "images differ only in
fabric libraries" is an equality of digests.

Both flavours build the same communication stack (`common_blocks`; `cpu` with
CUDA off) in a devel stage and copy what runs into a runtime stage; for
Apptainer the stack's devel stage is its own image (stack-devel.sif), so a
fabric layer that builds something (aws-ofi-nccl) starts from it, and a change
to bench/ rebuilds only the runtime stage. `cpu-debian` is one stage with
Debian's packaged communication stack (CI's cold path). The cpu flavours'
Python stack installs from a wheelhouse bound at /wheelhouse during the build
(no wheels in the image).

Bases: `base="site"` (the default) renders the site recipe: nvidia/cuda
images for cuda. `base="local"` renders the rehearsal recipe, whose only
difference is its base lines (containers/cudabase.py; a test shows the diff).
The pieces: containers.stack_recipes (a stack image per flavour) of
containers.stack_blocks, containers.fabric_layer (a fabric image FROM its
stack), containers.self_test (each image's %test); this module renders them.
Paths that depend on where a machine keeps its images (local bases, the
stack image) are placeholders in the text the recipe hash names, filled in by
`Recipe.filled()`: the hash is the same on every machine.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import hpccm
from hpccm.primitives import baseimage, label

from containers import stack
from containers.fabric_layer import (
    FABRIC_BEGIN,
    FABRIC_END,
    HOST_ABI_NODE,
    HOST_ABI_PACKAGES,  # noqa: F401
    HOST_ABI_STAGE,
    LIBFABRIC_SHS_PREFIX,  # noqa: F401
    SOURCE_STACKS,
    fabric_stages,
    stack_tag,
)
from containers.fabrics import FabricProfile, profile
from containers.placeholders import (
    COMMIT_PLACEHOLDER,
    HASH_PLACEHOLDER,
    LOCAL_DEVEL_BASE,  # noqa: F401
    LOCAL_RUNTIME_BASE,
    STACK_DEVEL_IMAGE,
    STACK_DIGEST,
    STACK_IMAGE,
)
from containers.self_test import preset_checks, self_test_argv, test_section  # noqa: F401
from containers.stack_blocks import IMAGE_TEST, common_environment  # noqa: F401
from containers.stack_recipes import CPU_DISTRO, cpu_stack, cuda_stack, debian_stack

LABEL_PREFIX = "org.fabric-bench"
BASES = ("site", "local")
# Shared libraries the host driver brings (apptainer --nv); absent from images by design.
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")


@dataclass(frozen=True)
class Recipe:
    fabric: str  # "stack" for a stack image
    flavour: str
    template: str  # Apptainer .def with path placeholders
    dockerfile: str
    recipe_hash: str  # sha256 of the template without this hash and the commit
    devel_template: str = ""  # cuda stack, Apptainer: the devel stage as its own image
    base: str = "site"
    omitted: tuple[str, ...] = ()
    paths: Mapping[str, str] = field(default_factory=dict)

    def filled(self, **paths: str) -> "Recipe":
        """The same recipe with placeholders (LOCAL_DEVEL_BASE=..., STACK_IMAGE=...) filled."""
        return replace(self, paths={**self.paths, **{f"@{k}@": v for k, v in paths.items()}})

    def _fill(self, text: str) -> str:
        defaults = {
            STACK_IMAGE: f"fabric-bench-stack-{self.flavour}.sif",
            STACK_DEVEL_IMAGE: f"fabric-bench-stack-{self.flavour}-devel.sif",
            LOCAL_DEVEL_BASE: "cuda-devel.sif",
            LOCAL_RUNTIME_BASE: "cuda-runtime.sif",
            STACK_DIGEST: "unbuilt",
        }
        for key, value in {**defaults, **self.paths}.items():
            text = text.replace(key, value)
        return text

    @property
    def definition(self) -> str:
        return self._fill(self.template)

    @property
    def devel_definition(self) -> str:
        return self._fill(self.devel_template)


def _check(fabric: str, flavour: str, base: str) -> FabricProfile | None:
    prof = profile(fabric) if fabric != "stack" else None
    if flavour not in stack.FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; choose from {', '.join(stack.FLAVOURS)}")
    if base not in BASES:
        raise ValueError(f"unknown base {base!r}; choose from {', '.join(BASES)}")
    return prof


def render(
    fabric: str, flavour: str, *, base: str = "site", cpu_base: str = "", commit: str = "", omit: Iterable[str] = ()
) -> Recipe:
    """Render the image of (fabric, flavour) FROM its stack image, or the stack image
    itself with fabric="stack". `cpu_base`: the cpu flavour's local base .sif (default
    base.sif; the Dockerfile always names stack.BASE_IMAGE_TAG). `omit`: components a
    rehearsal cannot fetch (sources.omitted()); the site recipe omits nothing."""
    prof = _check(fabric, flavour, base)
    omit = tuple(sorted(set(omit)))
    commit = commit or bundle_commit()
    texts: dict[str, str] = {}
    devel_text = ""
    for fmt in ("singularity", "docker"):
        # hpccm renders some pieces (block.runtime()) when they are made: set the format first
        hpccm.config.set_container_format(fmt)
        hpccm.config.set_singularity_version("3.5")  # multi-stage: %files from <stage>
        try:
            if prof is None and flavour == "cuda":
                stages = cuda_stack(base, omit, fmt)
            elif prof is None and flavour == "cpu":
                stages = cpu_stack(cpu_base, fmt)
            elif prof is None:
                stages = debian_stack(cpu_base, fmt)
            else:
                stages = fabric_stages(prof, flavour, omit, fmt)
            if prof is None and fmt == "singularity" and len(stages) > 1:
                # Apptainer: the devel stage is its own image; the stack copies from it
                devel_text = _to_text([stages[0]], "stack", flavour, omit=omit, base=base)
                distro = stack.CUDA_DISTRO if flavour == "cuda" else CPU_DISTRO
                stages[0] = [
                    baseimage(
                        image=STACK_DEVEL_IMAGE, _bootstrap="localimage", _distro=distro, _docker_env=False, _as="devel"
                    )
                ]
            texts[fmt] = _to_text(stages, fabric, flavour, omit=omit, base=base)
        finally:
            hpccm.config.set_container_format("docker")
    template = (
        texts["singularity"]
        + _setup(flavour, fabric)
        + _help(prof, flavour, base)
        + test_section(prof, flavour, omit, base)
    )
    devel_template = devel_text + (_setup(flavour, fabric) if devel_text else "")
    # The hash names the content, not the commit it was rendered at (builds are cached by it).
    digest = hashlib.sha256((template + devel_template).encode()).hexdigest()

    def final(text: str) -> str:
        return text.replace(HASH_PLACEHOLDER, digest).replace(COMMIT_PLACEHOLDER, commit)

    return Recipe(fabric, flavour, final(template), final(texts["docker"]), digest, final(devel_template), base, omit)


def render_stack(flavour: str, **kwargs) -> Recipe:
    return render("stack", flavour, **kwargs)


def bundle_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(stack.REPO), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def labels(fabric: str, flavour: str, commit: str, omit: tuple[str, ...] = (), base: str = "site") -> dict[str, str]:
    out = {
        f"{LABEL_PREFIX}.fabric": fabric,
        f"{LABEL_PREFIX}.flavour": flavour,
        f"{LABEL_PREFIX}.bundle-commit": commit,
        f"{LABEL_PREFIX}.recipe-hash": HASH_PLACEHOLDER,
    }
    if fabric != "stack":
        out[f"{LABEL_PREFIX}.stack-digest"] = STACK_DIGEST
    if omit:
        out[f"{LABEL_PREFIX}.omitted"] = ",".join(omit)
    if flavour == "cuda":  # what preflight reads before MPI on GPU buffers (containers.stack, issue 49)
        out[f"{LABEL_PREFIX}.{stack.HOROVOD_MPI_GPU_LABEL}"] = stack.HOROVOD_MPI_GPU_DIR
        # on the fabric images whose MPI path moves GPU buffers only (not the stack: its labels would
        # pass on to an Omni-Path image, whose psm2 path cannot)
        if fabric != "stack" and profile(fabric).mpi_carries_gpu_buffers:
            out[f"{LABEL_PREFIX}.{stack.MPI_CUDA_LABEL}"] = "ucx"
    out |= {
        f"{LABEL_PREFIX}.version.{name}": version
        for name, version in stack.versions(flavour, base).items()
        if name not in omit
    }
    return out


def _to_text(
    stages: list[list],
    fabric: str,
    flavour: str,
    *,
    last_labels: bool = True,
    omit: tuple[str, ...] = (),
    base: str = "site",
) -> str:
    if fabric == "stack":
        stages[-1].append(common_environment(flavour))
    if last_labels:
        stages[-1].append(label(metadata=labels(fabric, flavour, COMMIT_PLACEHOLDER, omit, base)))
    parts = []
    for items in stages:
        stage = hpccm.Stage()
        for item in items:
            stage += item
        parts.append(str(stage))
    what = "stack image" if fabric == "stack" else f"fabric={fabric}"
    header = f"# fabric-bench image: {what} flavour={flavour} (rendered by containers/recipe.py; do not edit)\n"
    return header + "\n\n".join(parts) + "\n"


def _setup(flavour: str, fabric: str) -> str:
    """cpu stack: the wheelhouse bind needs its mount point before %post runs."""
    if flavour not in stack.CPU_FLAVOURS or fabric != "stack":
        return ""
    return f"\n%setup\n    mkdir -p ${{APPTAINER_ROOTFS}}{stack.WHEELHOUSE}\n"


def _help(prof: FabricProfile | None, flavour: str, base: str) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in stack.versions(flavour, base).items() if k != "base")
    if prof is None:
        return (
            f"\n%help\n    fabric-bench {flavour} stack image: the common stack every fabric image of "
            f"this flavour is built FROM.\n    Stack: {versions}.\n    Self-test: apptainer test IMAGE\n"
        )
    binds = ", ".join(b.host for b in prof.binds) or "none"
    return (
        f"\n%help\n    fabric-bench {flavour} image for the {prof.name} fabric: {prof.summary}.\n"
        f"    Stack: {versions}.\n"
        f"    Run a benchmark: apptainer exec IMAGE torchrun --standalone --nproc-per-node 2 "
        f"-m bench.torch_train --engine ddp --model resnet18\n"
        f"    or host-launched: mpirun -np 2 apptainer exec IMAGE python -m bench.torch_train "
        f"--engine horovod\n"
        f"    fabric-bench run --fabric {prof.name} sets the fabric's environment and binds "
        f"({binds}).\n"
        f"    Self-test: apptainer test IMAGE\n"
    )
