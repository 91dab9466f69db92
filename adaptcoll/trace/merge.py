"""Merging the per-rank trace files into one timeline: clocks aligned, events paired into slices, each
send matched with its receive.

Clocks: every file holds, per communicator, the rank's offset to that communicator's rank 0 (see
`clock`); offsets are chained to the lowest COMM_WORLD rank present. Pairing: a post and the
completion of the same (operation, peer, segment) make one transfer slice; a fold start and end make
a fold slice; an IDLE record spans to the operation's next event. Matching: MPI delivers the messages
of one (communicator, sender, receiver, tag) in posting order, so the k-th send of a segment from A to
B in an operation matches B's k-th receive of it from A. A receive slice starts when its data could
start to move (the later of its post and the matching send's post); the time before that, when the
receive was posted but its sender was not ready, is kept as `posted`.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import format as fmt

__all__ = ["TraceError", "Slice", "Operation", "Timeline", "load", "clock_offsets", "merge", "summary"]


class TraceError(Exception):
    """The trace directory cannot be merged (missing, empty, unreadable): the message says why."""


@dataclass
class Slice:
    """One transfer, fold or idle span on one rank, in ns since the timeline's start (aligned clocks)."""

    rank: int
    cat: str  # "send", "recv", "fold" or "idle"
    start: int
    end: int
    op: int = -1  # index into Timeline.operations
    peer: int = -1
    seg: int = -1
    nbytes: int = 0
    posted: int = -1  # transfers: when this rank posted it
    forwarded: bool = False  # sends of a segment that arrived here earlier in the operation
    sweeps: int = 0  # idle: engine sweeps that found nothing
    flow: int = -1  # id shared by a send and its matching receive
    complete: bool = False  # its completion was recorded

    @property
    def name(self) -> str:
        """What a viewer shows, e.g. 'forward seg 3 to 0'."""
        if self.cat == "send":
            return f"{'forward' if self.forwarded else 'send'} seg {self.seg} to {self.peer}"
        if self.cat == "recv":
            return f"recv seg {self.seg} from {self.peer}"
        if self.cat == "fold":
            return f"fold seg {self.seg}" + (f" ({self.peer})" if self.peer >= 0 else "")
        return f"idle ({self.sweeps} sweeps)"


