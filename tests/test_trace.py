"""Tracing in one process: traced protocols on the loopback world record every segment of their plan
exactly once, the files parse, the merged Perfetto JSON validates (and the validator catches what it
must), the file bound holds, the setting validates, tracing off changes nothing, and the command line
fails clearly on a missing or empty directory."""

from __future__ import annotations

import itertools
import json
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.deferred import DeferredBackend
from adaptcoll.backends.numpy_backend import NumpyBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.decision import starts
from adaptcoll.plans import trees
from adaptcoll.plans.dealing import tree_links
from adaptcoll.plans.segments import plan_segments
from adaptcoll.protocols.allreduce import Allreduce
from adaptcoll.protocols.bcast import Bcast
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.links import start_on_links
from adaptcoll.protocols.reduce import Reduce
from adaptcoll.runtime import settings
from adaptcoll.runtime.engine import Engine
from adaptcoll.runtime.loopback import LoopbackWorld
from adaptcoll.trace import format as fmt
from adaptcoll.trace import record
from adaptcoll.trace.__main__ import main as trace_main
from adaptcoll.trace.merge import Slice, Timeline, load, merge
from adaptcoll.trace.perfetto import _nested, to_trace_events, validate

# -- helpers -------------------------------------------------------------------------------------


class _Idle:
    """Stands in for the engine's idle-sweep counter."""

    idle_sweeps = 0


def _recorders(directory: Path, size: int) -> list[record.Recorder]:
    """One recorder per simulated rank, as if each were its own process on one clock."""
    out = []
    for r in range(size):
        rec = record.Recorder(directory, {"world_rank": r, "world_size": size, "boot_id": "one", "started_unix_s": 1.0})
        rec.add_comm(
            {
                "members": list(range(size)),
                "instance": 0,
                "rank": r,
                "size": size,
                "ref": 0,
                "offset_ns": 0,
                "rtt_ns": 0,
            }
        )
        out.append(rec)
    return out


def _run_traced(
    directory, collective, kind, size, root, count, seg, seed, backend=None, comm_op=0, recs=None, idle_every=0
):
    """Run one collective on the loopback world with every rank traced; returns (tree set, nseg, results).
    `idle_every` k > 0: the idle-sweep counter moves before every k-th completion (as an engine's would)."""
    world = LoopbackWorld(size, seed)
    recs = recs or _recorders(directory, size)
    be = backend or NumpyBackend()
    plan = plan_segments(count, 8, seg * 8, tag_base=17 * seed, tag_space=1 << 15)
    tset = (
        trees.build_all(kind, size, root)
        if collective != "allreduce"
        else tuple(t for k in range(size) for t in trees.build_all(kind, size, k))
    )
    data = [np.arange(count, dtype="f8") + r for r in range(size)]
    outs = [np.zeros(count) for _ in range(size)]
    idle = _Idle()
    ops = []
    for r in range(size):
        trace = record.OpTrace(recs[r], recs[r].begin(0, comm_op, collective, plan), range(size), plan, idle)
        pool = SegmentPool(be, np.dtype("f8"))
        ctx = record.traced_context(OpContext(world.transports[r], be, plan, 2, 3, "first", False, pool), trace)

        def start_one(link, done, r=r, ctx=ctx, trace=trace):
            done = trace.done_callback(done)
            if collective == "bcast":
                Bcast(ctx, link.parent, link.children, data[r], link.segs, done).start()
            elif collective == "reduce":
                target = outs[r] if r == root else None
                Reduce(ctx, link.parent, link.children, data[r], target, ReduceOp("SUM"), link.segs, done).start()
            else:
                Allreduce(ctx, link.parent, link.children, data[r], outs[r], ReduceOp("SUM"), link.segs, done).start()

        ops.append(start_on_links(tree_links(tset, r, plan.nseg), None, start_one))
    if idle_every:
        steps = 0
        while not all(op.done for op in ops):
            steps += 1
            idle.idle_sweeps += steps % idle_every == 0
            assert world.step() or world._watches, "deadlock"
    else:
        world.run(lambda: all(op.done for op in ops))
    for rec in recs:
        rec.flush()
    return tset, plan.nseg, data, outs


def expected_events(collective: str, tset, rank: int, nseg: int) -> Counter:
    """(category, peer, segment) -> count that rank `rank` must record, from the trees and the dealing."""
    want: Counter = Counter()
    for link in tree_links(tset, rank, nseg):
        for s in link.segs:
            up = collective in ("reduce", "allreduce")
            down = collective in ("bcast", "allreduce")
            if up:
                for c in link.children:
                    want["recv", c, s] += 1
                if link.parent is not None:
                    want["send", link.parent, s] += 1
                want["fold", -1, s] += len(link.children)
            if down:
                if link.parent is not None:
                    want["recv", link.parent, s] += 1
                for c in link.children:
                    want["send", c, s] += 1
    return want


