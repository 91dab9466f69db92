"""The error paths of the check: bad input must raise the error mpi4py raises for it, on every rank
(same type and message where the input is the same everywhere), and counts that differ across ranks
must make the ranks raise adaptcoll.MessageSizeError or complete, never hang or return wrong data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .cases import SEGMENT_BYTES

__all__ = ["MisuseResult", "run_misuse", "OVERFLOW_NOTE"]

OVERFLOW_NOTE = (
    "not run under Open MPI: its ob1 rendezvous and single-copy paths write a message longer than the posted "
    "receive past the receive buffer (5.0.11 measured: a 64 KiB message into a 1 KiB receive wrote 63 KiB "
    "beyond it, then MPI_ERR_TRUNCATE), so counts that differ across ranks corrupt memory there, natively "
    "and under adaptcoll alike (docs/errors.md)"
)

_SERVED = {
    "native_below": 0,
    "bcast_native_below": 0,
    "reduce_native_below": 0,
    "allreduce_native_below": 0,
    "bcast_segment_size": SEGMENT_BYTES,
    "reduce_segment_size": SEGMENT_BYTES,
    "allreduce_segment_size": SEGMENT_BYTES,
}


@dataclass
class MisuseResult:
    """One error path: what was expected, what each rank did, and whether that is right."""

    name: str
    expected: str
    passed: bool
    outcomes: list[str]
    skipped: Optional[str] = None  # why it was not run (it passes then)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "expected": self.expected,
            "passed": self.passed,
            "outcomes": self.outcomes,
            "skipped": self.skipped,
        }


def _outcome(call: Callable[[], Any]) -> str:
    """'completed', or 'Type: message' of what the call raised (an MPI error: its error class's string,
    since MPI's own messages name addresses and handles that differ between ranks)."""
    try:
        call()
    except Exception as exc:
        error_class = getattr(exc, "Get_error_class", None)
        if error_class is not None:
            from mpi4py import MPI

            return f"{type(exc).__name__}: {MPI.Get_error_string(error_class())}"
        return f"{type(exc).__name__}: {exc}"
    return "completed"


def _same_input(name: str, world: Any, comm: Any, call: Callable[[Any], Any]) -> MisuseResult:
    """Input that is bad on every rank alike: adaptcoll must raise what mpi4py raises (type), with one
    message on all ranks."""
    native = _outcome(lambda: call(world))
    got = _outcome(lambda: call(comm))
    outcomes = world.allgather(got)
    natives = world.allgather(native)
    want = natives[0].partition(":")[0]
    passed = all(o.partition(":")[0] == want for o in outcomes) and len(set(outcomes)) == 1 and want != "completed"
    return MisuseResult(name, f"{want} on every rank (as mpi4py), one message", passed, outcomes)


def run_misuse(world: Any, MPI: Any, adaptcoll: Any) -> list[MisuseResult]:
    """Every error path of the check (collective: all ranks call it)."""
    rank, size = world.Get_rank(), world.Get_size()
    out: list[MisuseResult] = []
    comm = adaptcoll.Intracomm(world.Dup())
    try:
        with adaptcoll.configured(**_SERVED):
            a, b = np.ones(4096, "f4"), np.zeros(4096, "f4")
            out.append(_same_input("Allreduce with op='sum'", world, comm, lambda c: c.Allreduce(a, b, op="sum")))
            out.append(_same_input("Bcast with root = size", world, comm, lambda c: c.Bcast(a, size)))
            out.append(
                _same_input(
                    "Allreduce, send 4096 / receive 1000 floats", world, comm, lambda c: c.Allreduce(a, b[:1000])
                )
            )
            frozen = np.zeros(4096, "f4")
            frozen.flags.writeable = False
            out.append(_same_input("Allreduce into a read-only buffer", world, comm, lambda c: c.Allreduce(a, frozen)))
            out.append(
                _same_input(
                    "Reduce with a non-contiguous send buffer",
                    world,
                    comm,
                    lambda c: c.Reduce(np.ones(8192, "f4")[::2], b if rank == 0 else None, MPI.SUM, 0),
                )
            )
        out.extend(_differing_counts(world, MPI, adaptcoll))
    finally:
        comm.Free()
    return out


def _differing_counts(world: Any, MPI: Any, adaptcoll: Any) -> list[MisuseResult]:
    """1000 elements on rank 0, 2000 elsewhere (served, small segments): each rank raises
    MessageSizeError or completes, at least one raises, nobody hangs; a fresh call then works."""
    rank, size = world.Get_rank(), world.Get_size()
    n = 1000 if rank == 0 else 2000
    out: list[MisuseResult] = []
    if size < 2:
        return out
    calls: dict[str, Callable[[Any], Any]] = {
        "Bcast": lambda c: c.Bcast(np.zeros(n), 0),
        "Reduce": lambda c: c.Reduce(np.ones(n), np.zeros(n), MPI.SUM, 0),
        "Allreduce": lambda c: c.Allreduce(np.ones(n), np.zeros(n)),
        "Iallreduce": lambda c: c.Iallreduce(np.ones(n), np.zeros(n)).Wait(),
    }
    library = MPI.Get_library_version()
    for name, call in calls.items():
        if library.startswith("Open MPI"):
            out.append(MisuseResult(f"{name}: 1000 elements on rank 0, 2000 elsewhere", "", True, [], OVERFLOW_NOTE))
            continue
        comm = adaptcoll.Intracomm(world.Dup())
        try:
            with adaptcoll.configured(**_SERVED):
                got = _outcome(lambda: call(comm))  # noqa: B023 - called at once
                outcomes = world.allgather(got)
                collective = name[1:].capitalize() if name.startswith("I") else name
                right = all(
                    o == "completed" or o.startswith(f"MessageSizeError: adaptcoll {collective}") for o in outcomes
                )
                raised = any(o != "completed" for o in outcomes)
                after: Optional[str] = _outcome(lambda: _fresh_call(world, MPI, adaptcoll))
                afters = world.allgather(after)
                fine = all(x == "completed" for x in afters)
            out.append(
                MisuseResult(
                    f"{name}: 1000 elements on rank 0, 2000 elsewhere",
                    "MessageSizeError or completion on each rank, at least one raises, then a new call works",
                    right and raised and fine,
                    outcomes + ([] if fine else [f"next call: {x}" for x in afters]),
                )
            )
        finally:
            comm.Free()
    return out


def _fresh_call(world: Any, MPI: Any, adaptcoll: Any) -> None:
    """A correct served Allreduce on a new communicator must still give the right answer."""
    comm = adaptcoll.Intracomm(world.Dup())
    try:
        out = np.zeros(5000)
        comm.Allreduce(np.ones(5000), out, MPI.SUM)
        if not (out == world.Get_size()).all():
            raise AssertionError("wrong result after a mismatch")
    finally:
        comm.Free()
