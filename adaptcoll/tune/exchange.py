"""The communicator set-up step that gives every rank the same tuning: three separate pieces,

1. `load` (rank 0 only): find the table file (`files.locate`) and read its bytes;
2. `share` (collective): every rank's host id and CPU count to every rank (Allgather), and rank 0's
   origin + table bytes to every rank (Bcast) - so ranks given different files, or no file, or no
   shared file system, still agree;
3. `finish` (local): the communicator's facts from the gathered records, then parse, validate and
   resolve (`policy.resolve`, the same bytes and facts on every rank -> the same choices).

`exchange` runs them blocking on adaptcoll's private communicator (CommState's duplicate). The
pieces are separate so that the set-up can post step 2 as nonblocking calls (Iallgather + Ibcast)
and finish when they complete.
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Optional

import numpy as np
from mpi4py import MPI

from ..runtime import compiled, settings
from .files import library_name, locate, read_bytes
from .policy import CommFacts, CommTuning, placed_facts, resolve

__all__ = ["Loaded", "load", "local_record", "share", "facts_from", "finish", "exchange", "mpi_library"]

Loaded = tuple[bytes, str, Optional[str]]
"""(table bytes or b'', origin = the path read or '', problem reading it or None)."""

_SEP = b"\0"
RECORD = 4
"""Values per rank in step 2's Allgather (see local_record)."""


def mpi_library() -> str:
    """This process's MPI library and version as a table key (see files.library_name)."""
    return library_name(MPI.Get_library_version())


def host_id() -> int:
    """A 63-bit id of this host (from its name), equal on every rank of a node."""
    digest = hashlib.blake2b(socket.gethostname().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def load() -> Loaded:
    """Step 1 (rank 0): the table's bytes and path, from ADAPTCOLL_TUNING or the cache directory."""
    path = locate(settings.current().tuning, mpi_library())
    if path is None:
        return b"", "", None
    data, problem = read_bytes(path)
    return data, str(path), problem


def local_record(loaded_size: int) -> np.ndarray:
    """This rank's record for step 2: [host id, CPUs, bytes rank 0 will broadcast (others: 0), whether
    this rank runs the compiled progress path (1/0)]."""
    engine = 1 if compiled.status()[0] == "compiled" else 0
    return np.array([host_id(), os.cpu_count() or 1, loaded_size, engine], dtype=np.int64)


def share(comm: MPI.Intracomm, loaded: Loaded) -> tuple[np.ndarray, bytes, str]:
    """Step 2 (collective, blocking): (every rank's record, rank 0's table bytes, rank 0's origin)."""
    rank = comm.Get_rank()
    data, origin, _ = loaded if rank == 0 else (b"", "", None)
    payload = origin.encode() + _SEP + data if rank == 0 and origin else b""
    records = np.empty((comm.Get_size(), RECORD), dtype=np.int64)
    comm.Allgather(local_record(len(payload)), records)
    length = int(records[0, 2])
    buf = np.frombuffer(payload, np.uint8).copy() if rank == 0 else np.empty(length, np.uint8)
    if length:
        comm.Bcast(buf, 0)
    head, _, body = buf.tobytes().partition(_SEP)
    return records, body, head.decode(errors="replace")


def facts_from(records: np.ndarray, library: str) -> CommFacts:
    """The communicator's facts from the gathered records (identical on every rank)."""
    everywhere = records.shape[1] > 3 and bool(records[:, 3].all())  # the rule must be the same on every rank
    return placed_facts(records[:, 0].tolist(), records[:, 1].tolist(), library, everywhere)


def finish(records: np.ndarray, data: bytes, origin: str, rank: int, problem: Optional[str] = None) -> CommTuning:
    """Step 3 (local): facts, then parse + validate + resolve; rank 0 warns about a bad table."""
    return resolve(data, origin, facts_from(records, mpi_library()), warn=rank == 0, problem=problem)


def exchange(comm: MPI.Intracomm) -> CommTuning:
    """Steps 1-3, blocking, on `comm` (adaptcoll's private duplicate): the communicator's tuning."""
    rank = comm.Get_rank()
    loaded: Loaded = load() if rank == 0 else (b"", "", None)
    records, data, origin = share(comm, loaded)
    return finish(records, data, origin, rank, loaded[2])