def recorded_events(trace: fmt.RankTrace, op: int | None = None) -> Counter:
    """(category, peer, segment) -> count of completions in a file (folds without their peer)."""
    ev = trace.events if op is None else trace.events[trace.events["op"] == op]
    got: Counter = Counter()
    for kind, peer, seg in zip(ev["kind"].tolist(), ev["peer"].tolist(), ev["seg"].tolist()):
        if kind == fmt.RECV_DONE:
            got["recv", peer, seg] += 1
        elif kind == fmt.SEND_DONE:
            got["send", peer, seg] += 1
        elif kind == fmt.FOLD_END:
            got["fold", -1, seg] += 1
    return got


def _posts_match_completions(trace: fmt.RankTrace) -> None:
    kinds = Counter(trace.events["kind"].tolist())
    assert kinds[fmt.RECV_POST] == kinds[fmt.RECV_DONE]
    assert kinds[fmt.SEND_POST] + kinds[fmt.FORWARD] == kinds[fmt.SEND_DONE]
    assert kinds[fmt.FOLD_START] == kinds[fmt.FOLD_END]


# -- every segment of a known plan exactly once ----------------------------------------------------


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_loopback_trace_has_every_segment_exactly_once(tmp_path, collective):
    for n, (kind, size, seed) in enumerate(
        itertools.product(["binomial", "binary", "chain"], [1, 2, 3, 4, 7], range(2))
    ):
        directory = tmp_path / f"{kind}-{size}-{seed}"
        root = seed % size
        tset, nseg, data, outs = _run_traced(directory, collective, kind, size, root, 37, 4, seed + n)
        if collective != "bcast":  # tracing changes no result
            total = sum(data)
            for r in range(size):
                if collective == "allreduce" or r == root:
                    np.testing.assert_array_equal(outs[r], total)
        files = load(directory)
        assert [t.world_rank for t in files] == list(range(size))
        for t in files:
            assert recorded_events(t) == expected_events(collective, tset, t.world_rank, nseg), (
                kind,
                size,
                t.world_rank,
            )
            _posts_match_completions(t)
            forwards = t.events[t.events["kind"] == fmt.FORWARD]
            received = set(t.events[t.events["kind"] == fmt.RECV_DONE]["seg"].tolist())
            assert set(forwards["seg"].tolist()) <= received
        timeline = merge(files)
        doc = to_trace_events(timeline)
        assert validate(doc) == [], (kind, size)
        transfers = sum(1 for s in timeline.slices if s.cat == "send")
        assert timeline.flows == transfers and not timeline.warnings
        assert timeline.operations[0].nbytes == (37 * 8 if size > 1 else 0)


def test_deferred_folds_are_attributed_to_their_segment(tmp_path):
    """Folds that finish later (GPU-like, polled) still pair up and belong to the segment that arrived."""
    for seed in range(3):
        be = DeferredBackend(seed=seed, max_delay_polls=5)
        tset, nseg, _, _ = _run_traced(tmp_path / str(seed), "allreduce", "binomial", 5, 0, 29, 3, seed, backend=be)
        for t in load(tmp_path / str(seed)):
            assert recorded_events(t) == expected_events("allreduce", tset, t.world_rank, nseg)
            folds = t.events[np.isin(t.events["kind"], [fmt.FOLD_START, fmt.FOLD_END])]
            received = set(t.events[t.events["kind"] == fmt.RECV_DONE]["seg"].tolist())
            assert set(folds["seg"].tolist()) <= received
        assert validate(to_trace_events(merge(load(tmp_path / str(seed))))) == []


def test_idle_spans_and_operation_selection(tmp_path):
    recs = _recorders(tmp_path, 3)
    _run_traced(tmp_path, "bcast", "binomial", 3, 0, 16, 4, 0, comm_op=0, recs=recs)
    _run_traced(tmp_path, "reduce", "binomial", 3, 1, 16, 4, 1, comm_op=1, recs=recs, idle_every=2)
    files = load(tmp_path)
    recorded = sum(int(t.events["nbytes"][t.events["kind"] == fmt.IDLE].sum()) for t in files)
    whole = merge(files)
    assert [o.name for o in whole.operations] == ["bcast", "reduce"]
    idle = [s for s in whole.slices if s.cat == "idle"]
    assert idle and {s.op for s in idle} == {1} and sum(s.sweeps for s in idle) == recorded > 0
    assert all(s.end >= s.start for s in idle)
    only = merge(files, select=1)
    assert [o.name for o in only.operations] == ["reduce"] and {s.op for s in only.slices} == {1}
    assert validate(to_trace_events(only)) == []


