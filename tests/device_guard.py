"""An MPI guard that sees every MPI call: a PMPI interposition library, generated from the MPI library's
own `mpi.h`, preloaded into each rank (LD_PRELOAD).

Every MPI function of the header that takes a buffer (`buf`, `sendbuf`, `recvbuf`, `inbuf`, ...) is
wrapped: the wrapper checks each buffer pointer against the fake device memory range
(tests/fake_device.py's arena) and counts a *hit* when one lies inside, then calls the PMPI entry
point. So a device pointer reaching MPI is seen whatever Python route led there (adaptcoll's forms,
mpi4py called directly, a future code path), which a Python-level check could not promise; mpi4py's
classes cannot be patched anyway.

`build(directory)` compiles it (gcc and the header of the MPI that mpi4py loads; `GuardUnavailable`
says why not). In a rank, `Guard()` reaches the preloaded library through the process's global symbols.
Not a test module.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["BUFFER_PARAMETERS", "Guard", "GuardUnavailable", "build", "preloaded", "wrappers_source"]

BUFFER_PARAMETERS = frozenset(
    {"buf", "buffer", "sendbuf", "recvbuf", "inbuf", "outbuf", "inoutbuf", "origin_addr", "result_addr"}
)
"""Parameter names of MPI's buffer arguments (MPI 4.1 and MPICH's headers)."""

_PROTOTYPE = re.compile(r"\bint\s+(P?MPI_\w+)\s*\(([^()]*)\)")
_PARAMETER = re.compile(r"^(?P<type>.*?)\b(?P<name>\w+)\s*(?P<array>(\[[^\]]*\]\s*)*)$", re.S)

_PRELUDE = r"""
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uintptr_t guard_lo, guard_hi;
static long guard_hits, guard_checked;
static char guard_calls[8192];

void adaptcoll_guard_set_device_range(uintptr_t lo, uintptr_t hi) { guard_lo = lo; guard_hi = hi; }
long adaptcoll_guard_hits(void) { return guard_hits; }
long adaptcoll_guard_checked(void) { return guard_checked; }
const char *adaptcoll_guard_calls(void) { return guard_calls; }
void adaptcoll_guard_reset(void) { guard_hits = 0; guard_calls[0] = 0; }

static void adaptcoll_guard_check(const char *function, const void *pointer) {
    uintptr_t address = (uintptr_t)pointer;
    guard_checked++;
    if (guard_lo < guard_hi && address >= guard_lo && address < guard_hi) {
        guard_hits++;
        if (!strstr(guard_calls, function) && strlen(guard_calls) + strlen(function) + 2 < sizeof guard_calls) {
            strcat(guard_calls, function);
            strcat(guard_calls, " ");
        }
        if (getenv("ADAPTCOLL_GUARD_VERBOSE"))
            fprintf(stderr, "[device guard] device pointer %p passed to %s\n", pointer, function);
    }
}
"""


class GuardUnavailable(RuntimeError):
    """The guard cannot be built here (no C compiler, no mpi.h for the MPI mpi4py loads)."""


def _split(parameters: str) -> list[tuple[str, str, str]]:
    """[(declaration, name, buffer?)] of a prototype's parameter list."""
    out = []
    for part in parameters.split(","):
        part = " ".join(part.split())
        if not part or part == "void":
            continue
        match = _PARAMETER.match(part)
        if match is None:
            raise ValueError(f"cannot read the parameter {part!r}")
        out.append((part, match.group("name"), match.group("type")))
    return out


def wrappers_source(preprocessed_header: str) -> tuple[str, list[str]]:
    """C source of the guard for a preprocessed mpi.h, and the names of the functions it wraps."""
    found: dict[str, str] = {}
    for match in _PROTOTYPE.finditer(preprocessed_header):
        found.setdefault(match.group(1), match.group(2))
    wrapped, bodies = [], [_PRELUDE]
    for name, parameters in sorted(found.items()):
        if not name.startswith("MPI_") or "P" + name not in found or "..." in parameters:
            continue
        params = _split(parameters)
        buffers = [p for decl, p, ptype in params if p in BUFFER_PARAMETERS and "void" in ptype and "*" in decl]
        if not buffers:
            continue
        checks = "".join(f'    adaptcoll_guard_check("{name}", {p});\n' for p in buffers)
        call = ", ".join(p for _, p, _ in params)
        decls = ", ".join(decl for decl, _, _ in params) or "void"
        bodies.append(f"int {name}({decls}) {{\n{checks}    return P{name}({call});\n}}\n")
        wrapped.append(name)
    return "\n".join(bodies), wrapped


