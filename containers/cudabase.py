"""The local CUDA base (`--base local`): what stands in for nvidia/cuda here.

Two .sif files, cached by their inputs under CACHE/base/cuda-<key>/:

- devel.sif:   a debootstrap Debian root (stack.DEBIAN_SUITE) plus the CUDA
  toolkit laid out as /usr/local/cuda from NVIDIA's PyPI wheels
  (stack.CUDA_WHEELS: nvcc, runtime, cccl, crt, nvvm, cupti, nvtx, culibos,
  nvml-dev), link stubs lib64/stubs/libcuda.so and libnvidia-ml.so, and the
  rehearsal's wget (below).
- runtime.sif: the same Debian root plus only the CUDA runtime libraries.

libcuda at link time, as NVIDIA's devel images solve it: libcuda.so is the
driver's (it comes from the host with --nv), so the devel image carries a
link stub in /usr/local/cuda/lib64/stubs, found through LIBRARY_PATH (the
linker's search path, never the loader's): a binary links against it and
records DT_NEEDED libcuda.so.1, which the host driver provides at run time.
The stub is generated here from cuda.h: every `cu*` function cuda.h declares,
under the names the preprocessor maps them to (cuCtxCreate -> cuCtxCreate_v4)
and the plain names, each a function returning CUDA_ERROR_STUB_LIBRARY (34),
compiled with `cc -shared -nostdlib -Wl,-soname,libcuda.so.1`; libnvidia-ml.so
(NVML, which UCX links) the same way from nvml.h. Nothing puts
stubs/ on the runtime library path (ld.so.conf names lib64 only), and the
runtime base has no stubs at all.

The rehearsal's wget (devel.sif:/usr/local/bin/wget, before /usr/bin on
PATH): hpccm's blocks `wget` each canonical URL; this one serves it from the
verified sources folder bound at REHEARSAL/sources (containers/sources.py,
urls.tsv), checking its sha256, and refuses any other URL. pip finds local
wheels first through /etc/pip.conf (find-links REHEARSAL/wheels, when bound)
and trusts the host's CA bundle (bound at REHEARSAL/certs).
So the rendered recipe is the site's, except its base lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from containers import stack
from containers.sources import REHEARSAL, WGET, install_wget
from containers.host import BuildError, Progress, cache_dir, debian_mirror, debootstrap_root, run_logged, runtime_binary

CUDA_ROOT = "usr/local/cuda"
STUB_ERROR = 34  # CUDA_ERROR_STUB_LIBRARY in cuda.h
VERSION = "v4"  # bump when the layout below changes


ENVIRONMENT = """export PATH=/usr/local/cuda/bin:$PATH
export CUDA_HOME=/usr/local/cuda
export LIBRARY_PATH=/usr/local/cuda/lib64/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}
"""
RUNTIME_ENVIRONMENT = "export PATH=/usr/local/cuda/bin:$PATH\n"


def _key() -> str:
    parts = [VERSION, stack.DEBIAN_SUITE, debian_mirror(), *stack.CUDA_WHEELS, WGET, ENVIRONMENT]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def base_dir() -> Path:
    return cache_dir() / "base" / f"cuda-{stack.CUDA_VERSION}-{_key()}"


def local_bases(log: Path, progress: Progress = print) -> tuple[Path, Path]:
    """(devel.sif, runtime.sif), built when missing."""
    folder = base_dir()
    devel, runtime = folder / "devel.sif", folder / "runtime.sif"
    if devel.exists() and runtime.exists():
        check_layout(devel, log)
        return devel, runtime
    apptainer = runtime_binary("apptainer")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fabric-bench-cudabase.") as scratch:
        work = Path(scratch)
        wheels = _cuda_wheels(work / "wheels", log, progress)
        root = work / "rootfs"
        debootstrap_root(root, log, stack.DEBIAN_SUITE, progress)
        progress("cuda base: /usr/local/cuda from NVIDIA's wheels, libcuda link stub")
        cuda = _lay_out_toolkit(wheels, work / "cuda", log)
        for name, full in (("runtime", False), ("devel", True)):
            tree = work / name
            run_logged(["cp", "-a", str(root), str(tree)], log, f"copying the {name} root")
            _install_cuda(cuda, tree, full)
            if full:
                _install_rehearsal_tools(tree)
            else:  # builds FROM the runtime base (runtime stage, fabric layers) get the same binds
                _rehearsal_mount_points(tree)
            raw, partial = work / f"{name}-raw.sif", folder / f"{name}.sif.partial"
            progress(f"cuda base: apptainer build {name}.sif")
            run_logged(
                [apptainer, "build", "--force", str(raw), str(tree)], log, f"building the local cuda {name} base"
            )
            # the environment through a definition: apptainer keeps it across localimage builds
            definition = work / f"{name}.def"
            definition.write_text(
                f"Bootstrap: localimage\nFrom: {raw}\n\n%environment\n"
                + "".join(f"    {line}\n" for line in (ENVIRONMENT if full else RUNTIME_ENVIRONMENT).splitlines())
            )
            run_logged(
                [apptainer, "build", "--force", str(partial), str(definition)],
                log,
                f"adding the environment to the local cuda {name} base",
            )
            raw.unlink()
            partial.rename(folder / f"{name}.sif")
    check_layout(devel, log)
    return devel, runtime


def _cuda_wheels(folder: Path, log: Path, progress: Progress) -> Path:
    progress(f"cuda base: pip download {len(stack.CUDA_WHEELS)} CUDA {stack.CUDA_VERSION} wheels")
    folder.mkdir(parents=True)
    run_logged(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
            str(folder),
            *stack.CUDA_WHEELS,
        ],
        log,
        "pip download of the CUDA wheels",
    )
    return folder


def _lay_out_toolkit(wheels: Path, cuda: Path, log: Path) -> Path:
    """Every wheel's nvidia/cu13/ tree merged into one toolkit directory."""
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                parts = Path(info.filename).parts
                if len(parts) < 3 or parts[0] != "nvidia" or info.is_dir():
                    continue
                target = cuda.joinpath(*parts[2:])
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                mode = (info.external_attr >> 16) & 0o777
                target.chmod(mode or 0o644)
    (cuda / "lib64").symlink_to("lib")
    lib = cuda / "lib"
    for so in sorted(lib.glob("lib*.so.*")):  # the unversioned link names
        plain = lib / (so.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(so.name)
    stubs = lib / "stubs"
    stubs.mkdir()
    _link_stubs(cuda / "include", stubs, log)
    if not (cuda / "bin" / "nvcc").exists():
        raise BuildError(f"local cuda base: no bin/nvcc in the CUDA wheels; log: {log}")
    return cuda


# (header, its result type and calling-convention macro, function prefix, soname, stub result)
STUBS = (
    ("cuda.h", "CUresult", "CUDAAPI", "cu", "libcuda.so.1", STUB_ERROR),
    # NVML_ERROR_LIBRARY_NOT_FOUND: UCX links the driver's NVML too
    ("nvml.h", "nvmlReturn_t", "DECLDIR", "nvml", "libnvidia-ml.so.1", 12),
)


def stub_symbols(
    header: Path, result: str = "CUresult", convention: str = "CUDAAPI", prefix: str = "cu", cc: str = "cc"
) -> list[str]:
    """Every function the header declares, plain and as its preprocessor renames it
    (cuCtxCreate -> cuCtxCreate_v4)."""
    text = header.read_text()
    plain = set(re.findall(rf"{result}\s+{convention}\s+({prefix}\w+)\s*\(", text))
    done = subprocess.run(
        [cc, "-E", "-P", "-x", "c", "-I", str(header.parent), "-"],
        input=f'#include "{header.name}"\n',
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise BuildError(f"preprocessing {header.name} failed: {done.stderr.strip().splitlines()[-1:]}")
    mapped = set(re.findall(rf"{result}\s+({prefix}\w+)\s*\(", done.stdout))
    return sorted(plain | mapped)


def _link_stubs(include: Path, stubs: Path, log: Path) -> None:
    for header, result, convention, prefix, soname, code in STUBS:
        names = stub_symbols(include / header, result, convention, prefix)
        if len(names) < 50:
            raise BuildError(f"local cuda base: only {len(names)} functions found in {header}; log: {log}")
        target = stubs / (soname.rsplit(".", 1)[0])  # libcuda.so, libnvidia-ml.so
        source = target.with_suffix(".c")
        source.write_text(
            f"/* link stub generated from {header} by containers/cudabase.py */\n"
            + "".join(f"int {name}(void) {{ return {code}; }}\n" for name in names)
        )
        run_logged(
            ["cc", "-shared", "-fPIC", "-nostdlib", "-O1", f"-Wl,-soname,{soname}", "-o", str(target), str(source)],
            log,
            f"compiling the {soname} link stub",
        )
        source.unlink()


def _install_cuda(cuda: Path, tree: Path, full: bool) -> None:
    dest = tree / CUDA_ROOT
    if full:
        shutil.copytree(cuda, dest, symlinks=True)
    else:  # runtime: shared libraries only, no stubs
        (dest / "lib").mkdir(parents=True)
        for so in (cuda / "lib").glob("lib*.so*"):
            shutil.copy2(so, dest / "lib" / so.name, follow_symlinks=False)
        (dest / "lib64").symlink_to("lib")
    (tree / "etc/ld.so.conf.d/cuda.conf").write_text("/usr/local/cuda/lib64\n")
    subprocess.run(["ldconfig", "-r", str(tree)], check=False)


def _rehearsal_mount_points(tree: Path) -> None:
    """Where a rehearsal build binds the verified sources, local wheels and the CA bundle."""
    for sub in ("sources", "wheels", "certs"):
        (tree / REHEARSAL.lstrip("/") / sub).mkdir(parents=True, exist_ok=True)


def _install_rehearsal_tools(tree: Path) -> None:
    install_wget(tree)
    _rehearsal_mount_points(tree)
    # pip's TLS trust: the host's CA bundle, bound at certs/ (this machine's registries need it)
    (tree / "etc/pip.conf").write_text(
        f"[global]\nfind-links = {REHEARSAL}/wheels\ncert = {REHEARSAL}/certs/ca-certificates.crt\n"
    )
    # nvcc and the stubs for %post, whichever way apptainer sources the base's environment
    nvcc = tree / "usr/local/bin/nvcc"
    nvcc.write_text('#!/bin/sh\nexec /usr/local/cuda/bin/nvcc "$@"\n')
    nvcc.chmod(0o755)


def check_layout(devel: Path, log: Path) -> None:
    """A broken base (no toolkit, wrong layout) stops here, not an hour into a build."""
    apptainer = runtime_binary("apptainer")
    probe = (
        "test -x /usr/local/cuda/bin/nvcc && test -f /usr/local/cuda/include/cuda.h && "
        "test -f /usr/local/cuda/lib64/stubs/libcuda.so && test -f /usr/local/cuda/lib64/stubs/libnvidia-ml.so && "
        "test -e /usr/local/cuda/lib64/libcudart.so && test -f /usr/local/cuda/include/nvml.h && "
        "/usr/local/cuda/bin/nvcc --version"
    )
    try:
        run_logged(
            [apptainer, "exec", "--containall", str(devel), "sh", "-c", probe], log, f"local cuda base check ({devel})"
        )
    except BuildError:
        raise BuildError(
            f"local cuda base {devel} lacks the CUDA toolkit layout "
            f"(nvcc, cuda.h, lib64/stubs/libcuda.so, libcudart); log: {log}"
        ) from None


if __name__ == "__main__":
    log = cache_dir() / "base" / "cuda-base.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        print(*local_bases(log))
    except BuildError as exc:
        print(f"cuda base: error: {exc}", file=sys.stderr)
        sys.exit(2)
    os._exit(0)
