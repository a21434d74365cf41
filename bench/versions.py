"""Versions of the communication stack as seen from inside a rank."""

from __future__ import annotations

import importlib.metadata
import platform


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def mpi_library_version() -> str | None:
    """MPI library string without initialising MPI (allowed before MPI_Init)."""
    try:
        import mpi4py

        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
        from mpi4py import MPI

        return MPI.Get_library_version().strip("\x00 \n").splitlines()[0]
    except Exception:  # noqa: BLE001 - no MPI is a fact to record, not an error
        return None


def common_versions() -> dict:
    return {
        "python": platform.python_version(),
        "horovod": package_version("horovod"),
        "mpi4py": package_version("mpi4py"),
        "mpi": mpi_library_version(),
        "numpy": package_version("numpy"),
    }
