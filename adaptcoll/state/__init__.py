"""Layer 4, per-communicator state: what adaptcoll keeps for one communicator, made on its first
collective and freed with it. `comm_state` (`CommState`: the private duplicate, the set-up steps the
engine advances, tags, pools, trees, tuning, device context), `discovery` (the topology set-up step)
and `shm` (the node level's groups and shared-memory window).

May import: the decision's inputs (`adaptcoll.tune`'s policy modules, `adaptcoll.device`), the
protocols, the runtime, the plans and the backends. Never the decision or the forms.
"""

from __future__ import annotations

__all__: list[str] = []
