"""What the correctness part of the check runs (no MPI here): cases of collective x form x route x
type/op x count x root, and the rank-dependent inputs whose exact results native MPI gives too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Case",
    "Route",
    "routes",
    "cases",
    "inputs",
    "group_inputs",
    "SEGMENT_BYTES",
    "BLOCK_COLLECTIVES",
    "MULTI",
    "GROUP_COUNTS",
    "DEVICE_COLLECTIVES",
]

SEGMENT_BYTES = 4096
"""Segment size of the served routes: small, so that modest counts make many segments."""

MULTI = "Allreduce_multi"
COLLECTIVES = ("Bcast", "Reduce", "Allreduce", "Allgather", "Reduce_scatter_block", MULTI)
_ROOTED = ("Bcast", "Reduce")
BLOCK_COLLECTIVES = {"Allgather": "allgather", "Reduce_scatter_block": "reduce_scatter"}
"""The ring's collectives -> their settings' name. A case's count is the per-rank block (the Allgather's
sendbuf, the Reduce-scatter's recvbuf); host memory only (device buffers are not served: native)."""
DEVICE_COLLECTIVES = ("Bcast", "Reduce", "Allreduce", MULTI)
"""The collectives `--device cupy` also checks on device arrays (the grouped Allreduce: every array on
the device, packed on the device below `multi_device_pack_below`)."""
GROUP_COUNTS = (1, 1000, 17, 40_000, 3, 2500, 100_003, 700, 5, 300, 64, 1200)
"""The grouped Allreduce's arrays (elements; dtypes alternate between the case's two): a case's count is
the number of arrays, the first `count` of these. Sizes on both sides of `multi_pack_below` (128K by
default; 8K on the served routes, with 4K buckets, so a dtype's small arrays fill several buckets)."""
_MULTI_SERVED = {
    "multi_pack_below": "8K",
    "multi_bucket_size": "4K",
    "multi_device_pack_below": "8K",
    "multi_device_bucket_size": "4K",
}
_GROUP_TYPES_QUICK = (("float32,int32", "SUM"), ("float64,float32", "MAX"))
_GROUP_TYPES_FULL = _GROUP_TYPES_QUICK + (
    ("int64,complex128", "SUM"),
    ("float64,int16", "PROD"),
    ("uint8,int32", "BOR"),
)

_ALGORITHMS_QUICK = {
    "Bcast": ("binomial", "two_tree", "shm"),
    "Reduce": ("binomial", "pipeline", "shm"),
    "Allreduce": ("binomial", "ring", "rabenseifner", "shm"),
    "Allgather": ("ring",),
    "Reduce_scatter_block": ("ring",),
    MULTI: ("binomial",),
}
_ALGORITHMS_FULL = {
    "Bcast": ("binomial", "two_tree", "pipeline", "binary", "knomial:radix=4", "shm", "topo:intra=shm"),
    "Reduce": ("binomial", "two_tree", "pipeline", "knomial:radix=3", "shm", "topo:intra=shm"),
    "Allreduce": ("binomial", "two_tree", "pipeline", "ring", "rabenseifner", "shm", "topo:intra=shm"),
    "Allgather": ("ring",),
    "Reduce_scatter_block": ("ring",),
    MULTI: ("binomial", "pipeline", "ring", "rabenseifner"),
}
_TYPES_QUICK = (("float32", "SUM"), ("int32", "MAX"), ("float64", "PROD"))
_TYPES_FULL = _TYPES_QUICK + (
    ("int64", "SUM"),
    ("float64", "MIN"),
    ("complex128", "SUM"),
    ("uint8", "BOR"),
    ("int16", "BAND"),
)
_COUNTS_QUICK = (1, 1000, 100_003)
_COUNTS_FULL = (1, 17, 1000, 65_536, 100_003, 1_000_003)


@dataclass(frozen=True)
class Route:
    """How adaptcoll is asked to run a call: 'default' (the settings in force: the shipped rule or the
    tuning table, native below the thresholds) or 'served:<algorithm>' (native thresholds 0, small
    segments, no segment cap)."""

    label: str
    overrides: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


def routes(collective: str, full: bool) -> list[Route]:
    """The default route, then every served algorithm the check runs for `collective` (the grouped
    Allreduce: its arrays' Allreduces served, small arrays packed into small buckets)."""
    name = "allreduce" if collective == MULTI else collective.lower()
    out = [Route("default")]
    for algorithm in (_ALGORITHMS_FULL if full else _ALGORITHMS_QUICK)[collective]:
        block = BLOCK_COLLECTIVES.get(collective)
        if block is not None:
            served = {"native_below": 0, f"{block}_native_below": 0}
            out.append(
                Route(f"served:{algorithm}", {**served, f"{block}_algorithm": f"ring:segment_size={SEGMENT_BYTES}"})
            )
            continue
        overrides: dict[str, Any] = {
            "native_below": 0,
            f"{name}_native_below": 0,
            "device_native_below": 0,
            "max_segments": 0,
            f"{name}_segment_size": SEGMENT_BYTES,
            f"{name}_algorithm": algorithm,
        }
        if collective == MULTI:
            overrides.update(_MULTI_SERVED)
        out.append(Route(f"served:{algorithm}", overrides))
    return out


