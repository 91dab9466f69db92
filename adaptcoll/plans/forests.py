"""The `forest:FILE` algorithm setting: a schedule file (adaptcoll.plans.schedule_file) loaded once per
process, checked against the communicator, and the trees a call runs on it.

Bcast and Reduce with root r run the forest rooted at r; Allreduce runs every forest of the schedule at
once (each forest an equal part of the segments), reducing up and broadcasting down the same trees.
Segments are dealt to a forest's trees in proportion to their weights (adaptcoll.protocols.links).
"""

from __future__ import annotations

import functools
from typing import Optional

from . import schedule_file as schedule_file
from .schedule_file import Schedule, ScheduleError
from .trees import Tree

__all__ = [
    "KIND",
    "is_forest",
    "path_of",
    "segment_cap",
    "load",
    "schedule",
    "has_root",
    "root_trees",
    "allreduce_trees",
]

KIND = "forest"
"""The algorithm name: `forest:PATH` (everything after the colon is the path, as written)."""


def is_forest(algorithm: str) -> bool:
    """Whether an algorithm setting names a schedule file (`forest:PATH`)."""
    return algorithm.partition(":")[0].strip() == KIND


def path_of(algorithm: str) -> str:
    """The schedule file of a `forest:PATH` setting (ScheduleError if there is none)."""
    path = algorithm.partition(":")[2].strip()
    if not path:
        raise ScheduleError(
            f"forest needs a schedule file, written forest:PATH (e.g. forest:bcast.json), got {algorithm!r}"
        )
    return path


def segment_cap(algorithm: str, cap: int, cap_explicit: bool) -> int:
    """The segment cap of a call: none (0) for a forest set explicitly without an explicit
    ADAPTCOLL_MAX_SEGMENTS (its weights need segments to deal: 4 segments deal 0.9 / 0.1 as 4 : 0),
    as the ring has its own; otherwise `cap` (the table's or the rule's, or the explicit one)."""
    return 0 if is_forest(algorithm) and not cap_explicit else cap


@functools.lru_cache(maxsize=16)
def load(path: str) -> Schedule:
    """The schedule in file `path`, read and validated once per process (ScheduleError if it cannot be
    read or is not a valid schedule; every rank reading the same file raises the same message)."""
    try:
        return schedule_file.load(path)
    except OSError as exc:
        raise ScheduleError(f"schedule {path}: cannot read it ({exc.strerror or exc})") from None
    except ScheduleError as exc:  # every message names the file the same way
        why = str(exc).removeprefix("schedule: ").removeprefix(f"{path}: ")
        raise ScheduleError(f"schedule {path}: {why}") from None


def schedule(algorithm: str, size: int) -> Schedule:
    """The schedule of a `forest:PATH` setting, checked to be for `size` ranks (ScheduleError if not)."""
    path = path_of(algorithm)
    found = load(path)
    if found.ranks != size:
        raise ScheduleError(
            f"schedule {path} is for {found.ranks} ranks but the communicator has {size} "
            f"(make one for {size} ranks, e.g. python -m adaptcoll.schedule)"
        )
    return found


def has_root(algorithm: str, size: int, root: int) -> bool:
    """Whether the schedule holds a forest rooted at `root`."""
    return any(f.root == root for f in schedule(algorithm, size).forests)


def _rank_ordered(trees: tuple[Tree, ...]) -> bool:
    return all(t.is_rank_ordered() for t in trees)


def root_trees(algorithm: str, size: int, root: int, rank_ordered: bool = False) -> Optional[tuple[Tree, ...]]:
    """The trees of the forest rooted at `root` (ScheduleError if the schedule has none). `rank_ordered`
    (a non-commutative op): None unless every tree folds in rank order (then the caller runs the
    library's rank-ordered tree instead)."""
    found = schedule(algorithm, size).forest(root).tree_set(path_of(algorithm))
    return None if rank_ordered and not _rank_ordered(found) else found


def allreduce_trees(algorithm: str, size: int, rank_ordered: bool = False) -> Optional[tuple[Tree, ...]]:
    """Allreduce's trees: every forest of the schedule, in file order (links.tree_weights gives each
    forest an equal part). `rank_ordered`: the forest rooted at 0 alone if all its trees fold in rank
    order, else None."""
    found = schedule(algorithm, size)
    if rank_ordered:
        zero = [f for f in found.forests if f.root == 0]
        return root_trees(algorithm, size, 0, True) if zero else None
    path = path_of(algorithm)
    return tuple(t for f in found.forests for t in f.tree_set(path))
