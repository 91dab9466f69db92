"""Counters of which calls adaptcoll served and which it handed to native MPI (and why)."""

from __future__ import annotations

from typing import Any

__all__ = ["record", "note", "notes", "stats", "reset_stats", "format_table"]

_counts: dict[tuple[str, str | None], int] = {}
"""(collective, native reason or None when adaptcoll served it) -> calls; one dict update per call,
because the counter sits on the small-message path too."""
_configs: dict[tuple[str, str], int] = {}
"""(collective, configuration label) -> calls adaptcoll served with that configuration."""
_notes: dict[str, None] = {}
"""How the communicators' tuning was resolved (table, nearest measured size, shipped rule), in order."""


def record(name: str, native_reason: str | None = None, config: str | None = None) -> None:
    """Count one call of collective `name`, served by adaptcoll unless `native_reason` is given
    (`config`: the label of the configuration it was served with)."""
    key = (name, native_reason)
    _counts[key] = _counts.get(key, 0) + 1
    if config is not None:
        ckey = (name, config)
        _configs[ckey] = _configs.get(ckey, 0) + 1


def note(text: str) -> None:
    """Remember a line about how tuning was resolved (shown by format_table and stats())."""
    _notes[text] = None


def notes() -> list[str]:
    """The tuning notes of this process, oldest first."""
    return list(_notes)


def stats() -> dict[str, dict[str, Any]]:
    """{collective: {"adaptcoll": n, "native": m, "native_reasons": {reason: k}, "configs": {label: k},
    "tuning": [notes]}} for this process. `configs` counts the served calls per configuration (its label
    ends with where it came from: [table], [table~4] = the nearest measured communicator size, 4 ranks,
    [defaults], [settings]); `tuning` says how the communicators' tables were resolved."""
    out: dict[str, dict[str, Any]] = {}
    for (name, reason), n in sorted(_counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        row = out.setdefault(
            name, {"adaptcoll": 0, "native": 0, "native_reasons": {}, "configs": {}, "tuning": list(_notes)}
        )
        if reason is None:
            row["adaptcoll"] += n
        else:
            row["native"] += n
            row["native_reasons"][reason] = n
    for (name, label), n in sorted(_configs.items()):
        if name in out:
            out[name]["configs"][label] = n
    return out


def reset_stats() -> None:
    """Zero all counters (the tuning notes stay: they describe communicators still in use)."""
    _counts.clear()
    _configs.clear()


def format_table(data: dict[str, dict[str, Any]] | None = None) -> str:
    """A plain-text table of stats() (for --stats and logs)."""
    data = stats() if data is None else data
    lines = [f"{'collective':<16}{'adaptcoll':>10}{'native':>8}  native reasons"]
    for name, row in data.items():
        why = ", ".join(f"{k} x{v}" for k, v in row["native_reasons"].items())
        lines.append(f"{name:<16}{row['adaptcoll']:>10}{row['native']:>8}  {why}")
        for label, n in row.get("configs", {}).items():
            lines.append(f"{'':<16}{n:>10}{'':>8}  served with {label}")
    lines.extend(f"tuning: {text}" for text in notes())
    return "\n".join(lines)
