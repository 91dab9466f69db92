"""Whether the MPI library can read CUDA device memory itself (else device segments are staged through
pinned host buffers): an explicit override, the MPI 4.1 info key, or MPIX_Query_cuda_support()."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Optional

from mpi4py import MPI

__all__ = ["CUDA_AWARE_ENV", "cuda_aware_mpi", "mpi_cuda_aware"]

CUDA_AWARE_ENV = "ADAPTCOLL_CUDA_AWARE"
"""Set to 1 or 0 to say whether the MPI library is CUDA-aware, overriding every detection."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _env_override() -> Optional[bool]:
    """ADAPTCOLL_CUDA_AWARE as a bool, None when unset or empty; ValueError when unreadable."""
    raw = os.environ.get(CUDA_AWARE_ENV)
    if raw is None or raw.strip() == "":
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{CUDA_AWARE_ENV}={raw!r} is not understood: set it to 1 (CUDA-aware MPI) or 0 (stage "
        "device buffers through host memory), or unset it to detect"
    )


def _alloc_kinds(comm: Any) -> Optional[str]:
    """The MPI 4.1 info value `mpi_memory_alloc_kinds` from the communicator or MPI_INFO_ENV."""
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return None
    sources = []
    try:
        sources.append((comm if comm is not None else MPI.COMM_WORLD).Get_info())
    except MPI.Exception:
        pass
    sources.append(MPI.INFO_ENV)
    for info in sources:
        try:
            value = info.Get("mpi_memory_alloc_kinds")
        except MPI.Exception:
            value = None
        finally:
            if info is not MPI.INFO_ENV and info != MPI.INFO_NULL:
                info.Free()
        if value:
            return value
    return None


def _mpix_query_cuda_support() -> Optional[bool]:
    """MPIX_Query_cuda_support() from the MPI library mpi4py loaded (MPICH, Open MPI), or None if absent."""
    candidates = [MPI.__file__]
    try:
        with open("/proc/self/maps") as maps:
            candidates += sorted({line.split()[-1] for line in maps if "/libmpi" in line and ".so" in line})
    except OSError:
        pass
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LOCAL", 0)
    for path in candidates:
        try:
            library = ctypes.CDLL(path, mode=mode)
            query = library.MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        query.argtypes = []
        return bool(query())
    return None


def cuda_aware_mpi(comm: Any = None) -> tuple[bool, str]:
    """Whether MPI can take device pointers, and why we think so.

    Order: the ADAPTCOLL_CUDA_AWARE override, the MPI 4.1 info key `mpi_memory_alloc_kinds` listing
    a cuda kind, MPIX_Query_cuda_support() through ctypes, else no.
    """
    override = _env_override()
    if override is not None:
        return override, f"{CUDA_AWARE_ENV}={os.environ[CUDA_AWARE_ENV].strip()}"
    kinds = _alloc_kinds(comm)
    if kinds is not None:
        cuda_kinds = [kind.strip() for kind in kinds.split(",") if kind.strip().lower().startswith("cuda")]
        if cuda_kinds:
            return True, f"mpi_memory_alloc_kinds lists {','.join(cuda_kinds)}"
    supported = _mpix_query_cuda_support()
    if supported is not None:
        return supported, f"MPIX_Query_cuda_support() returned {int(supported)}"
    if kinds is not None:
        return False, f"mpi_memory_alloc_kinds is {kinds!r} (no cuda kind) and MPIX_Query_cuda_support is absent"
    return False, "no CUDA support reported (no mpi_memory_alloc_kinds info key, no MPIX_Query_cuda_support)"


_DECIDED: dict[Optional[str], tuple[bool, str]] = {}


def mpi_cuda_aware(comm: Any = None) -> tuple[bool, str]:
    """`cuda_aware_mpi`, asked once per process (and per value of ADAPTCOLL_CUDA_AWARE).

    The decision layer (which route a device buffer takes) and every communicator's DeviceContext
    (which transport its device segments use) read this one answer, so they always agree, and a call
    does not pay for the info and ctypes queries. The answer depends only on the MPI library and the
    environment, which are the same on every rank, so every rank decides alike.
    """
    key = os.environ.get(CUDA_AWARE_ENV)
    found = _DECIDED.get(key)
    if found is None:
        found = _DECIDED[key] = cuda_aware_mpi(comm)
    return found
