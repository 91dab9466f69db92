"""The configuration of one Allgather / Reduce_scatter(_block) call: the shipped rule for these
collectives and the settings over it (no MPI here).

Their only served algorithm is the ring (`adaptcoll.protocols.blockring`); what is chosen per call is
whether to serve it and its segmenting. Explicit settings win: `ADAPTCOLL_ALLGATHER_ALGORITHM` /
`_REDUCE_SCATTER_ALGORITHM` (`ring`, `ring:segment_size=1M,max_segments=0`, or `native`) and the
thresholds (`ADAPTCOLL_ALLGATHER_NATIVE_BELOW`, `_REDUCE_SCATTER_`, or `NATIVE_BELOW` alone). Else the
shipped rule below, by the communicator's case (`defaults.case`): served only where an interleaved
benchmark against native MPI measured a win (bench/blocks.py, bench/results/blocks_2ranks.md);
native everywhere else. The message size is the whole array: the Allgather's result, the
Reduce-scatter's input (every block).
"""

from __future__ import annotations

from .. import settings
from ..native import ALGORITHM_NATIVE, BELOW_THRESHOLD, Native
from .config import CallConfig, ServeConfig, format_bytes
from .defaults import case
from .policy import NEVER, TUNED_NATIVE, CommFacts

__all__ = ["RING", "WHOLE_BLOCKS", "BLOCK_RULE", "choose_block", "block_below", "describe_blocks"]

K, M = 1 << 10, 1 << 20

RING = ServeConfig("ring", 4 * M, 0, 0)
"""The ring, 4M segments, no cap: what an explicit threshold serves with unless the algorithm setting
gives `segment_size` / `max_segments` (the ring allreduce's defaults)."""
WHOLE_BLOCKS = ServeConfig("ring", 32 * M, 0, 0)
"""The ring, 32M segments: one segment per block up to 64 MiB at 2 ranks (measured best there: the
local copy overlaps the one exchange, the fold waits for nothing else)."""

BLOCK_RULE: dict[str, dict[str, tuple[tuple[int, ServeConfig], ...]]] = {
    "2 ranks": {"allgather": (), "reduce_scatter": ((4 * M, WHOLE_BLOCKS),)},
}
"""Case -> collective -> served size bands (start, config); a case or collective not listed: native.
2 ranks, MPICH 5.0.2, one core each (bench/results/blocks_2ranks.md): Reduce_scatter_block wins from
4 MiB (1.1-1.3x at 4M, about 3x at 16M and 4x at 64M, where MPICH's is slow) and loses below (0.6 at
1M); the Allgather ring only breaks even from 16M (0.93-1.10 over runs) and loses below (0.6-0.8), so
it stays native. Nothing else was measured: native."""


def _bands(collective: str, facts: CommFacts) -> tuple[tuple[int, ServeConfig], ...]:
    return BLOCK_RULE.get(case(facts.size, facts.ranks_per_core, facts.mpi_library), {}).get(collective, ())


def block_below(facts: CommFacts, collective: str) -> int:
    """Messages below this many bytes go native (the small-message fast path's threshold)."""
    s = settings.current()
    if s.threshold_explicit(collective):
        return s.threshold(collective)
    bands = _bands(collective, facts)
    return bands[0][0] if bands else NEVER


def choose_block(facts: CommFacts, collective: str, nbytes: int) -> CallConfig:
    """The configuration of one call of `collective` ('allgather' or 'reduce_scatter') on `nbytes` bytes."""
    s = settings.current()
    algorithm = s.algorithm(collective)
    explicit_alg = s.is_explicit(f"{collective}_algorithm")
    explicit_thr = s.threshold_explicit(collective)
    config = RING
    native: Native | None = None
    if algorithm == "native":
        serve, native = False, ALGORITHM_NATIVE
    elif explicit_thr:
        serve = nbytes >= s.threshold(collective)
        native = None if serve else BELOW_THRESHOLD
    else:
        bands = _bands(collective, facts)
        found = [c for start, c in bands if nbytes >= start]
        serve = bool(found)
        if found:
            config = found[-1]
        else:
            native = BELOW_THRESHOLD if not bands or nbytes < bands[0][0] else TUNED_NATIVE
    _, params = settings.block_algorithm(algorithm if algorithm != "native" else "ring")
    segment = params.get("segment_size", config.segment_size)
    cap = params.get("max_segments", config.max_segments)
    source = "settings" if explicit_alg and explicit_thr else "defaults+settings" if explicit_alg else "defaults"
    send_window, recv_window = s.windows(collective)
    label = f"ring seg={format_bytes(segment)} max_segments={cap} [{source}]"
    return CallConfig(
        serve, "ring", segment, cap, 0, send_window, recv_window, s.sync_sends, s.reproducible, source, native, label
    )


def describe_blocks(facts: CommFacts) -> str:
    """One line per collective: what the rule serves on this communicator."""
    lines = []
    for coll in settings.BLOCK_COLLECTIVES:
        bands = _bands(coll, facts)
        text = "; ".join(f"from {start >> 10}K {c.label()}" for start, c in bands) or "always native"
        lines.append(f"  {coll:<14} {text}")
    return "\n".join(lines)
