"""The cpu flavour's stack image: its cold build, and the MPI paths the presets use, measured here.

The cpu flavour builds the site images' communication stack with CUDA off
(containers/recipe.py `common_blocks(cuda=False)`: the same blocks, versions
and configure flags). This script builds the cpu stack image (or reuses the
cached one, whose record keeps its build log) and prints its seconds per
component. It then proves the stack runs: the Open MPI components the presets
select and the libfabric providers are present, and a 2-rank MPI_Allreduce (C,
built in the image) gives the right sum over each path the presets use (pml
ucx; pml cm + mtl ofi with libfabric's tcp provider; pml ob1 + btl tcp).
Last, the same program under the host's Debian Open MPI and under the image's,
in alternating rounds: the image/host time ratio of a 16 MiB allreduce.

    .venv/bin/python benchmarks/cpu_stack_build.py [--rounds 3] [--image SIF]

A cold build took ~17 min here on 2 cores (devel 830 s, runtime 167 s; `make image` builds the same stack).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from containers import build, rehearse

PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, n = 4 << 20, iters = 10;          /* 4 Mi floats: 16 MiB */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    float *buf = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) buf[i] = rank + 1;
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int ok = buf[0] == size * (size + 1) / 2 && buf[n - 1] == buf[0];
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int k = 0; k < iters; k++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t = (MPI_Wtime() - t) / iters;
    if (rank == 0) printf("allreduce-check ranks=%d sum_ok=%d seconds_16MiB=%.6f\n", size, ok, t);
    MPI_Finalize();
    return ok ? 0 : 1;
}
"""
# pml/mtl/btl selections of the presets, each run on its own (libfabric's tcp provider for ofi)
PATHS = {
    # Open MPI 4.1's pml ucx declines without an RDMA transport unless told any will do
    "pml ucx": [
        "--mca",
        "pml",
        "ucx",
        "--mca",
        "pml_ucx_tls",
        "any",
        "--mca",
        "pml_ucx_devices",
        "any",
        "-x",
        "UCX_TLS=sm,self,tcp",
    ],
    # the ofi MTL leaves out tcp unless a provider list names it
    "pml cm + mtl ofi (tcp)": [
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        "tcp",
        "-x",
        "FI_PROVIDER=tcp",
    ],
    "pml ob1 + btl tcp": ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp"],
}
COMPONENTS = ("pml: ucx", "mtl: ofi", "mtl: psm2", "pmix: ext3x", "btl: tcp", "btl: vader")
PROVIDERS = ("tcp", "shm", "verbs", "efa", "psm2")
ROOT = ["--allow-run-as-root"] if os.geteuid() == 0 else []


def exec_argv(sif: Path) -> list[str]:
    return [build.runtime_binary("apptainer"), "exec", "--cleanenv", str(sif)]


def in_image(sif: Path, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*exec_argv(sif), *argv], capture_output=True, text=True, timeout=300)


def checks(sif: Path) -> bool:
    good = True
    ompi = in_image(sif, ["ompi_info"]).stdout
    cuda = in_image(sif, ["ompi_info", "--parsable", "--all"]).stdout
    for name in COMPONENTS:
        kind, comp = name.split(": ")
        found = re.search(rf"MCA {kind}: {comp} \(", ompi) is not None
        good &= found
        print(f"  ompi_info MCA {name}: {'ok' if found else 'MISSING'}")
    no_cuda = "mpi_built_with_cuda_support:value:false" in cuda
    good &= no_cuda
    print(f"  ompi_info CUDA support: {'off, as asked' if no_cuda else 'UNEXPECTED'}")
    listed = in_image(sif, ["sh", "-c", "FI_LOG_LEVEL=info fi_info -l 2>&1"]).stdout
    for provider in PROVIDERS:
        found = re.search(rf"^{provider}:|::{provider}:", listed, re.M) is not None
        good &= found
        print(f"  libfabric provider {provider}: {'ok' if found else 'MISSING'}")
    ucx = in_image(sif, ["ucx_info", "-v"]).stdout
    print(f"  ucx_info -v: {ucx.splitlines()[0] if ucx else 'FAILED'}")
    return good


