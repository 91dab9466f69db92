"""Layer 5, the protocols: event-driven state machines that never import MPI. They react to events
(a segment arrived, a send finished, a fold finished) by calling the transport interface
(`adaptcoll.runtime.transport`) and an array backend, so the same code runs over MPI, the loopback
transport and the simulator. Tree Bcast/Reduce/Allreduce (`bcast`, `reduce`, `allreduce`), the
block-based Allreduces (`ring`, `rabenseifner` over `streams`, named in `algorithms`), the ring
Allgather and Reduce-scatter (`blockring`), the node level over shared slots (`slots`, `node`,
`hier`), one operation's context and completion (`context`, `operation`, `pieces`, `links`) and the
loopback slots of the tests (`loopback_slots`).

May import: the runtime's transport interface (and its loopback world, for the tests' slots), the
plans and the backends.
"""

from __future__ import annotations

__all__: list[str] = []