# -- the Perfetto format and its validator ---------------------------------------------------------


def _doc(*events):
    meta = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}} for r in (0, 1)]
    return {"traceEvents": meta + list(events)}


def _x(tid, ts, dur, cat="send", **extra):
    ev = {"ph": "X", "name": "x", "cat": cat, "pid": 0, "tid": tid, "ts": ts, "dur": dur}
    ev["args"] = {"peer": 1 - tid, "seg": 0, "bytes": 8}
    ev.update(extra)
    return ev


def test_validator_accepts_good_and_names_each_problem():
    good = _doc(
        _x(0, 0.0, 10.0),
        _x(0, 1.0, 2.0, cat="fold"),
        _x(1, 3.0, 5.0, cat="recv"),
        {"ph": "s", "name": "seg 0", "cat": "flow", "id": 1, "pid": 0, "tid": 0, "ts": 0.0},
        {"ph": "f", "bp": "e", "name": "seg 0", "cat": "flow", "id": 1, "pid": 0, "tid": 1, "ts": 3.0},
        {"ph": "B", "name": "b", "pid": 0, "tid": 1, "ts": 10.0},
        {"ph": "E", "pid": 0, "tid": 1, "ts": 11.0},
    )
    assert validate(good) == []
    cases = {
        "not an object": [],
        "missing dur": {"ph": "X", "name": "x", "cat": "send", "pid": 0, "tid": 0, "ts": 1.0},
        "is not a number >= 0": _x(0, 0.0, -1.0),
        "unknown phase": {"ph": "Q", "ts": 0},
        "without nesting": [_x(0, 0.0, 10.0), _x(0, 5.0, 10.0)],
        "no open B": {"ph": "E", "pid": 0, "tid": 0, "ts": 1.0},
        "never ends": {"ph": "B", "name": "b", "pid": 0, "tid": 0, "ts": 1.0},
        "expected one 's' and one 'f'": [
            _x(0, 0.0, 1.0),
            {"ph": "s", "name": "s", "cat": "flow", "id": 7, "pid": 0, "tid": 0, "ts": 0.5},
        ],
        "no slice on pid 0 tid 1": [
            _x(0, 0.0, 1.0),
            {"ph": "s", "name": "s", "cat": "flow", "id": 8, "pid": 0, "tid": 0, "ts": 0.5},
            {"ph": "f", "bp": "e", "name": "s", "cat": "flow", "id": 8, "pid": 0, "tid": 1, "ts": 50.0},
        ],
        "is not one of": _x(0, 0.0, 1.0, cat="compute"),
        "args must hold peer": _x(0, 0.0, 1.0, args={"peer": 1}),
        "thread_name should be": _x(5, 0.0, 1.0),
        "not a finite number": _x(0, float("nan"), 1.0),
    }
    for expected, events in cases.items():
        if expected == "not an object":
            problems = validate({"events": []})
        else:
            problems = validate(_doc(*(events if isinstance(events, list) else [events])))
        assert any(expected in p for p in problems), (expected, problems)


def test_nesting_layout_of_overlapping_transfers():
    """Random overlapping transfers with folds and idle spans between events always come out nested."""
    rng = random.Random(5)
    for trial in range(50):
        slices = []
        t = 0
        for k in range(40):
            t += rng.randrange(0, 5000)
            cat = rng.choice(["send", "recv", "fold", "idle"])
            length = rng.randrange(0, 3000) if cat in ("fold", "idle") else rng.randrange(1, 40000)
            s = Slice(0, cat, t, t + length, 0, 1, k, 8, t if cat in ("send", "recv") else -1)
            s.flow = k if cat in ("send", "recv") else -1
            slices.append(s)
        laid = _nested(slices)
        assert len(laid) == len(slices)
        for s, start, end, _, clipped in laid:
            assert s.start <= start <= end == s.end and clipped == start - s.start
        doc = to_trace_events(Timeline([0], slices, [], {0: (0, 0)}, []))
        problems = [p for p in validate(doc) if "flow" not in p]  # flows here have no partner on purpose
        assert problems == [], (trial, problems[:3])


# -- files, bounds, settings, tracing off ---------------------------------------------------------


def test_file_bound_drops_and_stops_new_operations(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "MAX_EVENTS", 40)
    monkeypatch.setattr(record, "BUFFER_EVENTS", 16)
    recs = _recorders(tmp_path, 2)
    _run_traced(tmp_path, "bcast", "binomial", 2, 0, 64, 1, 0, recs=recs)
    assert all(rec.full for rec in recs)
    files = load(tmp_path)
    assert all(len(t.events) == 40 and t.dropped > 0 for t in files)
    assert any("dropped" in w for w in merge(files).warnings)