def allreduce(mpirun: list[str], binary: str, extra: list[str]) -> float:
    out = subprocess.run([*mpirun, "-np", "2", *ROOT, *extra, binary], capture_output=True, text=True, timeout=300)
    match = re.search(r"sum_ok=(\d) seconds_16MiB=([0-9.]+)", out.stdout)
    if out.returncode != 0 or not match or match.group(1) != "1":
        raise RuntimeError(f"allreduce failed (exit {out.returncode}): {out.stdout[-500:]} {out.stderr[-1500:]}")
    return float(match.group(2))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--image", type=Path, help="check and run this image (with a compiler) instead of the cpu stack image"
    )
    args = p.parse_args()
    if args.image:
        if not args.image.is_file():
            print(f"error: no image {args.image}", file=sys.stderr)
            return 2
        return prove(args.image, args.rounds)
    try:
        entry = build.build_stack("cpu", "apptainer")
    except build.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log = Path(entry.log)
    print(
        f"\ncpu stack {entry.image}: built in {entry.build_seconds:.0f} s ({entry.build_seconds / 60:.1f} min; "
        f"stages {entry.stages}), {entry.size_bytes / 2**30:.2f} GiB"
    )
    if log.is_file():
        print("seconds per component:")
        for name, value in sorted(rehearse.component_seconds(log).items(), key=lambda kv: -kv[1]):
            print(f"  {name:<24} {value:7.1f}")
    # the runtime stage has no compiler: the program is built in the devel stage, against the same paths
    return prove(Path(entry.image), args.rounds, Path(entry.devel_image) if entry.devel_image else None)


def prove(sif: Path, rounds: int, compiler_image: Path | None = None) -> int:
    """The components the presets select, then 2-rank runs in the image and beside the host's."""
    print("\nwhat the image holds:")
    good = checks(sif)
    try:
        with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            (Path(tmp) / "allreduce.c").write_text(PROGRAM)
            image_bin, host_bin = f"{tmp}/allreduce-image", f"{tmp}/allreduce-host"
            built = in_image(
                compiler_image or sif, ["/usr/local/openmpi/bin/mpicc", "-O2", "-o", image_bin, f"{tmp}/allreduce.c"]
            )
            if built.returncode != 0:
                raise RuntimeError(f"mpicc in the image: {built.stderr[-800:]}")
            image_mpirun = [*exec_argv(sif), "/usr/local/openmpi/bin/mpirun"]
            print("\n2-rank MPI_Allreduce in the image, each path the presets use:")
            for name, extra in PATHS.items():
                print(f"  {name:<24} sum ok, 16 MiB in {allreduce(image_mpirun, image_bin, extra) * 1e3:.1f} ms")
            host_mpicc, host_mpirun = shutil.which("mpicc"), shutil.which("mpirun")
            if not (host_mpicc and host_mpirun):
                print("host: no mpicc/mpirun (Debian's openmpi-bin, libopenmpi-dev): no comparison")
                return 0 if good else 1
            subprocess.run([host_mpicc, "-O2", "-o", host_bin, f"{tmp}/allreduce.c"], check=True)
            vader = ["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
            host, image = [], []
            for round_ in range(rounds):  # alternating: a shared host drifts
                sides = [
                    lambda: host.append(allreduce([host_mpirun], host_bin, vader)),
                    lambda: image.append(allreduce(image_mpirun, image_bin, vader)),
                ]
                for go in sides if round_ % 2 == 0 else sides[::-1]:
                    go()
            host_s, image_s = statistics.mean(host), statistics.mean(image)
            print(
                f"\n16 MiB allreduce, 2 ranks, shared memory (ob1/vader), {rounds} alternating rounds: "
                f"host (Debian Open MPI) {host_s * 1e3:.1f} ms, image (source-built) "
                f"{image_s * 1e3:.1f} ms: image/host time {image_s / host_s:.3f}"
            )
    except (RuntimeError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
