"""Pinning glibc's malloc so that native MPI is timed in its fastest state.

MPICH's Reduce mallocs a message-sized temporary per call; with glibc's defaults that memory goes back
to the OS on free and every call page-faults it in again (16 MiB at 4 ranks: 33 ms against 11-14 ms),
unless the process freed larger blocks earlier (glibc then raises its thresholds by itself). Which
state a measurement sees thus depends on what the process did before: `python -m adaptcoll.check`
saw native Reduce 1 MiB at 2 ranks take 0.24-0.58 ms or 1.1 ms. Pinning makes the state the fast one
for every run (bench/RESULTS.md, "Things measured here that surprised us")."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["pin_malloc", "malloc_env", "M_MMAP_MAX_THRESHOLD", "PINNED_NO_MMAP"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
M_MMAP_MAX_THRESHOLD = 32 << 20
"""glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2): larger blocks are always mmapped."""


def pin_malloc() -> str:
    """Keep freed memory in the heap (trim threshold 1 GiB, mmap threshold 32 MiB, and no mmapped blocks
    at all, so that blocks over 32 MiB are reused too); returns what was done, or why nothing was (not
    glibc). Until 2026-11-29 blocks over 32 MiB stayed mmapped: heap arrays made the compiled engine's
    folds stall (4K aliasing, since fixed in progress.c; bench/RESULTS.md, "The compiled folds and 4K
    aliasing")."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return "not pinned (no glibc mallopt)"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_TRIM_THRESHOLD, 1 << 30) and mallopt(_M_MMAP_THRESHOLD, M_MMAP_MAX_THRESHOLD)
    if not ok:
        return "not pinned (mallopt refused)"
    if not mallopt(_M_MMAP_MAX, 0):
        return "pinned (M_TRIM_THRESHOLD 1 GiB, M_MMAP_THRESHOLD 32 MiB: blocks up to 32 MiB are reused, not refaulted)"
    return f"pinned ({PINNED_NO_MMAP}, M_TRIM_THRESHOLD 1 GiB: freed blocks of every size are reused, not refaulted)"


PINNED_NO_MMAP = "M_MMAP_MAX 0"
"""What `pin_malloc`'s answer says when glibc maps no block afresh (no refaults at any size)."""


def malloc_env() -> dict[str, str]:
    """The environment's glibc malloc settings (MALLOC_* and GLIBC_TUNABLES): which state native MPI's
    per-call temporaries were timed in, for a report."""
    return {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"}
