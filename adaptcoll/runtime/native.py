"""The typed "hand this call to native MPI" value, and the reasons adaptcoll counts in `stats()`.

Buffer parsing and the decision layer return either something adaptcoll serves or a `Native`. Its
`kind` says what the caller does with it: call the native collective (UNSERVED, INVALID: native MPI
then raises mpi4py's own error), treat the buffer as device memory (DEVICE), or report a bad buffer
(BAD_BUFFER: non-contiguous or read-only, which mpi4py rejects with BufferError). `error`, when set,
is raised instead of calling native MPI.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from .counters import BELOW_THRESHOLD_REASON

__all__ = [
    "Kind",
    "Native",
    "ALGORITHM_NATIVE",
    "BELOW_THRESHOLD",
    "INVALID_ARGUMENTS",
    "DEVICE_MEMORY",
    "OP_NOT_SERVED",
    "OP_TYPE_NOT_SERVED",
    "USER_OP_DERIVED",
]


class Kind(enum.Enum):
    """What a Native value asks of its caller (see the module docstring)."""

    UNSERVED = "unserved"
    INVALID = "invalid"
    BAD_BUFFER = "bad buffer"
    DEVICE = "device"


@dataclass(frozen=True)
class Native:
    """Go native because of `reason` (counted in stats() under that text); see Kind and `error`.
    `note`: a remark counted with the call in stats() (e.g. what memory its buffers were)."""

    reason: str
    kind: Kind = Kind.UNSERVED
    error: Optional[BaseException] = None
    note: Optional[str] = None


ALGORITHM_NATIVE = Native("algorithm=native")
BELOW_THRESHOLD = Native(BELOW_THRESHOLD_REASON)
INVALID_ARGUMENTS = Native("invalid arguments", Kind.INVALID)
DEVICE_MEMORY = Native("device memory", Kind.DEVICE)
OP_NOT_SERVED = Native("op not served")
OP_TYPE_NOT_SERVED = Native("op/type not served")
USER_OP_DERIVED = Native("user op on a derived datatype")
