"""Counters of which calls adaptcoll served and which it handed to native MPI (and why)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = [
    "record",
    "note",
    "tuning_note",
    "tuning_notes",
    "stats",
    "reset_stats",
    "format_table",
    "below",
    "below_counter",
    "use_below_counter",
    "tally",
    "BELOW_THRESHOLD_REASON",
]

_calls: dict[tuple[str, str | None, str | None, str | None], int] = {}
"""(collective, native reason or None when adaptcoll served it, configuration label, engine) -> calls."""

BELOW_THRESHOLD_REASON = "below native_below"
"""The reason under which `below` is reported."""

below: defaultdict[str, int] = defaultdict(int)
"""Calls the small-message fast path handed to native MPI, by collective: `below[name] += 1` is the whole
cost of counting there (stats() reports them under BELOW_THRESHOLD_REASON)."""
_below_lists: dict[str, Any] = {}
"""One-element counters of the blocking forms' ndarray fast path (`below_counter`), by collective."""


def below_counter(name: str) -> list[int]:
    """A one-element list counting calls of `name` that the fast path handed to native MPI, like
    `below[name]`: `counter[0] += 1` skips the dict's hashing and lookup (about 50 ns of a 0.3 us wrapper)."""
    return _below_lists.setdefault(name, [0])


def use_below_counter(name: str, counter: Any) -> None:
    """Count `name`'s fast-path calls on `counter` from now on (anything read and reset as `counter[0]`:
    the fast-call extension's native gate, which counts in C), carrying on from the current count."""
    counter[0] = _below_lists.setdefault(name, [0])[0]
    _below_lists[name] = counter


_tallies: dict[tuple[str, str | None, str | None, str | None], list[int]] = {}
"""One-element counters of calls counted alike (`tally`), by `record`'s key."""


def tally(
    name: str, native_reason: str | None = None, config: str | None = None, engine: str | None = None
) -> list[int]:
    """A one-element counter for calls `record(name, native_reason, config, engine)` would count:
    `counter[0] += 1` counts one without making and hashing the key (a remembered decision keeps its
    counters, so a repeated served call skips that, about 0.3 us)."""
    return _tallies.setdefault((name, native_reason, config, engine), [0])


_tuning_notes: dict[str, None] = {}
"""How the communicators' tuning was resolved (table, nearest measured size, shipped rule), in order."""


def record(name: str, native_reason: str | None = None, config: str | None = None, engine: str | None = None) -> None:
    """Count one call of collective `name`, served by adaptcoll unless `native_reason` is given
    (`config`: the label of the configuration it was served with; `engine`: "compiled" or "python",
    the engine that ran its protocols). One dict update: stats() adds them up."""
    key = (name, native_reason, config, engine)
    _calls[key] = _calls.get(key, 0) + 1


def tuning_note(text: str) -> None:
    """Remember a line about how tuning was resolved (shown by format_table and stats())."""
    _tuning_notes[text] = None


def tuning_notes() -> list[str]:
    """The tuning notes of this process, oldest first."""
    return list(_tuning_notes)


def _row() -> dict[str, Any]:
    return {
        "adaptcoll": 0,
        "native": 0,
        "native_reasons": {},
        "configs": {},
        "engines": {},
        "tuning": list(_tuning_notes),
    }


_notes: dict[tuple[str, str], int] = {}
"""(collective, note) -> served calls that carry the note (e.g. why the shm node level was not used)."""


def note(name: str, text: str) -> None:
    """Count a remark on one call of `name` (served or native): it appears under "notes" in stats()."""
    key = (name, text)
    _notes[key] = _notes.get(key, 0) + 1


def stats() -> dict[str, dict[str, Any]]:
    """{collective: {"adaptcoll": n, "native": m, "native_reasons": {reason: k}, "configs": {label: k},
    "engines": {"compiled" or "python": k}, "tuning": [notes]}} for this process, plus "notes": {note: k}
    where served calls carried one (why the shm node level was not used). `engines` counts the served
    calls by the engine that ran their protocols. `configs` counts the served calls per configuration (its label ends
    with where it came from: [table], [table~4] = the nearest measured communicator size, 4 ranks,
    [defaults], [settings]); `tuning` says how the communicators' tables were resolved."""
    out: dict[str, dict[str, Any]] = {}
    counts: dict[tuple[str, str | None], int] = {}
    configs: dict[tuple[str, str], int] = {}
    engines: dict[tuple[str, str], int] = {}
    tallied = [(key, c[0]) for key, c in list(_tallies.items()) if c[0]]
    for (name, reason, config, engine), n in list(_calls.items()) + tallied:
        counts[(name, reason)] = counts.get((name, reason), 0) + n
        if config is not None:
            configs[(name, config)] = configs.get((name, config), 0) + n
        if engine is not None:
            engines[(name, engine)] = engines.get((name, engine), 0) + n
    fast = [(name, c[0]) for name, c in list(_below_lists.items())]
    for name, n in list(below.items()) + fast:
        if n:
            key = (name, BELOW_THRESHOLD_REASON)
            counts[key] = counts.get(key, 0) + n
    for (name, reason), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        row = out.setdefault(name, _row())
        if reason is None:
            row["adaptcoll"] += n
        else:
            row["native"] += n
            row["native_reasons"][reason] = n
    for (name, text), n in sorted(_notes.items()):
        row = out.setdefault(name, _row())
        row.setdefault("notes", {})[text] = n
    for (name, label), n in sorted(configs.items()):
        if name in out:
            out[name]["configs"][label] = n
    for (name, engine), n in sorted(engines.items()):
        if name in out:
            out[name]["engines"][engine] = n
    return out


def reset_stats() -> None:
    """Zero all counters (the tuning notes stay: they describe communicators still in use)."""
    _calls.clear()
    below.clear()
    for counter in (*_below_lists.values(), *_tallies.values()):
        counter[0] = 0
    _notes.clear()


def format_table(data: dict[str, dict[str, Any]] | None = None) -> str:
    """A plain-text table of stats() (for --stats and logs)."""
    data = stats() if data is None else data
    lines = [f"{'collective':<22}{'adaptcoll':>10}{'native':>8}  native reasons"]
    for name, row in data.items():
        why = ", ".join(f"{k} x{v}" for k, v in {**row["native_reasons"], **row.get("notes", {})}.items())
        lines.append(f"{name:<22}{row['adaptcoll']:>10}{row['native']:>8}  {why}")
        for label, n in row.get("configs", {}).items():
            lines.append(f"{'':<22}{n:>10}{'':>8}  served with {label}")
        for engine, n in row.get("engines", {}).items():
            lines.append(f"{'':<22}{n:>10}{'':>8}  on the {engine} engine")
    lines.extend(f"tuning: {text}" for text in tuning_notes())
    return "\n".join(lines)