def _loaded_libmpi() -> Path:
    """The MPI library mpi4py loaded in this process."""
    from mpi4py import MPI  # noqa: F401 - loads libmpi

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if re.search(r"/libmpi(_\w+)?\.so", path) and "libmpi_abi" not in path:
                return Path(path)
    raise GuardUnavailable("cannot find the MPI library mpi4py loaded (/proc/self/maps)")


def _include_dir(libmpi: Path) -> Path:
    """The directory of the mpi.h that belongs to `libmpi` (the MPICH wheel: <prefix>/include)."""
    for candidate in (libmpi.parent.parent / "include", Path(sys.prefix) / "include"):
        if (candidate / "mpi.h").is_file():
            return candidate
    mpicc = shutil.which("mpicc")
    if mpicc:
        shown = subprocess.run([mpicc, "-show"], capture_output=True, text=True).stdout
        for flag in shown.split():
            if flag.startswith("-I") and (Path(flag[2:]) / "mpi.h").is_file():
                return Path(flag[2:])
    raise GuardUnavailable(f"no mpi.h for {libmpi} (looked in {libmpi.parent.parent / 'include'} and mpicc -show)")


def build(directory: Path) -> tuple[Path, list[str]]:
    """Compile the guard into `directory`; (the shared library, the MPI functions it wraps)."""
    compiler = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if compiler is None:
        raise GuardUnavailable("no C compiler (gcc/cc) on PATH")
    libmpi = _loaded_libmpi()
    include = _include_dir(libmpi)
    header = subprocess.run(
        [compiler, "-E", "-P", f"-I{include}", "-"], input="#include <mpi.h>\n", capture_output=True, text=True
    )
    if header.returncode:
        raise GuardUnavailable(f"cannot preprocess mpi.h: {header.stderr.strip()[:500]}")
    source, wrapped = wrappers_source(header.stdout)
    directory.mkdir(parents=True, exist_ok=True)
    c_file, library = directory / "adaptcoll_device_guard.c", directory / "libadaptcoll_device_guard.so"
    c_file.write_text(source)
    compiled = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", f"-I{include}", str(c_file), "-o", str(library), str(libmpi)]
        + [f"-Wl,-rpath,{libmpi.parent}"],
        capture_output=True,
        text=True,
    )
    if compiled.returncode:
        raise GuardUnavailable(f"cannot compile the guard: {compiled.stderr.strip()[:2000]}")
    return library, wrapped


class Guard:
    """The preloaded guard, from inside a rank: set the device range, read the hits."""

    def __init__(self) -> None:
        process = ctypes.CDLL(None)
        try:
            self._set = process.adaptcoll_guard_set_device_range
        except AttributeError:
            raise GuardUnavailable("the device guard is not preloaded (LD_PRELOAD) into this process") from None
        self._set.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        self._hits = process.adaptcoll_guard_hits
        self._hits.restype = ctypes.c_long
        self._checked = process.adaptcoll_guard_checked
        self._checked.restype = ctypes.c_long
        self._calls = process.adaptcoll_guard_calls
        self._calls.restype = ctypes.c_char_p
        self._reset = process.adaptcoll_guard_reset

    def watch(self, lo: int, hi: int) -> None:
        self._set(lo, hi)

    @property
    def hits(self) -> int:
        return int(self._hits())

    @property
    def checked(self) -> int:
        return int(self._checked())

    @property
    def calls(self) -> list[str]:
        return (self._calls() or b"").decode().split()

    def reset(self) -> None:
        self._reset()


def preloaded(ranks: int, library: Path, env: dict[str, str]) -> list[str]:
    """mpiexec with `library` preloaded into every rank (not into mpiexec itself): MPICH's Hydra takes
    `-genv`, Open MPI's `-x` (and, on a 2-core machine, oversubscription; as root, its consent in `env`)."""
    from mpi4py import MPI

    if MPI.get_vendor()[0] == "Open MPI":
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        launcher = ["mpiexec", "--oversubscribe", "--bind-to", "core:overload-allowed", "-n", str(ranks)]
        return [*launcher, "-x", f"LD_PRELOAD={library}"]
    return ["mpiexec", "-n", str(ranks), "-genv", "LD_PRELOAD", str(library)]
