"""What a simulated call runs: the job's explicit segment and the settings, or what the shipped rule
chooses for that call (no MPI here).

A real call without a tuning table asks `adaptcoll.tune` for its configuration: the shipped rule's size
bands for the communicator's facts (ranks, nodes, ranks per node), with explicit settings winning field
by field. `choose` asks the same code with the facts of the simulated cluster (one rank per core, the
MPI library MPICH), so `--segment` can be left out and the simulation runs what a user would get.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from ..plans import topology as topology_mod
from ..runtime import settings as settings_mod
from ..tune.blocks import choose_block
from ..tune.defaults import case_of
from ..tune.policy import CommFacts, placed_facts, resolve

__all__ = ["Choice", "choose", "rule_facts", "simulates_compiled"]


@dataclass(frozen=True)
class Choice:
    """The configuration one simulated call runs, and where it came from.

    `serve`: the library would serve the call (False: it would hand it to native MPI, and the simulator
    still runs the protocol of the nearest served band so that it can be compared). `source`: 'segment'
    (the job's explicit segment and the settings) or "rule, case '...'" (the shipped rule)."""

    algorithm: str
    segment: int
    max_segments: int
    roots: int
    serve: bool
    source: str

    def label(self) -> str:
        """e.g. "two_tree seg=256K max_segments=0 (rule, case '1K+ ranks')"."""
        seg = f"{self.segment >> 10}K" if self.segment % 1024 == 0 else str(self.segment)
        text = f"{self.algorithm} seg={seg} max_segments={self.max_segments}"
        if not self.serve:
            text += ", but the library would go native at this size"
        return f"{text} ({self.source})"


def rule_facts(size: int, ranks_per_node: int, compiled: bool = False, topology: str = "") -> CommFacts:
    """The facts of a simulated communicator: `size` ranks, `ranks_per_node` per node, a core each;
    `compiled`: every rank runs the compiled progress path (the rule's compiled bands). With one rank per
    node in the parameters, a declared `topology` (settings.topology: a described network's node spec, or
    `nodes=...`) says how the ranks sit on nodes instead (its first level), as the hosts would tell the
    library's tuning exchange: 512 nodes of 8 behind two NICs are 8 ranks per node, not 4096 nodes."""
    rpn = max(1, min(ranks_per_node, size))
    if rpn == 1 and topology:
        placed = topology_mod.parse(topology, size)
        if placed.names:
            node = placed.levels[0]  # each rank's node
            cores = collections.Counter(node)  # a core per rank
            return placed_facts(node, [cores[k] for k in node], "MPICH", compiled)
    return CommFacts(size, -(-size // rpn), rpn, 1.0, "MPICH", compiled)


def simulates_compiled(cfg: settings_mod.Settings) -> bool:
    """Whether the simulated call asks the rule for the compiled engine's bands: ADAPTCOLL_ENGINE=compiled
    (the simulator charges whatever CPU costs its parameters give; pair it with a compiled engine's
    parameters file, e.g. bench/results/simulate/params_scale_compiled.json)."""
    return cfg.engine == "compiled"


def choose(
    collective: str, size: int, nbytes: int, segment: int, cfg: settings_mod.Settings, ranks_per_node: int = 1
) -> Choice:
    """The configuration of one call: explicit `segment` (> 0) with the settings, else the shipped rule's.
    Allgather / Reduce_scatter_block: the ring, as adaptcoll.tune.blocks chooses it."""
    if collective in ("allgather", "reduce_scatter_block"):
        return _choose_block(collective, size, nbytes, segment, cfg, ranks_per_node)
    if segment > 0:
        return Choice(
            cfg.algorithm(collective),
            segment,
            cfg.max_segments,
            cfg.allreduce_roots if collective == "allreduce" else 0,
            nbytes >= cfg.threshold(collective),
            "segment",
        )
    facts = rule_facts(size, ranks_per_node, simulates_compiled(cfg), cfg.topology)
    previous = settings_mod.use(cfg)
    try:
        call = resolve(b"", "", facts, warn=False).choose(collective, nbytes)
    finally:
        settings_mod.use(previous)
    name = case_of(facts) + (", compiled engine" if facts.compiled else "")
    return Choice(call.algorithm, call.segment_size, call.max_segments, call.roots, call.serve, f"rule, case '{name}'")


def _choose_block(
    collective: str, size: int, nbytes: int, segment: int, cfg: settings_mod.Settings, ranks_per_node: int
) -> Choice:
    name = "allgather" if collective == "allgather" else "reduce_scatter"
    facts = rule_facts(size, ranks_per_node, simulates_compiled(cfg), cfg.topology)
    previous = settings_mod.use(cfg)
    try:
        call = choose_block(resolve(b"", "", facts, warn=False), name, nbytes)
    finally:
        settings_mod.use(previous)
    if segment > 0:
        return Choice("ring", segment, 0, 0, nbytes >= cfg.threshold(name), "segment")
    rule = case_of(facts)
    return Choice("ring", call.segment_size, call.max_segments, 0, call.serve, f"rule, case '{rule}'")
