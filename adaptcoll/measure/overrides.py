"""Setting overrides written on a command line: 'KEY=VALUE;KEY=VALUE' with adaptcoll's setting names,
where 'algorithm' and 'segment_size' without a collective prefix set all three collectives."""

from __future__ import annotations

__all__ = ["parse_overrides", "SHORTHANDS"]

SHORTHANDS = ("algorithm", "segment_size")


def parse_overrides(text: str, what: str) -> tuple[tuple[str, str], ...]:
    """(key, value) pairs of 'KEY=VALUE[;KEY=VALUE]' (shorthands expanded); ValueError naming `what`."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(";") if text.strip() else []:
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise ValueError(f"{what}: settings are KEY=VALUE separated by ';', got {item!r}")
        if key in SHORTHANDS:
            pairs.extend((f"{c}_{key}", value) for c in ("bcast", "reduce", "allreduce"))
        else:
            pairs.append((key, value))
    return tuple(pairs)
