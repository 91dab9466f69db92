"""Where ranks sit in the machine: per-level group ids (node, socket, NUMA), parsed or discovered.

A `Topology` feeds the hierarchical "topo" tree of `adaptcoll.trees`. It comes from the
ADAPTCOLL_TOPOLOGY setting (`parse`) or from MPI and the OS (`adaptcoll.state.discovery.discover`, the only
part that needs MPI). This module has the value, the parser and the OS lookups (sysfs), no MPI.
"""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass

__all__ = ["ENV_VAR", "Topology", "parse", "os_socket_id", "os_numa_id"]

ENV_VAR = "ADAPTCOLL_TOPOLOGY"
"""Environment variable that overrides discovery with a `parse` spec."""

_EXAMPLES = "e.g. 'nodes=4,sockets=2' (counts) or 'node=0,0,1,1;socket=0,1,0,1' (one id per rank)"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Topology:
    """Group ids per rank for each level, outermost first; a group at level i = ranks sharing ids 0..i."""

    levels: tuple[tuple[int, ...], ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        try:
            levels = tuple(tuple(operator.index(g) for g in level) for level in self.levels)
        except TypeError as exc:
            raise ValueError(f"Topology levels must hold int group ids: {exc}") from None
        names = tuple(str(n) for n in self.names)
        if len(names) != len(levels):
            raise ValueError(f"Topology has {len(levels)} levels but {len(names)} names")
        if len({len(level) for level in levels}) > 1:
            raise ValueError("Topology levels must all list one group id per rank (same length)")
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "_hash", hash((levels, names)))

    def __hash__(self) -> int:  # cached: trees.build hashes its params on every call
        return self._hash  # type: ignore[attr-defined]

    @property
    def size(self) -> int | None:
        """Number of ranks described, or None for a flat topology with no levels."""
        return len(self.levels[0]) if self.levels else None

    def group_key(self, rank: int, level: int) -> tuple[int, ...]:
        """The ids of `rank` at levels 0..level: equal keys = same group at that level."""
        return tuple(self.levels[i][rank] for i in range(level + 1))

    def groups(self, level: int) -> tuple[tuple[int, ...], ...]:
        """Ranks of every group at `level`, each ascending, groups ordered by lowest rank."""
        found: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.size or 0):
            found.setdefault(self.group_key(rank, level), []).append(rank)
        return tuple(tuple(g) for g in found.values())

    def spec(self) -> str:
        """An explicit spec that `parse` turns back into this topology."""
        return ";".join(f"{n}=" + ",".join(map(str, lv)) for n, lv in zip(self.names, self.levels)) or "flat"

    def __str__(self) -> str:
        counts = ", ".join(f"{len(self.groups(i))} {n}" for i, n in enumerate(self.names))
        return f"Topology({counts or 'flat'})"


def _bad(spec: str, why: str) -> ValueError:
    return ValueError(f"bad {ENV_VAR} topology spec {spec!r}: {why}; expected {_EXAMPLES}")


def check_spec(spec: str) -> None:
    """Check a spec's syntax before the communicator size is known (names, integers, counts >= 1,
    explicit id lists of one length): ValueError as `parse` gives it. Lengths are checked by `parse`."""
    if not isinstance(spec, str):
        raise _bad(repr(spec), "not a string")
    counts: list[int] = []  # values per level, tokenized as parse() does
    for token in re.split(r"[;,]", spec.strip()):
        if "=" in token or not counts:
            counts.append(1)
        else:
            counts[-1] += 1
    lengths = {n for n in counts if n > 1}
    if len(lengths) > 1:
        raise _bad(spec, f"explicit levels list different numbers of ids ({sorted(lengths)})")
    parse(spec, lengths.pop() if lengths else 64)


def _split_even(members: list[int], count: int) -> list[list[int]]:
    """`members` cut into min(count, len) consecutive parts whose sizes differ by at most 1 (larger first)."""
    parts = min(count, len(members))
    base, extra = divmod(len(members), parts)
    out, start = [], 0
    for i in range(parts):
        length = base + (1 if i < extra else 0)
        out.append(members[start : start + length])
        start += length
    return out


