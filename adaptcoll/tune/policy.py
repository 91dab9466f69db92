"""Per-communicator tuning (no MPI here): the size bands every collective uses on one communicator,
resolved once from the table bytes and the communicator's facts, and `CommTuning.choose`, which turns
(collective, message bytes, host/device) into the `CallConfig` a call uses. Explicit settings win over
the table field by field; the per-communicator thresholds the small-message fast path reads (`below`)
are kept in step with the settings in force. Allgather / Reduce-scatter have bands here too (host
memory); `adaptcoll.tune.blocks` turns them into a call's configuration (their settings differ).

Every rank resolves the same bytes with the same facts, so every rank makes the same choices.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Union

from ..plans import forests
from ..runtime import counters, settings
from ..runtime.native import BELOW_THRESHOLD, Native
from .config import CallConfig, ServeConfig
from .defaults import bands_of, case_of
from .table import COLLECTIVES, Band, Table, TableError, band_index, bands, memories, nearest_group, parse

__all__ = [
    "CommFacts",
    "placed_facts",
    "CommTuning",
    "TuningWarning",
    "TUNED_NATIVE",
    "NEVER",
    "resolve",
    "parse_cached",
]

TUNED_NATIVE = Native("native at this size (tuning)")
"""A size in a native band above a served one (the table measured native faster there)."""
NEVER = 1 << 62
"""A threshold above every message: the fast path takes every plain array of that collective."""


class TuningWarning(UserWarning):
    """A tuning table was ignored (it does not parse, does not match this MPI, or cannot be read)."""


@dataclass(frozen=True)
class CommFacts:
    """What decides the winner, for one communicator (the same on every rank)."""

    size: int
    nodes: int
    ranks_per_node: int
    ranks_per_core: float
    mpi_library: str
    compiled: bool = False
    """Every rank runs the compiled progress path (adaptcoll.runtime.compiled): the rule's compiled bands."""
    in_rank_order: bool = True
    """Each node's ranks are consecutive (mpirun's default block placement), as the rule's cases for nodes
    of several ranks were simulated; otherwise those cases serve only what follows the nodes themselves."""


def placed_facts(hosts: Sequence[int], cpus: Sequence[int], library: str, compiled: bool = False) -> CommFacts:
    """The facts of ranks placed on hosts: rank r on host `hosts[r]` (any ids) with `cpus[r]` CPUs. The
    tuning exchange gives it every rank's record, the simulator the nodes of a simulated cluster."""
    per_host: dict[int, list[int]] = {}
    runs = 0  # runs of consecutive ranks on one host: one per host when each host's ranks are consecutive
    previous = None
    for host, n in zip(hosts, cpus):
        per_host.setdefault(host, []).append(n)
        runs += host != previous
        previous = host
    per_node = max(len(c) for c in per_host.values())
    per_core = max(len(c) / max(1, min(c)) for c in per_host.values())
    return CommFacts(len(hosts), len(per_host), per_node, round(per_core, 3), library, compiled, runs == len(per_host))


_parsed: dict[tuple[str, bytes], Union[Table, TableError]] = {}
_warned: set[str] = set()
_LIVE: weakref.WeakSet[CommTuning] = weakref.WeakSet()


def parse_cached(data: bytes, origin: str) -> Table:
    """`table.parse`, once per process per (origin, bytes)."""
    key = (origin, data)
    found = _parsed.get(key)
    if found is None:
        try:
            found = parse(data, origin)
        except TableError as exc:
            found = exc
        _parsed[key] = found
    if isinstance(found, TableError):
        raise found
    return found


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, TuningWarning, stacklevel=3)