def test_truncated_and_foreign_files_are_reported(tmp_path):
    _run_traced(tmp_path, "bcast", "binomial", 2, 0, 8, 4, 0)
    path = tmp_path / fmt.file_name(1)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(fmt.TraceFileError, match="truncated"):
        fmt.read(path)
    (tmp_path / "rank00009.adtrace").write_bytes(b"hello")
    assert trace_main([str(tmp_path)]) == 2


def test_trace_setting_is_validated(tmp_path):
    for off in ("", "0", "off", "none"):
        assert settings.from_environ({"ADAPTCOLL_TRACE": off}).trace == ""
    assert settings.from_environ({"ADAPTCOLL_TRACE": str(tmp_path)}).trace == str(tmp_path)
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ValueError, match=r"ADAPTCOLL_TRACE: .* is not a directory"):
        settings.from_environ({"ADAPTCOLL_TRACE": str(afile)})
    with pytest.raises(ValueError, match=r"trace: .* is not a directory"):
        adaptcoll.configure(trace=str(afile))
    with adaptcoll.configured(trace=str(tmp_path / "new")):
        assert adaptcoll.current_settings().trace == str(tmp_path / "new")
    assert adaptcoll.current_settings().trace == ""


def test_engine_counts_idle_sweeps():
    eng = Engine()
    eng.progress()
    eng.progress()
    assert eng.idle_sweeps == 2


def test_tracing_off_leaves_no_files_and_no_wrappers(tmp_path, monkeypatch):
    """COMM_SELF, served by adaptcoll: off, decision.starts never wraps; on, it does and files appear."""
    comm = adaptcoll.Intracomm(MPI.COMM_SELF)
    buf = np.arange(64.0)
    out = np.zeros(64)
    calls: list = []
    real = starts.traced

    def spy(st, ctx, start_one):
        calls.append(ctx)
        found = real(st, ctx, start_one)
        calls.append(found[0])
        return found

    monkeypatch.setattr(starts, "traced", spy)
    with adaptcoll.configured(native_below=0, bcast_segment_size=64, allreduce_segment_size=64):
        comm.Bcast(buf, 0)
        comm.Allreduce(buf, out)
        assert calls == [] and not list(tmp_path.iterdir())
        directory = tmp_path / "on"
        with adaptcoll.configured(trace=str(directory)):
            comm.Allreduce(buf, out)
        np.testing.assert_array_equal(out, buf)
        comm.Bcast(buf, 0)
    assert len(calls) == 2
    assert not isinstance(calls[0].transport, record.TracingTransport)
    assert isinstance(calls[1].transport, record.TracingTransport)
    assert isinstance(calls[1].backend, record.TracingBackend)
    record.close(directory)
    (t,) = load(directory)
    assert len(t.operations) == 1 and t.names == ["allreduce"]
    assert Counter(t.events["kind"].tolist())[fmt.OP_END] == 1


# -- the command line ------------------------------------------------------------------------------


def test_cli_errors_are_clear(tmp_path, capsys):
    assert trace_main([str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert trace_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no adaptcoll trace files" in err and "ADAPTCOLL_TRACE" in err
    (tmp_path / "f").write_text("x")
    assert trace_main([str(tmp_path / "f")]) == 2
    assert "not a directory" in capsys.readouterr().err
    _run_traced(tmp_path / "t", "bcast", "binomial", 2, 0, 8, 4, 0)
    assert trace_main([str(tmp_path / "t"), "--op", "3"]) == 2
    assert "--op 3" in capsys.readouterr().err


def test_cli_writes_json_and_picture(tmp_path, capsys, monkeypatch):
    _run_traced(tmp_path, "allreduce", "binomial", 4, 0, 40, 8, 0)
    out = tmp_path / "run.json"
    png = tmp_path / "timeline.png"
    try:
        import matplotlib  # noqa: F401 - optional: without it the CLI must say so instead
    except ImportError:
        assert trace_main([str(tmp_path), "-o", str(out), "--png", str(png)]) == 2
        assert "matplotlib" in capsys.readouterr().err
    else:
        assert trace_main([str(tmp_path), "-o", str(out), "--png", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        printed = capsys.readouterr().out
        assert "operation 0: allreduce 320 B" in printed and "clock offsets" in printed
        doc = json.loads(out.read_text())
        assert validate(doc) == []
        assert {e["cat"] for e in doc["traceEvents"] if e["ph"] == "X"} <= {"send", "recv", "fold", "idle"}
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert trace_main([str(tmp_path), "--png", str(tmp_path / "x.png")]) == 2
    assert "needs matplotlib" in capsys.readouterr().err
