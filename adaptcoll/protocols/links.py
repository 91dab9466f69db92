"""How one operation becomes one protocol per tree link (`adaptcoll.plans.dealing`: a rank's place in
each tree and the segments dealt to it). No MPI here, so the simulator and the tests use exactly what
the library runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from ..plans.dealing import Link
from ..runtime.transport import Callback
from .operation import Operation
from .pieces import Join

__all__ = ["StartOne", "start_on_links", "run_all"]

StartOne = Callable[[Link, Callback], None]
"""Starts this rank's protocol on one link; calls the callback once that protocol is done."""


def start_on_links(
    links: Sequence[Link],
    keep: object,
    start_one: StartOne,
    finish: Optional[Callback] = None,
    operation: Optional[Operation] = None,
) -> Operation:
    """Start one protocol per tree link and join them into one Operation (which keeps `keep` alive).

    `finish()`, if given, runs once every protocol is done and before the Operation completes (it
    writes scratch results back into the user's buffers); the Operation completes even if it raises.
    `operation`: the one to complete (made here if not given).
    """
    if operation is None:
        operation = Operation(keep=keep)
    done: Callback = operation.complete
    if finish is not None:
        complete = operation.complete

        def finished() -> None:
            try:
                finish()
            finally:
                complete()

        done = finished
    join = Join(len(links), done)
    for link in links:
        start_one(link, join.part_done)
    join.start()
    return operation


def run_all(steps: Sequence[Callback]) -> Optional[Callback]:
    """One callback running `steps` in order (None if there are none): e.g. `start_on_links`'s `finish`."""
    if not steps:
        return None

    def run() -> None:
        for step in steps:
            step()

    return run
