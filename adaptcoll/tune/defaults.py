"""The shipped rule: what adaptcoll chooses without a tuning table, by communicator size and ranks per
core (no MPI here). Each case is a list of size bands: below the first band's start, native MPI.

Where the numbers come from (ratio native/adaptcoll, > 1 = adaptcoll faster; docs/tuning.md has the
full derivation):
- ranks share cores (ranks per core > 1): the 2-core development machine at 4 ranks (bench/RESULTS.md):
  Reduce wins from 256 KiB (1.14 at 1 MiB), Allreduce from 4 MiB (1.06; 1 MiB 0.56 served), Bcast only
  clearly from 4 MiB (1 MiB 0.97-0.98) -> native below 256K / 2M / 2M, shipped trees and segments;
- a core per rank, 2 ranks: the development machine at 2 ranks: Bcast loses at 1, 4 and 64 MiB (0.72,
  0.85, 0.92) -> always native; Reduce wins from 1 MiB (1.62), Allreduce from 4 MiB (1.34);
- a core per rank, 3-16+ ranks: the 16-core node (measurements/16core-2026-11-23: osu_dataset_n4/n8/n16,
  osu16_variants, peers16_ompi_*): at 4 ranks Bcast/Allreduce win from 4 MiB with the shipped
  configuration (1.08/1.23), Reduce from 4 MiB with pipeline trees and no segment cap (1.10, 16M 1.51);
  at 8 ranks Bcast from 1 MiB with 256K segments and no cap (1.12), Reduce and Allreduce from 4 MiB
  with pipeline trees and no cap (1.07 / 1.24); at 16 ranks Reduce only from 16 MiB (pipeline, no cap:
  1.62; 4 MiB 1.02), Bcast from 4 MiB with 256K segments (1.28) and from 16 MiB with 16 segments (1.45,
  and 1.16/1.46 against Open MPI's tuned/adapt), Allreduce only from 16 MiB with 16 segments (1.45;
  Open MPI 1.31/1.31) - the shipped Allreduce loses there (0.80-0.93).
"""

from __future__ import annotations

from .config import ServeConfig
from .table import Band

__all__ = ["SHIPPED", "FINE", "PIPELINE", "SIXTEEN", "case", "default_bands", "describe"]

K, M = 1 << 10, 1 << 20

SHIPPED = ServeConfig("binomial", 512 * K, 4, 0)
"""binomial trees, 512K segments, at most 4 per message, Allreduce rooted at every rank."""
FINE = ServeConfig("binomial", 256 * K, 0, 0)
"""binomial trees, 256K segments, no cap on their number."""
PIPELINE = ServeConfig("pipeline", 512 * K, 0, 0)
"""pipeline (chain) trees, 512K segments, no cap."""
SIXTEEN = ServeConfig("binomial", 512 * K, 16, 0)
"""binomial trees, 512K segments, at most 16 per message."""

_Rule = dict[str, tuple[tuple[int, ServeConfig], ...]]

_SHARED_CORES: _Rule = {
    "bcast": ((2 * M, SHIPPED),),
    "reduce": ((256 * K, SHIPPED),),
    "allreduce": ((2 * M, SHIPPED),),
}
_TWO: _Rule = {"bcast": (), "reduce": ((1 * M, SHIPPED),), "allreduce": ((4 * M, SHIPPED),)}
_FOUR: _Rule = {
    "bcast": ((4 * M, SHIPPED),),
    "reduce": ((4 * M, PIPELINE),),
    "allreduce": ((4 * M, SHIPPED),),
}
_EIGHT: _Rule = {
    "bcast": ((1 * M, FINE),),
    "reduce": ((4 * M, PIPELINE),),
    "allreduce": ((4 * M, PIPELINE),),
}
_MANY: _Rule = {
    "bcast": ((4 * M, FINE), (8 * M, SIXTEEN)),
    "reduce": ((8 * M, PIPELINE),),
    "allreduce": ((8 * M, SIXTEEN),),
}


def case(comm_size: int, ranks_per_core: float) -> str:
    """Which case of the rule applies: 'shared cores', '2 ranks', '3-4 ranks', '5-8 ranks', '9+ ranks'."""
    if ranks_per_core > 1.0:
        return "shared cores"
    if comm_size <= 2:
        return "2 ranks"
    if comm_size <= 4:
        return "3-4 ranks"
    if comm_size <= 8:
        return "5-8 ranks"
    return "9+ ranks"


_CASES: dict[str, _Rule] = {
    "shared cores": _SHARED_CORES,
    "2 ranks": _TWO,
    "3-4 ranks": _FOUR,
    "5-8 ranks": _EIGHT,
    "9+ ranks": _MANY,
}


def default_bands(collective: str, comm_size: int, ranks_per_core: float) -> tuple[Band, ...]:
    """The shipped rule's size bands for a collective: native below the first start, then each config."""
    served = _CASES[case(comm_size, ranks_per_core)][collective]
    first = served[0][1] if served else SHIPPED
    out = [Band(0, False, first)]
    out.extend(Band(start, True, config) for start, config in served)
    return tuple(out)


def describe(comm_size: int, ranks_per_core: float) -> str:
    """One line per collective: the rule's choice for this communicator (for `show` and docs)."""
    name = case(comm_size, ranks_per_core)
    lines = [f"shipped rule, case '{name}' ({comm_size} ranks, {ranks_per_core:g} ranks per core):"]
    for coll, served in _CASES[name].items():
        parts = [f"from {b >> 10}K {c.label(coll)}" if b < M else f"from {b >> 20}M {c.label(coll)}" for b, c in served]
        lines.append(f"  {coll:<10} native below the first band; " + ("; ".join(parts) if parts else "always native"))
    return "\n".join(lines)
