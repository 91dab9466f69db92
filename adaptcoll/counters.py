"""Counters of which calls adaptcoll served and which it handed to native MPI (and why)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

__all__ = ["record", "stats", "reset_stats", "format_table"]

_served: Counter[str] = Counter()
_native: Counter[str] = Counter()
_reasons: defaultdict[str, Counter[str]] = defaultdict(Counter)


def record(name: str, native_reason: str | None = None) -> None:
    """Count one call of collective `name`, served by adaptcoll unless `native_reason` is given."""
    if native_reason is None:
        _served[name] += 1
    else:
        _native[name] += 1
        _reasons[name][native_reason] += 1


def stats() -> dict[str, dict[str, Any]]:
    """{collective: {"adaptcoll": n, "native": m, "native_reasons": {reason: k}}} for this process."""
    names = sorted(set(_served) | set(_native))
    return {n: {"adaptcoll": _served[n], "native": _native[n], "native_reasons": dict(_reasons[n])}
            for n in names}


def reset_stats() -> None:
    """Zero all counters."""
    _served.clear()
    _native.clear()
    _reasons.clear()


def format_table(data: dict[str, dict[str, Any]] | None = None) -> str:
    """A plain-text table of stats() (for --stats and logs)."""
    data = stats() if data is None else data
    lines = [f"{'collective':<16}{'adaptcoll':>10}{'native':>8}  native reasons"]
    for name, row in data.items():
        why = ", ".join(f"{k} x{v}" for k, v in row["native_reasons"].items())
        lines.append(f"{name:<16}{row['adaptcoll']:>10}{row['native']:>8}  {why}")
    return "\n".join(lines)
