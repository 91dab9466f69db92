"""Message sizes as people write them (4096, 4K, 1M) and the power-of-two sweeps OSU makes."""

from __future__ import annotations

import re

__all__ = ["parse_size", "parse_size_range", "sizes_between", "format_size"]

_SIZE_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*$")


def parse_size(text: str) -> int:
    """Bytes from '4096', '4K', '4KiB', '1M', '1MB' (binary multiples); ValueError otherwise."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"bad size {text!r}: expected bytes such as 4096, 4K or 1M")
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2).lower()]


def parse_size_range(text: str) -> tuple[int, int]:
    """OSU's -m argument: 'max' or 'min:max' (both in bytes, K/M/G suffixes ok) -> (min, max)."""
    lo_text, sep, hi_text = text.partition(":")
    if not sep:
        return 0, parse_size(lo_text)
    lo = parse_size(lo_text) if lo_text.strip() else 0
    hi = parse_size(hi_text)
    if lo > hi:
        raise ValueError(f"bad size range {text!r}: min {lo} > max {hi}")
    return lo, hi


def sizes_between(lo: int, hi: int, smallest: int = 1) -> list[int]:
    """Powers of two from max(lo, smallest) up to hi, as OSU sweeps (min rounded up to a power of two)."""
    size = 1
    start = max(lo, smallest, 1)
    while size < start:
        size *= 2
    out = []
    while size <= hi:
        out.append(size)
        size *= 2
    return out


def format_size(nbytes: int) -> str:
    """'64K', '16M', '1000' (binary multiples when exact)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)
