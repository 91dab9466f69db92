"""Layer 3, the decision: one call's arguments -> a prepared operation of adaptcoll's protocols, or a
typed `Native` (hand the call to mpi4py unchanged). Every form asks here, so all decide alike, and the
decision uses only arguments MPI requires to match across ranks.

`decide` (Bcast, Reduce, Allreduce over trees, rings and recursive halving), `blocks` (Allgather and
Reduce-scatter on the ring), `node` (the shared-memory node level's share), `ops` (MPI ops to the
backends' `ReduceOp`s). Its inputs are the packages beside it: `adaptcoll.buffers` (host buffer
specifications), `adaptcoll.device` (device memory and its routes) and `adaptcoll.tune` (the
per-call configuration: settings, tuning table or shipped rule).

May import: the per-communicator state and every layer below it; `adaptcoll.trace`'s recorder, which
wraps an operation's transport and backend when tracing is on.
"""

from __future__ import annotations

__all__: list[str] = []
