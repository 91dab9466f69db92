"""The per-rank trace file: a compact binary record stream, written in chunks and read back whole.

A file is the magic bytes, then chunks of (type byte, little-endian u64 length, payload):
- `E`: event records (`EVENT`, 29 bytes each: time, operation, kind, peer, segment, bytes);
- `O`: operation headers (`OPERATION`, one per traced operation: which communicator, which of its
  operations, the segment plan, the collective's name);
- `M`: JSON metadata (the process, the communicators with their members and clock offsets, names,
  counts of dropped events). Later `M` chunks add to earlier ones.
Chunks are appended whenever the recorder's buffer fills and at exit, so a file is readable after every
flush. No MPI here: the merge tool (`python -m adaptcoll.trace`) reads files anywhere.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = [
    "MAGIC",
    "SUFFIX",
    "EVENT",
    "OPERATION",
    "KINDS",
    "OP_START",
    "OP_END",
    "RECV_POST",
    "RECV_DONE",
    "SEND_POST",
    "FORWARD",
    "SEND_DONE",
    "FOLD_START",
    "FOLD_END",
    "IDLE",
    "TraceFileError",
    "RankTrace",
    "file_name",
    "write_header",
    "write_chunk",
    "read",
]

MAGIC = b"ADTRACE1"
SUFFIX = ".adtrace"

EVENT = np.dtype([("t", "<i8"), ("op", "<u4"), ("kind", "u1"), ("peer", "<i4"), ("seg", "<i4"), ("nbytes", "<i8")])
"""One event: `t` monotonic ns on this process's clock; `op` the process-wide operation id; `peer` the
peer's COMM_WORLD rank (-1 if none); `seg` the segment (-1 if none); `nbytes` the segment's bytes (for
IDLE: the number of idle engine sweeps, which lasted from `t` to the next event of the operation)."""

OPERATION = np.dtype(
    [
        ("op", "<u4"),
        ("comm", "<u4"),
        ("comm_op", "<u4"),
        ("name", "<u2"),
        ("nseg", "<i8"),
        ("seg_count", "<i8"),
        ("count", "<i8"),
        ("tag_base", "<i8"),
        ("tag_space", "<i8"),
    ]
)
"""One traced operation: `comm` indexes the metadata's communicators, `comm_op` counts that
communicator's traced operations (the same number on every member), `name` indexes the names."""

OP_START, OP_END, RECV_POST, RECV_DONE, SEND_POST, FORWARD, SEND_DONE, FOLD_START, FOLD_END, IDLE = range(10)
KINDS = (
    "op_start",
    "op_end",
    "recv_post",
    "recv_done",
    "send_post",
    "forward",
    "send_done",
    "fold_start",
    "fold_end",
    "idle",
)
"""Event kinds by code. FORWARD is a send posted for a segment that arrived at this rank earlier in the
operation; OP_END is recorded once per tree link (the operation ends at the last)."""

_CHUNK = struct.Struct("<cQ")


class TraceFileError(ValueError):
    """A trace file is missing, truncated or not an adaptcoll trace."""


def file_name(world_rank: int) -> str:
    """The file name of one process's trace."""
    return f"rank{world_rank:05d}{SUFFIX}"


def write_header(f: BinaryIO) -> None:
    """Start a new trace file."""
    f.write(MAGIC)


def write_chunk(f: BinaryIO, kind: bytes, payload: bytes) -> None:
    """Append one chunk (`kind` is b"E", b"O" or b"M")."""
    f.write(_CHUNK.pack(kind, len(payload)))
    f.write(payload)


@dataclass
class RankTrace:
    """Everything one process recorded (see the module docstring)."""

    path: Path
    process: dict[str, Any] = field(default_factory=dict)
    comms: list[dict[str, Any]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    dropped: int = 0
    events: np.ndarray = field(default_factory=lambda: np.zeros(0, EVENT))
    operations: np.ndarray = field(default_factory=lambda: np.zeros(0, OPERATION))

    @property
    def world_rank(self) -> int:
        return int(self.process.get("world_rank", -1))


def read(path: str | Path) -> RankTrace:
    """Read one trace file; TraceFileError if it is not one or is cut short."""
    path = Path(path)
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise TraceFileError(f"{path}: not an adaptcoll trace file (bad magic bytes)")
    out = RankTrace(path)
    events: list[np.ndarray] = []
    operations: list[np.ndarray] = []
    pos = len(MAGIC)
    while pos < len(data):
        if pos + _CHUNK.size > len(data):
            raise TraceFileError(f"{path}: truncated chunk header at byte {pos}")
        kind, length = _CHUNK.unpack_from(data, pos)
        pos += _CHUNK.size
        if pos + length > len(data):
            raise TraceFileError(f"{path}: truncated {kind!r} chunk at byte {pos}")
        payload = data[pos : pos + length]
        pos += length
        if kind == b"E":
            events.append(_records(path, payload, EVENT))
        elif kind == b"O":
            operations.append(_records(path, payload, OPERATION))
        elif kind == b"M":
            _add_metadata(out, json.loads(payload.decode()))
        else:
            raise TraceFileError(f"{path}: unknown chunk type {kind!r} at byte {pos - length - _CHUNK.size}")
    if "world_rank" not in out.process:
        raise TraceFileError(f"{path}: no process metadata")
    if events:
        out.events = np.concatenate(events)
    if operations:
        out.operations = np.concatenate(operations)
    return out


def _records(path: Path, payload: bytes, dtype: np.dtype) -> np.ndarray:
    if len(payload) % dtype.itemsize:
        raise TraceFileError(
            f"{path}: a record chunk of {len(payload)} bytes is not whole {dtype.itemsize}-byte records"
        )
    return np.frombuffer(payload, dtype=dtype)


def _add_metadata(out: RankTrace, meta: dict[str, Any]) -> None:
    out.process.update(meta.get("process", {}))
    out.comms.extend(meta.get("comms", []))
    out.names.extend(meta.get("names", []))
    out.dropped = int(meta.get("dropped", out.dropped))
