"""Layer 2, the forms: how a collective is called. Blocking and nonblocking buffer collectives with the
small-message fast path (`collectives`), Allgather and Reduce-scatter (`blocks`), persistent `*_init`
(`persistent`), the lower-case object collectives (`pickled`), the requests they return (`requests`),
the one-collective-per-communicator guard (`threads`), the fast path's sizing of host specifications
(`spec_size`) and the grouped Allreduce of many arrays (`grouped/`).

May import: the decision (`adaptcoll.decision`, `adaptcoll.tune`) and every layer below it. Imported
by the API (`adaptcoll.comm`) only.
"""

from __future__ import annotations

__all__: list[str] = []
