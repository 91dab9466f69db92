"""The configuration of one Allgather / Reduce_scatter(_block) call, from the communicator's tuning and
the settings over it (no MPI here).

Their only served algorithm is the ring (`adaptcoll.protocols.blockring`); what is chosen per call is
whether to serve it and its segmenting. Explicit settings win: `ADAPTCOLL_ALLGATHER_ALGORITHM` /
`_REDUCE_SCATTER_ALGORITHM` (`ring`, `ring:segment_size=1M,max_segments=0`, or `native`) and the
thresholds (`ADAPTCOLL_ALLGATHER_NATIVE_BELOW`, `_REDUCE_SCATTER_`, or `NATIVE_BELOW` alone). Else the
communicator's size bands (`CommTuning.band`): a tuning table's entries for `allgather` /
`reduce_scatter` where it has them, else the shipped rule (`defaults.BLOCK_RULE`), as for the other
collectives. The message size is the whole array: the Allgather's result, the Reduce-scatter's input.
"""

from __future__ import annotations

from ..runtime import settings
from ..runtime.native import ALGORITHM_NATIVE, BELOW_THRESHOLD, Native
from .config import CallConfig, format_bytes
from .defaults import RING, bands_of
from .policy import TUNED_NATIVE, CommFacts, CommTuning

__all__ = ["choose_block", "block_below", "describe_blocks"]


def block_below(tuning: CommTuning, collective: str) -> int:
    """Messages below this many bytes go native (the small-message fast path's threshold)."""
    return tuning.native_below(collective, settings.current())


def choose_block(tuning: CommTuning, collective: str, nbytes: int) -> CallConfig:
    """The configuration of one call of `collective` ('allgather' or 'reduce_scatter') on `nbytes` bytes.

    Served with the band's configuration (the table's best measured, or the rule's); an explicit
    threshold serves with the table's configuration for that size, or under the shipped rule with `RING`;
    the algorithm setting's `segment_size` / `max_segments` win over both."""
    s = settings.current()
    algorithm = s.algorithm(collective)
    explicit_alg = s.is_explicit(f"{collective}_algorithm")
    explicit_thr = s.threshold_explicit(collective)
    _, band, below = tuning.band(collective, nbytes)
    tuned = tuning.sources[(collective, "host")]
    config = band.config
    native: Native | None = None
    if algorithm == "native":
        serve, native = False, ALGORITHM_NATIVE
    elif explicit_thr:
        serve = nbytes >= s.threshold(collective)
        native = None if serve else BELOW_THRESHOLD
        if not tuned.startswith("table"):
            config = RING
    else:
        serve = band.serve
        if not serve:
            native = BELOW_THRESHOLD if below else TUNED_NATIVE
    _, params = settings.block_algorithm(algorithm if algorithm != "native" else "ring")
    segment = params.get("segment_size", config.segment_size)
    cap = params.get("max_segments", config.max_segments)
    source = "settings" if explicit_alg and explicit_thr else f"{tuned}+settings" if explicit_alg else tuned
    send_window, recv_window = s.windows(collective)
    label = f"ring seg={format_bytes(segment)} max_segments={cap} [{source}]"
    return CallConfig(
        serve, "ring", segment, cap, 0, send_window, recv_window, s.sync_sends, s.reproducible, source, native, label
    )


def describe_blocks(facts: CommFacts) -> str:
    """One line per collective: what the shipped rule serves on this communicator."""
    lines = []
    for coll in settings.BLOCK_COLLECTIVES:
        served = [b for b in bands_of(coll, facts) if b.serve]
        text = "; ".join(f"from {b.start >> 10}K {b.config.label()}" for b in served) or "always native"
        lines.append(f"  {coll:<14} {text}")
    return "\n".join(lines)
