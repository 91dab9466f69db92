"""The simulator's C core: the compiled engine's tree protocols on a C copy of the event world.

`simcore.c` is world.py and network.py's fair links (and pathlinks.py's described networks) event for
event (the same (time, sequence) keys in the same order) running the tree protocols of
adaptcoll/runtime/progress.c, the code the compiled engine runs over MPI; tests/test_simcore.py and
tests/test_simcore_paths.py check that both cores give the same times, messages, events and callbacks.
It serves the runs that take the Python core minutes: trees (every kind, several trees, forests) for
Bcast / Reduce / Allreduce, and the lock-step baselines whose steps have no concurrent parts, on fair,
'pair' or FIFO links or a described network (max-min or bottleneck sharing; its routes made here by
routes.Routes and handed over), quiet or with detour noise and start skew. Everything else (ompi_han,
rings, the node level, fixed-fraction noise, data, records and traces) runs on the Python core.

`ADAPTCOLL_SIM_CORE=auto|python|c` chooses (auto: C where it applies and a C compiler is there; c: an
error where it cannot run). Built at first use with the C compiler (`CC`, else cc / gcc / clang) into
the same cache as the compiled engine; no MPI is needed.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional, cast

import numpy as np

from ..plans.dealing import tree_links
from ..runtime.cbuild import build_cached, cache_dir, find_cc
from .lockstep import BASELINES, Together, check_applicable
from .params import CostParams
from .routes import Routes
from .timelines import FixedFraction, Timeline
from .world import Deadlock

__all__ = [
    "NotFlat",
    "lockstep_steps",
    "run_lockstep",
    "CORES",
    "USE",
    "CoreUse",
    "CoreUnavailable",
    "CoreRun",
    "core_setting",
    "library",
    "status",
    "unsupported",
    "run",
]

CORES = ("auto", "python", "c")
SIM_ABI = 7
FLAGS = ("-O2", "-ffp-contract=off", "-shared", "-fPIC", "-pthread")
"""(-ffp-contract=off: no fused multiply-adds, whose one rounding would part the floats from Python's)"""
_KINDS = {"bcast": 0, "reduce": 1, "allreduce": 2}
_SYNC = {"first": 0, "all": 1, "none": 2}
_ERRORS = {
    1: "deadlock",
    2: "out of memory",
    3: "a message and its receive differ in size",
    5: "a protocol failed",
    7: "max-min sharing left a message no rate",
}
_ROUTE = 6  # SIM_ROUTE: a message needed a route Python did not hand over (it is added and the run repeated)
SHARINGS = ("maxmin", "bottleneck")
"""The sharing models of a described network (routes.SHARING) the C core runs."""
_HORIZON = 4  # SIM_HORIZON: a detour beyond the drawn ones was needed
FIRST_HORIZON = 0.02
"""Seconds of detours drawn for a noisy run at first (doubled, and the run repeated, while it needs more)."""


@dataclass
class CoreUse:
    """How many simulated runs each core took in this process, and why the last one that went to the
    Python core did (the CLI prints it)."""

    c: int = 0
    python: int = 0
    why: str = ""

    def summary(self) -> str:
        """One line: the runs per core (and the reason for the Python core's)."""
        parts = []
        if self.c:
            parts.append(f"{self.c} on the C core")
        if self.python:
            parts.append(f"{self.python} on the Python core ({self.why})")
        return "runs: " + ("; ".join(parts) if parts else "none")


USE = CoreUse()


class CoreUnavailable(RuntimeError):
    """ADAPTCOLL_SIM_CORE=c, but the C core cannot be built here or cannot run this simulation."""


def core_setting() -> str:
    """ADAPTCOLL_SIM_CORE (default auto); ValueError for anything but auto, python or c."""
    value = os.environ.get("ADAPTCOLL_SIM_CORE", "auto").strip().lower() or "auto"
    if value not in CORES:
        raise ValueError(f"ADAPTCOLL_SIM_CORE must be one of {', '.join(CORES)}, got {value!r}")
    return value


def _sources() -> dict[str, bytes]:
    return {
        "simcore.c": resources.files(__package__).joinpath("simcore.c").read_bytes(),
        "progress.c": resources.files("adaptcoll.runtime").joinpath("progress.c").read_bytes(),
    }


def build(cc: str, out_dir: Optional[Path] = None) -> Path:
    """Compile simcore.c (with progress.c) into the cache, once per source and compiler; returns the
    library's path. RuntimeError with the compiler's output if it fails."""
    return build_cached(
        cc, _sources(), "simcore.c", "adaptcoll_simcore", out_dir or cache_dir("simcore"), FLAGS, libs=("-lm",)
    )


_P = ctypes.c_void_p


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Optional[ctypes.CDLL], str]:
    cc = find_cc()
    if cc is None:
        return None, "no C compiler found (set CC, or install cc / gcc / clang)"
    try:
        lib = ctypes.CDLL(str(build(cc)))
    except (RuntimeError, OSError) as exc:
        return None, f"the C core could not be built: {exc}"
    if lib.ac_sim_abi() != SIM_ABI:
        return None, f"the C core's interface is {lib.ac_sim_abi()}, this module speaks {SIM_ABI}"
    lib.ac_sim_run.restype = ctypes.c_int
    lib.ac_sim_run.argtypes = [_P] * 21
    return lib, "built with " + cc