class CommTuning:
    """The choices of one communicator: size bands per (collective, memory), their sources, notes."""

    def __init__(
        self,
        facts: CommFacts,
        band_map: dict[tuple[str, str], tuple[Band, ...]],
        sources: dict[tuple[str, str], str],
        notes: tuple[str, ...] = (),
        origin: str = "",
    ) -> None:
        self.facts = facts
        self.bands = band_map
        self.sources = sources
        self.notes = notes
        self.origin = origin
        self._starts = {k: [b.start for b in v] for k, v in band_map.items()}
        self._first_served = {k: next((i for i, b in enumerate(v) if b.serve), len(v)) for k, v in band_map.items()}
        self.below: dict[str, int] = {}
        """Host messages below below[collective] bytes go native (the fast path reads this dict)."""
        self.device_below: dict[str, int] = {}
        """Device messages below device_below[collective] bytes go native as "below native_below" (staged
        whole when MPI is not CUDA-aware): the small-device-array fast path reads this dict."""
        self._calls: dict[tuple[str, str, int, bool], CallConfig] = {}
        self._settings = settings.current()
        self.refresh(self._settings)
        _LIVE.add(self)

    def refresh(self, current: settings.Settings) -> None:
        """Follow new settings: recompute the fast-path thresholds, forget the chosen configs."""
        self._settings = current
        self._calls.clear()
        for coll in settings.COLLECTIVES:
            self.below[coll] = self.native_below(coll, current)
            self.device_below[coll] = self.device_native_below(coll, current)

    def native_below(self, collective: str, current: settings.Settings) -> int:
        """Host messages of `collective` below this many bytes go native: the explicit threshold, else the
        start of the first served band (NEVER when no band is served)."""
        if current.threshold_explicit(collective):
            return current.threshold(collective)
        key = (collective, "host")
        i = self._first_served[key]
        return self._starts[key][i] if i < len(self._starts[key]) else NEVER

    def device_native_below(self, collective: str, current: settings.Settings) -> int:
        """Device messages of `collective` below this many bytes are decided native with the reason
        BELOW_THRESHOLD (decide._call): below the device threshold and below the first native band that
        follows a served one (that band's reason is TUNED_NATIVE); 0 for algorithm=native (its own reason)."""
        if current.algorithm(collective) == "native":
            return 0
        limit = current.device_threshold(collective)
        if current.threshold_explicit(collective):
            return limit
        key = (collective, "device")
        found = self.bands.get(key, ())
        for band in found[self._first_served.get(key, len(found)) + 1 :]:
            if not band.serve:
                return min(limit, band.start)
        return limit

    def band(self, collective: str, nbytes: int, on_device: bool = False) -> tuple[int, Band, bool]:
        """(index, the size band of `nbytes` bytes, whether it lies below the first served band)."""
        key = (collective, "device" if on_device else "host")
        i = band_index(self._starts[key], nbytes)
        return i, self.bands[key][i], i < self._first_served[key]

    def choose(self, collective: str, nbytes: int, on_device: bool = False) -> CallConfig:
        """The configuration a call of `collective` on `nbytes` bytes uses (cached per size band)."""
        key = (collective, "device" if on_device else "host")
        i, band, _ = self.band(collective, nbytes, on_device)
        s = self._settings
        if s.threshold_explicit(collective):
            serve = nbytes >= s.threshold(collective)
        else:
            serve = band.serve
        found = self._calls.get((key[0], key[1], i, serve))
        if found is None:
            found = self._calls[(key[0], key[1], i, serve)] = self._make(collective, key, i, serve)
        return found

    def _make(self, collective: str, key: tuple[str, str], i: int, serve: bool) -> CallConfig:
        s = self._settings
        band = self.bands[key][i]
        explicit = {
            "algorithm": s.is_explicit(f"{collective}_algorithm"),
            "segment_size": s.is_explicit(f"{collective}_segment_size"),
            "max_segments": s.is_explicit("max_segments"),
            "threshold": s.threshold_explicit(collective),
        }
        if collective == "allreduce":
            explicit["roots"] = s.is_explicit("allreduce_roots")
        algorithm = s.algorithm(collective) if explicit["algorithm"] else band.config.algorithm
        cap = s.max_segments if explicit["max_segments"] else band.config.max_segments
        if explicit["algorithm"]:  # a band's cap was chosen for its own algorithm, not for a forest
            cap = forests.segment_cap(algorithm, cap, explicit["max_segments"])
        config = ServeConfig(
            algorithm,
            s.segment_size(collective) if explicit["segment_size"] else band.config.segment_size,
            cap,
            (s.allreduce_roots if explicit.get("roots") else band.config.roots) if collective == "allreduce" else 0,
        )
        if all(explicit.values()):
            source = "settings"
        else:
            source = self.sources[key] + ("+settings" if any(explicit.values()) else "")
        native: Optional[Native] = None
        if not serve:
            below = explicit["threshold"] or i < self._first_served[key]
            native = BELOW_THRESHOLD if below else TUNED_NATIVE
        send_window, recv_window = s.windows(collective)
        return CallConfig(
            serve,
            config.algorithm,
            config.segment_size,
            config.max_segments,
            config.roots,
            send_window,
            recv_window,
            s.sync_sends,
            s.reproducible,
            source,
            native,
            f"{config.label(collective)} [{source}]",
        )


def _refresh_all(current: settings.Settings) -> None:
    for tuning in list(_LIVE):
        tuning.refresh(current)


settings.on_change(_refresh_all)


def resolve(data: bytes, origin: str, facts: CommFacts, warn: bool, problem: Optional[str] = None) -> CommTuning:
    """The CommTuning for a communicator from the table bytes rank 0 sent (b'' for none).

    A table that does not parse, or was measured with another MPI library, is ignored with one
    TuningWarning (when `warn`: rank 0) and the shipped rule applies; so does `problem` (rank 0 could
    not read the file). Collectives or memory kinds the table does not cover use the shipped rule too.
    """
    table: Optional[Table] = None
    if data:
        try:
            table = parse_cached(data, origin)
        except TableError as exc:
            problem = str(exc)
    if table is not None and table.mpi_library != facts.mpi_library:
        problem = (
            f"{origin}: machine.mpi_library: the table was measured with {table.mpi_library!r}, "
            f"this job runs {facts.mpi_library!r}"
        )
        table = None
    notes: list[str] = []
    if problem:
        text = f"adaptcoll: tuning table ignored, the shipped rule applies: {problem}"
        notes.append(text)
        if warn:
            _warn_once(text)
    band_map: dict[tuple[str, str], tuple[Band, ...]] = {}
    sources: dict[tuple[str, str], str] = {}
    rule = case_of(facts)
    for coll in COLLECTIVES:
        for memory in memories(coll):
            key = (coll, memory)
            found, group = (
                (None, []) if table is None else nearest_group(table.entries, coll, memory, facts.size, facts.nodes)
            )
            if found is None:
                band_map[key] = bands_of(coll, facts)
                sources[key] = "defaults"
                continue
            band_map[key] = bands(group)
            size, nodes, _ = found
            if (size, nodes) == (facts.size, facts.nodes):
                sources[key] = "table"
            else:
                sources[key] = f"table~{size}"
                notes.append(
                    f"tuning table {origin}: {coll} ({memory}) on {facts.size} ranks / {facts.nodes} node(s) uses "
                    f"the entries measured on {size} ranks / {nodes} node(s) (nearest measured)"
                )
    if table is None:
        notes.append(
            f"no tuning table: shipped rule, case '{rule}' ({facts.size} ranks, "
            f"{facts.ranks_per_core:g} ranks per core, {facts.nodes} node(s))"
        )
    for note in notes:
        counters.tuning_note(note)
    return CommTuning(facts, band_map, sources, tuple(notes), origin if table is not None else "")