@dataclass(frozen=True)
class Case:
    """One call to check against native MPI."""

    collective: str  # Bcast, Reduce, Allreduce, Allgather, Reduce_scatter_block, Allreduce_multi
    form: str  # blocking, nonblocking, persistent, in_place, pickle
    route: Route
    dtype: str  # Allreduce_multi: two, 'float32,int32' (its arrays alternate between them)
    op: str  # an MPI.Op name (unused by Bcast)
    count: int  # Allreduce_multi: the number of arrays
    root: int  # 0 for Allreduce

    def describe(self) -> str:
        """'Allreduce nonblocking served:ring float32 SUM x1000 root 0'."""
        what = self.dtype if self.collective == "Bcast" else f"{self.dtype} {self.op}"
        root = f" root {self.root}" if self.collective in _ROOTED else ""
        arrays = " arrays" if self.collective == MULTI else ""
        return f"{self.collective} {self.form} {self.route.label} {what} x{self.count}{arrays}{root}"


def cases(nranks: int, full: bool) -> Iterator[Case]:
    """Every case of the quick or full check on `nranks` ranks, in a fixed order (the same on all ranks)."""
    types = _TYPES_FULL if full else _TYPES_QUICK
    counts = _COUNTS_FULL if full else _COUNTS_QUICK
    roots = sorted({0, nranks // 2, nranks - 1}) if full else sorted({0, nranks - 1})
    middle = counts[len(counts) // 2]
    for collective in COLLECTIVES:
        if collective == MULTI:
            yield from _group_cases(full)
            continue
        kinds = (("uint8", "SUM"), ("float64", "SUM")) if collective == "Bcast" else types
        croots = roots if collective in _ROOTED else [0]
        for i, route in enumerate(routes(collective, full)):
            forms = ["blocking"]
            if i <= 1 or full:  # the default route and the first served one in every form
                forms += ["nonblocking"] if collective in BLOCK_COLLECTIVES else ["nonblocking", "persistent"]
                if collective != "Bcast":
                    forms.append("in_place")
            for form in forms:
                for root in croots:
                    for count in counts:
                        yield Case(collective, form, route, kinds[0][0], kinds[0][1], count, root)
                    for dtype, op in kinds[1:]:
                        yield Case(collective, form, route, dtype, op, middle, root)
        for root in croots if collective not in BLOCK_COLLECTIVES else []:  # the pickle-based lowercase method
            yield Case(collective, "pickle", Route("default"), "float64", "SUM", 1000, root)


def _group_cases(full: bool) -> Iterator[Case]:
    """The grouped Allreduce: every form (persistent: Allreduce_multi_init started twice) on the default
    route and the first served one (full: on every route), each pair of dtypes, the whole group."""
    for i, route in enumerate(routes(MULTI, full)):
        forms = ["blocking", "in_place", "nonblocking", "persistent"] if i <= 1 or full else ["blocking"]
        for form in forms:
            for dtypes, op in _GROUP_TYPES_FULL if full else _GROUP_TYPES_QUICK:
                yield Case(MULTI, form, route, dtypes, op, len(GROUP_COUNTS), 0)


def group_inputs(case: Case, rank: int) -> list[np.ndarray]:
    """This rank's arrays of a grouped case: `inputs` of each array's size and dtype, shifted by the
    array's index so that no two arrays hold the same values (an array written into another's place
    shows)."""
    dtypes = case.dtype.split(",")
    out = []
    for k, n in enumerate(GROUP_COUNTS[: case.count]):
        one = Case("Allreduce", case.form, case.route, dtypes[k % len(dtypes)], case.op, n, 0)
        out.append(inputs(one, rank + 5 * k))
    return out


def inputs(case: Case, rank: int) -> np.ndarray:
    """This rank's input of a case: small values whose sums, products and extrema are exact in every
    type on up to thousands of ranks, different on every rank. Bcast: the root's data, 0xEE elsewhere."""
    dt = np.dtype(case.dtype)
    i = np.arange(case.count, dtype=np.int64)
    if case.collective == "Bcast":
        if rank != case.root:
            return (
                np.full(case.count, 0xEE, dtype=np.uint8).view(dt) if dt.itemsize == 1 else np.full(case.count, -7, dt)
            )
        values = (i * 7 + case.count) % 251
    elif case.op == "PROD":
        values = 1 + (i + rank) % 2
    elif case.op in ("BAND", "BOR", "BXOR"):
        values = (i * 31 + rank * 17) % 128
    elif case.op in ("MAX", "MIN"):
        values = (i * 13 + rank * 5) % 101
    else:
        values = (i * 7 + 3 * rank) % 17
    out = values.astype(dt)
    if dt.kind == "c":
        out = out + 1j * ((i + rank) % 5).astype(dt)
    return out