@dataclass
class Operation:
    """One collective as all ranks traced it (the same communicator and operation number)."""

    index: int
    name: str
    members: tuple[int, ...]
    comm_op: int
    nseg: int
    count: int
    seg_count: int
    start: int = 0  # earliest OP_START over ranks (ns since the timeline's start)
    end: int = 0  # latest OP_END over ranks
    per_rank: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (start, end)
    seg_bytes: dict[int, int] = field(default_factory=dict)  # segment -> its bytes (as transferred or folded)

    @property
    def nbytes(self) -> int:
        """The message size in bytes, from any segment seen moving or folding (0 if none was: one rank)."""
        for seg, nbytes in self.seg_bytes.items():
            elements = min(self.seg_count, self.count - seg * self.seg_count)
            if elements > 0:
                return self.count * (nbytes // elements)
        return 0

    @property
    def label(self) -> str:
        """e.g. 'allreduce 16777216 B, 4 segments, 4 ranks'."""
        return f"{self.name} {self.nbytes} B, {self.nseg} segments, {len(self.members)} ranks"


@dataclass
class Timeline:
    """The merged trace: slices of every rank, operations, clock offsets (ns) and warnings."""

    ranks: list[int]
    slices: list[Slice]
    operations: list[Operation]
    offsets: dict[int, tuple[int, Optional[int]]]  # rank -> (offset to the reference rank, error bound)
    warnings: list[str]
    origin_ns: int = 0  # the reference clock's reading at t = 0

    @property
    def flows(self) -> int:
        """How many sends were matched with their receive."""
        return len({s.flow for s in self.slices if s.flow >= 0})


def load(directory: str | Path) -> list[fmt.RankTrace]:
    """Every rank's trace file in `directory`, by rank. Files of an older run with another world size are
    left out (with a warning the merge reports): a run replaces only the files of its own ranks."""
    d = Path(directory)
    if not d.exists():
        raise TraceError(f"{d}: no such directory")
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    paths = sorted(d.glob("*" + fmt.SUFFIX))
    if not paths:
        raise TraceError(
            f"{d}: no adaptcoll trace files (rank*{fmt.SUFFIX}); run the program with ADAPTCOLL_TRACE={d} "
            "(the same on every rank) and make sure it served at least one collective (not native)"
        )
    try:
        traces = [fmt.read(p) for p in paths]
    except fmt.TraceFileError as exc:
        raise TraceError(str(exc)) from None
    newest = max(traces, key=lambda t: t.process.get("started_unix_s", 0.0))
    size = newest.process.get("world_size")
    kept = [t for t in traces if t.process.get("world_size") == size]
    if len(kept) < len(traces):
        stale = ", ".join(t.path.name for t in traces if t not in kept)
        kept[0].process.setdefault("warnings", []).append(f"left out files of an older run with another size: {stale}")
    return sorted(kept, key=lambda t: t.world_rank)


def clock_offsets(
    traces: list[fmt.RankTrace], measured: bool = False
) -> tuple[dict[int, tuple[int, Optional[int]]], list[str]]:
    """rank -> (its clock minus the reference rank's, bound on the error) in ns, and warnings.

    The reference is the lowest rank present; a rank's offset chains through the communicators it was
    measured on (the bound adds up half a round trip per link). Two processes under the same kernel
    (the same boot id) read the same CLOCK_MONOTONIC: their offset is 0 exactly, unless `measured`
    asks for the ping-pong estimate anyway (to see how accurate it is). A rank never linked gets 0, None."""
    boot = {t.world_rank: t.process.get("boot_id") or None for t in traces}
    edges: list[tuple[int, int, int, int]] = []  # (half round trip, rank, its reference, offset)
    for t in traces:
        for c in t.comms:
            ref = int(c.get("ref", t.world_rank))
            if ref == t.world_rank:
                continue
            if not measured and boot[t.world_rank] is not None and boot[t.world_rank] == boot.get(ref):
                edges.append((0, t.world_rank, ref, 0))
            else:
                edges.append((int(c["rtt_ns"]) // 2, t.world_rank, ref, int(c["offset_ns"])))
    edges.sort()
    ranks = [t.world_rank for t in traces]
    known: dict[int, tuple[int, Optional[int]]] = {min(ranks): (0, 0)}
    changed = True
    while changed:
        changed = False
        for err, rank, ref, off in edges:
            if ref in known and rank not in known:
                base, base_err = known[ref]
                known[rank] = (base + off, None if base_err is None else base_err + err)
                changed = True
            elif rank in known and ref not in known:
                base, base_err = known[rank]
                known[ref] = (base - off, None if base_err is None else base_err + err)
                changed = True
    warnings = []
    for r in ranks:
        if r not in known:
            known[r] = (0, None)
            warnings.append(f"rank {r}: no clock offset to rank {min(ranks)} (no traced communicator links them)")
    return known, warnings


def merge(traces: list[fmt.RankTrace], select: Optional[int] = None, measured_clocks: bool = False) -> Timeline:
    """The merged timeline of `traces` (only operation number `select` if given: see Timeline.operations;
    `measured_clocks`: align with the measured offsets even where ranks share a clock)."""
    offsets, warnings = clock_offsets(traces, measured_clocks)
    for t in traces:
        warnings.extend(f"rank {t.world_rank}: {w}" for w in t.process.get("warnings", []))
        if t.dropped:
            warnings.append(f"rank {t.world_rank}: {t.dropped} events dropped (the trace file reached its bound)")
    ops, local_ops = _operations(traces, offsets)
    if select is not None and not 0 <= select < len(ops):
        raise TraceError(f"--op {select}: the trace has operations 0..{len(ops) - 1}")
    slices: list[Slice] = []
    sends: dict[tuple[int, int, int, int], list[Slice]] = defaultdict(list)
    recvs: dict[tuple[int, int, int, int], list[Slice]] = defaultdict(list)
    for t in traces:
        off = offsets[t.world_rank][0]
        _pair(t, off, local_ops, select, slices, sends, recvs, warnings)
    times = [s.posted if s.posted >= 0 else s.start for s in slices] + [o.start for o in ops if o.per_rank]
    origin = min(times, default=0)
    for s in slices:
        s.start -= origin
        s.end -= origin
        if s.posted >= 0:
            s.posted -= origin
    for o in ops:
        o.start -= origin
        o.end -= origin
        o.per_rank = {r: (a - origin, b - origin) for r, (a, b) in o.per_rank.items()}
    _match(sends, recvs, warnings)
    kept_ops = ops if select is None else [ops[select]]
    return Timeline(sorted(t.world_rank for t in traces), slices, kept_ops, offsets, warnings, origin)


_OpKey = tuple[tuple[int, ...], int, int]  # (members, instance, comm_op): the same on every rank


def _operations(
    traces: list[fmt.RankTrace], offsets: dict[int, tuple[int, Optional[int]]]
) -> tuple[list[Operation], dict[tuple[int, int], Operation]]:
    """The distinct operations (ordered by their earliest start) and (rank, local op id) -> operation."""
    by_key: dict[_OpKey, Operation] = {}
    local: dict[tuple[int, int], _OpKey] = {}
    starts: dict[_OpKey, int] = {}
    for t in traces:
        comms = {int(c["index"]): c for c in t.comms}
        off = offsets[t.world_rank][0]
        first = {}
        for e in t.events[t.events["kind"] == fmt.OP_START].tolist():
            first[e[1]] = e[0] - off
        for row in t.operations.tolist():
            op, comm, comm_op, name, nseg, seg_count, count = row[:7]
            c = comms.get(comm)
            if c is None:
                continue
            key = (tuple(c["members"]), int(c["instance"]), comm_op)
            local[(t.world_rank, op)] = key
            if key not in by_key:
                by_key[key] = Operation(-1, t.names[name], key[0], comm_op, nseg, count, seg_count)
            if op in first:
                starts[key] = min(starts.get(key, first[op]), first[op])
    ordered = sorted(by_key, key=lambda k: starts.get(k, 0))
    for i, key in enumerate(ordered):
        by_key[key].index = i
        by_key[key].start = starts.get(key, 0)
    out = [by_key[k] for k in ordered]
    return out, {rk: by_key[key] for rk, key in local.items()}


def _pair(
    t: fmt.RankTrace,
    off: int,
    local_ops: dict[tuple[int, int], Operation],
    select: Optional[int],
    slices: list[Slice],
    sends: dict[tuple[int, int, int, int], list[Slice]],
    recvs: dict[tuple[int, int, int, int], list[Slice]],
    warnings: list[str],
) -> None:
    """Pair one rank's records into slices (appended to `slices`; transfers also to sends/recvs, keyed
    by (operation, sender, receiver, segment), in posting order)."""
    rank = t.world_rank
    waiting: dict[tuple[int, int, int, int], deque[Slice]] = defaultdict(deque)
    idle: Optional[Slice] = None
    unpaired = 0
    for t_ns, op_id, kind, peer, seg, nbytes in t.events.tolist():
        when = t_ns - off
        if idle is not None:  # an idle span lasts until the operation's next event
            idle.end = max(idle.start, when)
            slices.append(idle)
            idle = None
        op = local_ops.get((rank, op_id))
        if op is None or (select is not None and op.index != select):
            continue
        if kind == fmt.OP_START:
            a, b = op.per_rank.get(rank, (when, when))
            op.per_rank[rank] = (min(a, when), b)
        elif kind == fmt.OP_END:
            a, b = op.per_rank.get(rank, (when, when))
            op.per_rank[rank] = (a, max(b, when))
            op.end = max(op.end, when)
        elif kind == fmt.IDLE:
            idle = Slice(rank, "idle", when, when, op.index, sweeps=nbytes, complete=True)
        elif kind in _OPENS:
            cat = _OPENS[kind]
            s = Slice(rank, cat, when, -1, op.index, peer, seg, nbytes, when if cat != "fold" else -1)
            s.forwarded = kind == fmt.FORWARD
            waiting[(op_id, _CATS.index(cat), peer if cat != "fold" else -1, seg)].append(s)
            if cat == "send":
                sends[(op.index, rank, peer, seg)].append(s)
            elif cat == "recv":
                recvs[(op.index, peer, rank, seg)].append(s)
        elif kind in _CLOSES:
            cat = _CLOSES[kind]
            queue = waiting.get((op_id, _CATS.index(cat), peer if cat != "fold" else -1, seg))
            if not queue:
                unpaired += 1
                continue
            s = queue.popleft()
            s.end, s.complete = when, True
            slices.append(s)
            if nbytes > op.seg_bytes.get(seg, 0):
                op.seg_bytes[seg] = nbytes
    left = sum(len(q) for q in waiting.values())
    if left or unpaired:
        warnings.append(
            f"rank {rank}: {left} posts without completion and {unpaired} completions without post "
            "(an operation still running when the file was written, or events dropped)"
        )


_CATS = ("send", "recv", "fold")
_OPENS = {fmt.SEND_POST: "send", fmt.FORWARD: "send", fmt.RECV_POST: "recv", fmt.FOLD_START: "fold"}
_CLOSES = {fmt.SEND_DONE: "send", fmt.RECV_DONE: "recv", fmt.FOLD_END: "fold"}


def _match(
    sends: dict[tuple[int, int, int, int], list[Slice]],
    recvs: dict[tuple[int, int, int, int], list[Slice]],
    warnings: list[str],
) -> None:
    """Give each send and its matching receive one flow id; a receive starts once its data can move."""
    flow = 0
    unmatched = 0
    for key in sorted(sends.keys() | recvs.keys()):
        out, into = sends.get(key, []), recvs.get(key, [])
        pairs = list(zip(out, into))
        unmatched += abs(len(out) - len(into))
        for s, r in pairs:
            if not (s.complete and r.complete):
                continue
            r.start = min(max(r.posted, s.posted), r.end)
            s.flow = r.flow = flow
            flow += 1
    if unmatched:
        warnings.append(f"{unmatched} transfers without a matching transfer on the peer (a rank's file is missing?)")


def summary(timeline: Timeline) -> str:
    """A plain-text account of where each rank's time went, per operation, plus clock offsets and warnings.

    Per rank: the operation's duration on that rank (start to its last end), the time in folds and in
    idle spans, the rest (posting, callbacks, bookkeeping, sweeps that found work), transfers and
    their mean latency (post to completion)."""
    lines = []
    for o in timeline.operations:
        lines.append(f"operation {o.index}: {o.label}: {(o.end - o.start) / 1e3:.1f} us from first start to last end")
        lines.append(
            f"  {'rank':>4} {'time_us':>9} {'fold_us':>9} {'idle_us':>9} {'other_us':>9} "
            f"{'recvs':>6} {'sends':>6} {'folds':>6} {'recv_lat_us':>11} {'send_lat_us':>11}"
        )
        mine = [s for s in timeline.slices if s.op == o.index]
        for rank in sorted(o.per_rank):
            a, b = o.per_rank[rank]
            own = [s for s in mine if s.rank == rank]
            fold = sum(s.end - s.start for s in own if s.cat == "fold")
            idle = sum(s.end - s.start for s in own if s.cat == "idle")
            recv = [s.end - s.posted for s in own if s.cat == "recv"]
            send = [s.end - s.posted for s in own if s.cat == "send"]
            nfold = sum(1 for s in own if s.cat == "fold")
            lines.append(
                f"  {rank:>4} {(b - a) / 1e3:>9.1f} {fold / 1e3:>9.1f} {idle / 1e3:>9.1f} "
                f"{(b - a - fold - idle) / 1e3:>9.1f} {len(recv):>6} {len(send):>6} {nfold:>6} "
                f"{_mean_us(recv):>11} {_mean_us(send):>11}"
            )
    lines.append(
        "clock offsets to rank "
        + str(timeline.ranks[0] if timeline.ranks else 0)
        + " (ns, +- bound): "
        + ", ".join(
            f"{r}: {o:+d}" + (f" +-{e}" if e is not None else " (unknown)")
            for r, (o, e) in sorted(timeline.offsets.items())
        )
    )
    lines.extend(f"warning: {w}" for w in timeline.warnings)
    return "\n".join(lines)


def _mean_us(values: list[int]) -> str:
    return f"{sum(values) / len(values) / 1e3:.1f}" if values else "-"