def library() -> Optional[ctypes.CDLL]:
    """The loaded C core, or None where it cannot be built (`status` says why)."""
    return _load()[0]


def status() -> str:
    """Where the C core stands: how it was built, or why it is not there."""
    return _load()[1]


def unsupported(
    job: Any,
    params: CostParams,
    prepared: Any,
    cpu_noise: Optional[Timeline],
    data: bool,
    record: bool,
    trace: Any,
    topology: Any,
) -> Optional[str]:
    """Why the C core cannot run this simulation (None: it can, if `prepared` runs the tree protocols,
    programs.runs_trees). `prepared`: adaptcoll's set-up, None for a lock-step baseline."""
    if data or record or trace is not None:
        return "data, records and traces are kept by the Python core only"
    if topology is not None:
        if params.links == "fifo":
            return "a described network shares its links fairly (links 'fair' or 'pair'), not FIFO"
        if topology.sharing not in SHARINGS:
            return f"{topology.sharing!r} sharing of a described network runs on the Python core"
    if isinstance(cpu_noise, FixedFraction):
        return "fixed-fraction noise runs on the Python core"
    if prepared is not None and job.collective not in _KINDS:
        return f"{job.collective} runs on the Python core (the C core runs the trees)"
    if prepared is not None and prepared.plan.seg_count >= 1 << 31:
        return "segments of 2**31 elements or more run on the Python core"
    return None


@dataclass
class CoreRun:
    """What a run on the C core leaves (the parts of a World its callers read)."""

    size: int
    started: list[float]
    finished: list[float]
    messages: int
    bytes: int
    events: int
    callbacks: int
    cpu_noise: Optional[Timeline]
    now: float
    """The time of the last event (World.now after the run)."""
    unmatched: int
    """Sends never received plus receives never matched."""


