"""Layer 6, the runtime: what exists once per process. The engine (`engine`: one per process,
`Testsome` over the live requests, callbacks, polls, `sched_yield` when idle, the MPI transport, error
notices and the watchdog), the transport interface the protocols talk to (`transport`), the in-process
loopback transport of the tests (`loopback`), the settings (`settings`: `ADAPTCOLL_*`, `configure`),
the counters behind `adaptcoll.stats()` (`counters`) and the typed outcome they count when a call goes
to MPI (`native`).

May import: the plans and the backends only.
"""

from __future__ import annotations

__all__: list[str] = []