def parse(spec: str, size: int) -> Topology:
    """Parse a topology spec for `size` ranks: `name=COUNT` splits, `name=id,id,...` lists; levels by `,`/`;`.

    "nodes=4,sockets=2": consecutive ranks in 4 near-equal nodes, each cut into 2 near-equal sockets.
    "node=0,0,1,1,1;socket=0,1,0,0,1": explicit ids (exactly `size` of them). "" or "flat": no levels.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"topology size must be an int >= 1, got {size!r}")
    if not isinstance(spec, str):
        raise _bad(repr(spec), "not a string")
    text = spec.strip()
    if text.lower() in ("", "flat", "none"):
        return Topology((), ())
    raw: list[tuple[str, list[str]]] = []
    for token in re.split(r"[;,]", text):
        token = token.strip()
        if not token:
            raise _bad(spec, "empty item")
        if "=" in token:
            name, _, value = token.partition("=")
            name = name.strip()
            if not _NAME.match(name):
                raise _bad(spec, f"level name {name!r} is not an identifier")
            if any(name == n for n, _ in raw):
                raise _bad(spec, f"level {name!r} given twice")
            raw.append((name, [value.strip()]))
        elif not raw:
            raise _bad(spec, f"{token!r} comes before any 'name='")
        else:
            raw[-1][1].append(token)
    groups: list[list[int]] = [list(range(size))]
    levels: list[tuple[int, ...]] = []
    for name, values in raw:
        try:
            ints = [int(v) for v in values]
        except ValueError:
            raise _bad(spec, f"level {name!r} has a non-integer value in {values}") from None
        ids = [0] * size
        new_groups: list[list[int]] = []
        if len(ints) == 1 and not (size == 1 and ints[0] == 0):
            if ints[0] < 1:
                raise _bad(spec, f"level {name!r} needs a count >= 1, got {ints[0]}")
            for group in groups:
                for index, part in enumerate(_split_even(group, ints[0])):
                    for rank in part:
                        ids[rank] = index
                    new_groups.append(part)
        else:
            if len(ints) != size:
                raise _bad(spec, f"level {name!r} lists {len(ints)} ids but there are {size} ranks")
            if min(ints) < 0:
                raise _bad(spec, f"level {name!r} has a negative id")
            ids = ints
            for group in groups:
                split: dict[int, list[int]] = {}
                for rank in group:
                    split.setdefault(ids[rank], []).append(rank)
                new_groups.extend(split.values())
        groups = new_groups
        levels.append(tuple(ids))
    return Topology(tuple(levels), tuple(n for n, _ in raw))


# ---------------------------------------------------------------- OS lookups (sysfs)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _parse_cpulist(text: str) -> set[int]:
    """CPUs of a sysfs cpulist such as "0-3,8,10-11"."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def os_socket_id(cpus: set[int], sysfs: str = "/sys") -> int | None:
    """The physical package all of `cpus` belong to, or None if unknown or they span several."""
    ids = {_read_int(f"{sysfs}/devices/system/cpu/cpu{c}/topology/physical_package_id") for c in cpus}
    return ids.pop() if len(ids) == 1 and None not in ids else None


def os_numa_id(cpus: set[int], sysfs: str = "/sys") -> int | None:
    """The NUMA node all of `cpus` belong to, or None if unknown or they span several."""
    base = f"{sysfs}/devices/system/node"
    try:
        entries = [e for e in os.listdir(base) if re.fullmatch(r"node\d+", e)]
    except OSError:
        return None
    found = set()
    for entry in entries:
        try:
            with open(f"{base}/{entry}/cpulist") as f:
                if _parse_cpulist(f.read()) & cpus:
                    found.add(int(entry[4:]))
        except (OSError, ValueError):
            return None
    return found.pop() if len(found) == 1 else None
