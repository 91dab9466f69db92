"""Where a tuning table is found (no MPI here): `ADAPTCOLL_TUNING=FILE`, else the per-user cache file
of this machine and MPI library, else none (the shipped rule applies).

The cache directory is `$XDG_CACHE_HOME/adaptcoll/` (default `~/.cache/adaptcoll/`); the file is
`tuning-<host>-<mpi>.json`, e.g. `tuning-node17-mpich-version-5.0.2.json`. `ADAPTCOLL_TUNING=off`
turns tables off. Only rank 0 of a communicator reads the file; the bytes are sent to the others.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Optional

__all__ = ["OFF", "cache_dir", "cache_file", "library_name", "locate", "read_bytes"]

OFF = ("off", "none", "0", "no")
"""ADAPTCOLL_TUNING values that turn tables off."""


def library_name(version_text: str) -> str:
    """The MPI library's name and version as a table key: the first line of MPI_Get_library_version,
    whitespace collapsed (e.g. 'MPICH Version: 5.0.2', 'Open MPI v5.0.11, package: ...')."""
    first = version_text.strip().splitlines()[0] if version_text.strip() else "unknown MPI"
    return " ".join(first.split())


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:60] or "x"


def host_name() -> str:
    """This machine's short host name."""
    return socket.gethostname().split(".")[0] or "localhost"


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/adaptcoll, else ~/.cache/adaptcoll."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "adaptcoll"


def cache_file(mpi_library: str, host: Optional[str] = None) -> Path:
    """The cache file of this machine (host) and MPI library."""
    short = (host or host_name()).split(".")[0]
    return cache_dir() / f"tuning-{_slug(short)}-{_slug(mpi_library.split(',')[0])}.json"


def locate(setting: str, mpi_library: str) -> Optional[Path]:
    """The table file to read: the ADAPTCOLL_TUNING setting if it names one, else the cache file if it
    exists, else None (also for 'off')."""
    value = setting.strip()
    if value.lower() in OFF:
        return None
    if value:
        return Path(value).expanduser()
    found = cache_file(mpi_library)
    return found if found.is_file() else None


def read_bytes(path: Path) -> tuple[bytes, Optional[str]]:
    """(the file's bytes, None), or (b'', why it could not be read)."""
    try:
        return path.read_bytes(), None
    except OSError as exc:
        return b"", f"{path}: cannot read ({exc.strerror or exc})"