def _packed_links(prepared: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's links as ac_start takes them, one after another, and each rank's offset."""
    nseg = prepared.plan.nseg
    parts: list[Any] = []
    offsets = np.empty(size, np.int64)
    at = 0
    for r in range(size):
        links = tree_links(prepared.trees, r, nseg)
        block = [len(links)]
        for link in links:
            segs = list(link.segs)
            block += [-1 if link.parent is None else link.parent, len(link.children), *link.children, len(segs), *segs]
        offsets[r] = at
        at += len(block)
        parts.append(block)
    flat = np.fromiter((v for block in parts for v in block), np.int32, count=at)
    return flat, offsets


@functools.lru_cache(maxsize=4)
def _links_for(prepared: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    return _packed_links(prepared, size)


def _detours(tl: Optional[Timeline], count: int, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """The detours of `count` ranks (or nodes) that start before `horizon`, in order (Timeline.detours)."""
    offsets = np.zeros(count + 1, np.int64)
    if tl is None:
        return np.zeros(2, np.float64), offsets
    flat: list[float] = []
    for r in range(count):
        for s, e in tl.detours(r, -np.inf, horizon):
            flat += (s, e)
        offsets[r + 1] = len(flat) // 2
    return np.asarray(flat or [0.0, 0.0], np.float64), offsets


@dataclass
class _Program:
    """What the ranks run on the C core: the tree protocols (links) or lock-step steps."""

    kind: int = 0
    count: int = 0
    seg_count: int = 1
    tag_base: int = 0
    tag_space: int = 1
    windows: tuple[int, int] = (1, 1)
    sync: int = 0
    ordered: int = 0
    links: Any = None
    offsets: Any = None
    lockstep: int = 0
    copy: int = 0
    ls_rank: Any = None
    ls_step: Any = None
    ls_ops: Any = None
    pairs: Any = None
    """On a described network: the (source, destination) ranks of the messages expected, whose routes
    the C core is handed (one found missing is added and the run repeated)."""


def run(
    job: Any,
    params: CostParams,
    prepared: Any,
    cpu_noise: Optional[Timeline],
    net_noise: Optional[Timeline],
    starts: Optional[list[float]],
    topology: Optional[Routes] = None,
) -> CoreRun:
    """Simulate `job` (adaptcoll's trees as `prepared`) on the C core; CoreUnavailable if it is not built.
    `topology`: a described network's routes (see `unsupported` for what runs)."""
    plan = prepared.plan
    links, offsets = _links_for(prepared, job.size)
    program = _Program(
        _KINDS[job.collective],
        plan.count,
        plan.seg_count,
        plan.tag_base,
        plan.tag_space,
        (prepared.send_window, prepared.recv_window),
        _SYNC[prepared.sync_mode],
        int(prepared.ordered),
        links,
        offsets,
    )
    if topology is not None:
        program.pairs = _tree_pairs(prepared, job.size, job.collective)
    return _simulate(job, params, program, params.engine, params.o, cpu_noise, net_noise, starts, topology, params.call)


class NotFlat(ValueError):
    """A lock-step schedule with steps of several concurrent parts (`Together`): the Python core runs it."""


def lockstep_steps(name: str, job: Any, rpn: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every rank's steps of baseline `name` (lockstep.BASELINES) as the C core takes them: per rank its
    first step, per step its first operation, and the operations (kind, peer, lo, hi, tag). NotModelled
    where the baseline does not apply (as lockstep.baseline_starter), NotFlat for `Together` steps."""
    check_applicable(name, job.collective, job.size, job.count, rpn)
    schedule = BASELINES[name][job.collective]
    node_aware = getattr(schedule, "node_aware", False)
    size, root, count = job.size, job.root, job.count
    rank_off, step_off, ops = [0], [0], cast(list[int], [])
    for r in range(size):
        steps = schedule(r, size, root, count, rpn) if node_aware else schedule(r, size, root, count)  # type: ignore[call-arg]
        for step in steps:
            if isinstance(step, Together):
                raise NotFlat(f"baseline {name!r} runs steps of concurrent parts: it runs on the Python core")
            for op in step:
                ops.extend(op)
            step_off.append(len(ops) // 5)
        rank_off.append(len(step_off) - 1)
    return np.asarray(rank_off, np.int64), np.asarray(step_off, np.int64), np.asarray(ops or [0], np.int64)


@functools.lru_cache(maxsize=4)
def _steps_for(name: str, job: Any, rpn: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return lockstep_steps(name, job, rpn)


def run_lockstep(
    name: str,
    job: Any,
    params: CostParams,
    cpu_noise: Optional[Timeline],
    net_noise: Optional[Timeline],
    starts: Optional[list[float]],
    topology: Optional[Routes] = None,
) -> CoreRun:
    """Simulate lock-step baseline `name` for `job` on the C core (native_o per message, no engine cost)."""
    rank_off, step_off, ops = _steps_for(name, job, params.ranks_per_node)
    copy = 0 if job.collective == "bcast" else job.count
    program = _Program(
        _KINDS.get(job.collective, 0),
        lockstep=1,
        copy=copy,
        ls_rank=rank_off,
        ls_step=step_off,
        ls_ops=ops,
    )
    if topology is not None:
        program.pairs = _lockstep_pairs(rank_off, step_off, ops)
    return _simulate(job, params, program, 0.0, params.native_o, cpu_noise, net_noise, starts, topology)


@functools.lru_cache(maxsize=4)
def _tree_pairs(prepared: Any, size: int, collective: str) -> frozenset[tuple[int, int]]:
    """The (source, destination) of the tree protocols' messages: down the trees for Bcast, up for
    Reduce, both ways for Allreduce (read off the packed links: per rank its links, each (parent or -1,
    children, segments))."""
    flat, offsets = _links_for(prepared, size)
    values = flat.tolist()
    down, up = collective != "reduce", collective != "bcast"
    pairs: set[tuple[int, int]] = set()
    for r in range(size):
        at = int(offsets[r])
        nlinks = values[at]
        at += 1
        for _ in range(nlinks):
            parent, nchildren = values[at], values[at + 1]
            if up and parent >= 0:
                pairs.add((r, parent))
            if down:
                pairs.update((r, c) for c in values[at + 2 : at + 2 + nchildren])
            at += 2 + nchildren
            at += 1 + values[at]  # the segments
    return frozenset(pairs)


def _lockstep_pairs(rank_off: np.ndarray, step_off: np.ndarray, ops: np.ndarray) -> frozenset[tuple[int, int]]:
    """The (source, destination) of a lock-step schedule's sends (lockstep_steps' arrays)."""
    nops = int(step_off[-1])
    if nops == 0:
        return frozenset()
    per_rank = np.diff(step_off[rank_off])  # operations per rank
    src = np.repeat(np.arange(len(per_rank)), per_rank)
    table = ops[: 5 * nops].reshape(nops, 5)
    sends = table[:, 0] == 0  # LS_SEND
    return frozenset(zip(src[sends].tolist(), table[sends, 1].tolist()))


@functools.lru_cache(maxsize=4)
def _path_arrays(routes: Routes, pairs: frozenset[tuple[int, int]], rpn: int) -> list[np.ndarray]:
    """What ac_sim_run takes of a described network (pip, pkeys, poff, plinks, pweights, proute, lcost):
    the routes of `pairs` (those within a node of `rpn` ranks go through shared memory: none needed)."""
    size = routes.ranks
    keys = sorted(s * size + d for s, d in pairs if s != d and not (rpn > 1 and s // rpn == d // rpn))
    off = np.zeros(len(keys) + 1, np.int64)
    links: list[int] = []
    weights: list[float] = []
    per_route = np.zeros(2 * len(keys) or 2, np.float64)
    for i, key in enumerate(keys):
        path, lat, wts, worst = routes.route(key // size, key % size)
        links += path
        weights += wts
        off[i + 1] = len(links)
        per_route[2 * i] = lat
        per_route[2 * i + 1] = worst
    pip = np.array([1, int(routes.sharing == "maxmin"), routes.links, len(keys)], np.int64)
    return [
        pip,
        np.asarray(keys or [0], np.int64),
        off,
        np.asarray(links or [0], np.int32),
        np.asarray(weights or [0.0], np.float64),
        per_route,
        np.asarray(routes.cost or [0.0], np.float64),
    ]


def _simulate(
    job: Any,
    params: CostParams,
    program: _Program,
    event_cost: float,
    post_cost: float,
    cpu_noise: Optional[Timeline],
    net_noise: Optional[Timeline],
    starts: Optional[list[float]],
    topology: Optional[Routes] = None,
    call_cost: float = 0.0,
) -> CoreRun:
    lib = library()
    if lib is None:
        raise CoreUnavailable(f"adaptcoll: the simulator's C core is not available: {status()}")
    size, itemsize, rpn = job.size, job.itemsize, params.ranks_per_node
    nodes = -(-size // rpn)
    pairs: frozenset[tuple[int, int]] = frozenset()
    if topology is not None:
        topology.check_size(size)
        pairs = frozenset(program.pairs or ())
        path = _path_arrays(topology, pairs, rpn)
        nodes = size  # PathLinks: a gap and a link-noise timeline per rank
    else:
        path = [np.zeros(4, np.int64), *(np.zeros(1, t) for t in (np.int64, np.int64, np.int32, np.float64))]
        path += [np.zeros(2, np.float64), np.zeros(1, np.float64)]
    start = np.asarray(starts if starts else [0.0] * size, np.float64)
    large = params.large_from // itemsize if params.large_from else -1
    ip = np.array(
        [
            size,
            rpn,
            program.kind,
            itemsize,
            program.count,
            program.seg_count,
            program.tag_base,
            program.tag_space,
            program.windows[0],
            program.windows[1],
            program.sync,
            program.ordered,
            job.root,
            params.eager // itemsize,
            large,
            int(params.links == "pair"),
            int(params.transfer == "cpu"),
            int(cpu_noise is not None),
            int(net_noise is not None),
            program.lockstep,
            program.copy,
            params.fault_from // itemsize,
            int(params.links == "fifo"),
            int(params.copy_order == "poll"),
        ],
        np.int64,
    )
    none32, none64 = np.zeros(1, np.int32), np.zeros(1, np.int64)
    links = program.links if program.links is not None else none32
    offsets = program.offsets if program.offsets is not None else none64
    ls = [a if a is not None else none64 for a in (program.ls_rank, program.ls_step, program.ls_ops)]
    finished = np.empty(size + 1, np.float64)
    counts = np.zeros(8, np.int64)
    horizon = FIRST_HORIZON
    while True:
        cpu_d, cpu_off = _detours(cpu_noise, size, horizon)
        net_d, net_off = _detours(net_noise, nodes, horizon)
        fp = np.array(
            [
                event_cost,
                post_cost,
                params.L,
                params.g,
                params.G * itemsize,
                (params.copy or params.G) * itemsize,
                params.fold * itemsize,
                params.large_cost,
                params.node_bw or 0.0,
                horizon,
                horizon,
                params.fault * itemsize,
                params.copy_contention,
                call_cost,
            ],
            np.float64,
        )
        rc = lib.ac_sim_run(
            ip.ctypes.data,
            fp.ctypes.data,
            links.ctypes.data,
            offsets.ctypes.data,
            start.ctypes.data,
            cpu_d.ctypes.data,
            cpu_off.ctypes.data,
            net_d.ctypes.data,
            net_off.ctypes.data,
            ls[0].ctypes.data,
            ls[1].ctypes.data,
            ls[2].ctypes.data,
            finished.ctypes.data,
            counts.ctypes.data,
            *(a.ctypes.data for a in path),
        )
        if rc == _ROUTE and topology is not None:
            missing = divmod(int(counts[7]), size)
            if missing in pairs:
                raise RuntimeError(f"adaptcoll: the C core found no route {missing[0]} -> {missing[1]} it was given")
            pairs = pairs | {missing}
            path = _path_arrays(topology, pairs, rpn)
            continue
        if rc != _HORIZON:
            break
        horizon *= 2
    if rc == 1:
        raise Deadlock(
            f"{int(counts[4])} of {size} ranks never finished; {int(counts[5])} sends and {int(counts[6])} "
            "receives unmatched (C core)"
        )
    if rc != 0:
        raise RuntimeError(f"adaptcoll: the simulator's C core failed: {_ERRORS.get(rc, rc)}")
    return CoreRun(
        size,
        [float(t) for t in start],
        finished[:size].tolist(),
        int(counts[0]),
        int(counts[1]),
        int(counts[2]),
        int(counts[3]),
        cpu_noise,
        float(finished[size]),
        int(counts[5] + counts[6]),
    )
