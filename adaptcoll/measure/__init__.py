"""Measuring native MPI against adaptcoll: sizes, buffers and calls, the interleaved timing loop, the
statistics of paired samples, and a progress bar. Shared by `python -m adaptcoll.check`, the tuner and
bench/osu.py, so every figure we quote is measured the same way."""

from __future__ import annotations

from .calls import Buffers, device_call, dtype_for, import_cupy, make_buffers, staged_starter, starter, to_device
from .interleave import (
    Impl,
    SettingsSwitch,
    first_blocking_calls,
    route_of,
    routes,
    time_blocking,
    warmup,
)
from .malloc import M_MMAP_MAX_THRESHOLD, PINNED_NO_MMAP, malloc_env, pin_malloc
from .overrides import parse_overrides
from .progress import Progress
from .sizes import format_size, parse_size, parse_size_range, sizes_between
from .stats import Verdict, median_ci, paired_ratios, percentile, summarize_samples, verdict

__all__ = [
    "Buffers",
    "device_call",
    "Impl",
    "Progress",
    "SettingsSwitch",
    "Verdict",
    "dtype_for",
    "first_blocking_calls",
    "format_size",
    "import_cupy",
    "make_buffers",
    "median_ci",
    "paired_ratios",
    "parse_overrides",
    "parse_size",
    "parse_size_range",
    "percentile",
    "pin_malloc",
    "malloc_env",
    "M_MMAP_MAX_THRESHOLD",
    "PINNED_NO_MMAP",
    "route_of",
    "routes",
    "sizes_between",
    "staged_starter",
    "starter",
    "summarize_samples",
    "time_blocking",
    "to_device",
    "verdict",
    "warmup",
]
