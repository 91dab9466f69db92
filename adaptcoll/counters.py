"""Counters of which calls adaptcoll served and which it handed to native MPI (and why)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = ["record", "note", "stats", "reset_stats", "format_table", "below", "BELOW_THRESHOLD_REASON"]

_counts: dict[tuple[str, str | None], int] = {}
"""(collective, native reason or None when adaptcoll served it) -> calls."""

BELOW_THRESHOLD_REASON = "below native_below"
"""The reason under which `below` is reported."""

below: defaultdict[str, int] = defaultdict(int)
"""Calls the small-message fast path handed to native MPI, by collective: `below[name] += 1` is the whole
cost of counting there (stats() reports them under BELOW_THRESHOLD_REASON)."""


def record(name: str, native_reason: str | None = None) -> None:
    """Count one call of collective `name`, served by adaptcoll unless `native_reason` is given."""
    key = (name, native_reason)
    _counts[key] = _counts.get(key, 0) + 1


_notes: dict[tuple[str, str], int] = {}
"""(collective, note) -> served calls that carry the note (e.g. why the shm node level was not used)."""


def note(name: str, text: str) -> None:
    """Count a remark on one served call of `name`: it appears under "notes" in stats()."""
    key = (name, text)
    _notes[key] = _notes.get(key, 0) + 1


def stats() -> dict[str, dict[str, Any]]:
    """{collective: {"adaptcoll": n, "native": m, "native_reasons": {reason: k}}} for this process,
    plus "notes": {note: k} where served calls carried one (why the shm node level was not used)."""
    out: dict[str, dict[str, Any]] = {}
    counts = dict(_counts)
    for name, n in list(below.items()):
        if n:
            key = (name, BELOW_THRESHOLD_REASON)
            counts[key] = counts.get(key, 0) + n
    for (name, reason), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        row = out.setdefault(name, {"adaptcoll": 0, "native": 0, "native_reasons": {}})
        if reason is None:
            row["adaptcoll"] += n
        else:
            row["native"] += n
            row["native_reasons"][reason] = n
    for (name, text), n in sorted(_notes.items()):
        row = out.setdefault(name, {"adaptcoll": 0, "native": 0, "native_reasons": {}})
        row.setdefault("notes", {})[text] = n
    return out


def reset_stats() -> None:
    """Zero all counters."""
    _counts.clear()
    below.clear()
    _notes.clear()


def format_table(data: dict[str, dict[str, Any]] | None = None) -> str:
    """A plain-text table of stats() (for --stats and logs)."""
    data = stats() if data is None else data
    lines = [f"{'collective':<16}{'adaptcoll':>10}{'native':>8}  native reasons"]
    for name, row in data.items():
        why = ", ".join(f"{k} x{v}" for k, v in {**row["native_reasons"], **row.get("notes", {})}.items())
        lines.append(f"{name:<16}{row['adaptcoll']:>10}{row['native']:>8}  {why}")
    return "\n".join(lines)
