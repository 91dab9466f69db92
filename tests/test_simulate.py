"""adaptcoll.simulate in-process: closed forms, exactly-once delivery, correct results, determinism per seed,
noise timelines, calibration round trip, parameters files, plug-in protocols, traces and sweeps."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from pathlib import Path

import pytest

from adaptcoll.protocols.pieces import ChildSendQueues, WindowedReceiver
from adaptcoll.runtime import settings
from adaptcoll.simulate import cli
from adaptcoll.simulate.calibrate import calibrate, links_from_pair_order, simulated_time
from adaptcoll.simulate.lockstep import BASELINES, NotModelled
from adaptcoll.simulate.measured import EngineCost, Measurement, read_measurements, read_pair_order
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import CostParams, load_params, params_from_dict
from adaptcoll.simulate.programs import Job, RankJob, prepare, register_protocol
from adaptcoll.simulate.run import compare, run_once
from adaptcoll.simulate.sweep import ROW_FIELDS, parse_rank_list, rows_csv, sweep
from adaptcoll.simulate.timelines import FixedFraction, Periodic, Poisson, Replay, read_trace
from adaptcoll.simulate.trace import trace_events
from adaptcoll.simulate.world import TraceLog

# A regime where the closed forms below hold: links are the bottleneck (B = m G > e + o + 2L) and a
# rendezvous handshake never finds its receiver inside a callback (L > e + 2o).
P = CostParams(L=4e-6, o=0.7e-6, g=0.0, G=1e-10, fold=3e-10, engine=2.1e-6, native_o=0.3e-6, eager=1024, links="fifo")
UNCAPPED = settings.Settings(max_segments=0)
REL = 1e-9


def _time(job: Job, impl: str = "adaptcoll", params: CostParams = P) -> float:
    return run_once(job, params, impl)[0].time_s


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


# -- (a) exactness: closed forms ---------------------------------------------------------------------
@pytest.mark.parametrize("k", range(0, 9))
def test_binomial_bcast_one_segment_closed_form(k):
    """2^k ranks, one segment of m bytes: each level costs e + o + 2L + mG (the largest subtree is served
    first, so later children never lie on the critical path), plus the last receive's event."""
    m = 1 << 20
    t = _time(Job("bcast", 1 << k, m, m, "binomial", UNCAPPED))
    expect = k * (P.engine + P.o + 2 * P.L + m * P.G) + P.engine
    assert _close(t, expect), (t, expect)


@pytest.mark.parametrize("ranks", [2, 3, 5, 17])
@pytest.mark.parametrize("nseg", [1, 2, 7, 16])
def test_pipeline_closed_form(ranks, nseg):
    """A chain of n segments: the first segment takes (P-1) hops of e + o + 2L + B, each later one B more."""
    seg = 1 << 18
    t = _time(Job("bcast", ranks, nseg * seg, seg, "pipeline", UNCAPPED))
    b = seg * P.G
    expect = (ranks - 1) * (P.engine + P.o + 2 * P.L + b) + (nseg - 1) * b + P.engine
    assert _close(t, expect), (t, expect)


@pytest.mark.parametrize("k", range(0, 9))
def test_binomial_reduce_one_segment_closed_form(k):
    """2^k ranks: each level adds 2L + mG (handshake + data), e + f (fold) and o (post the send up)."""
    m = 1 << 20
    t = _time(Job("reduce", 1 << k, m, m, "binomial", UNCAPPED))
    fold = (m // 4) * 4 * P.fold
    if k == 0:  # a lone root copies its contribution into the result
        expect = P.engine + fold
    else:
        expect = k * (2 * P.L + m * P.G + P.engine + fold + P.o) + P.engine
    assert _close(t, expect), (t, expect)


@pytest.mark.parametrize("k", range(0, 9))
def test_binomial_bcast_closed_form_with_fair_links(k):
    """Fair sharing equals FIFO when no two messages are on a link at once (here mG < o: each send is done
    before the next is posted), so the binomial closed form holds for small segments too."""
    m = 4096
    fair = dataclasses.replace(P, links="fair")
    t = _time(Job("bcast", 1 << k, m, m, "binomial", UNCAPPED), params=fair)
    assert m * P.G < P.o
    assert _close(t, k * (P.engine + P.o + 2 * P.L + m * P.G) + P.engine)


def test_fair_links_share_fifo_links_queue():
    """A root sends one 1 MiB segment to two children (o apart): fair sharing delivers both near the end (the
    first child's data shares the link once the second starts), FIFO the first one B earlier; same last one."""
    m = 1 << 20
    b = m * P.G
    job = Job("bcast", 3, m, m, "linear", UNCAPPED)
    _, fifo, _ = run_once(job, P)
    _, fair, _ = run_once(job, dataclasses.replace(P, links="fair"))
    assert _close(fifo.finished[1], 2 * P.engine + P.o + 2 * P.L + b)
    assert _close(fair.finished[1], 2 * P.engine + 2 * P.L + 2 * b)
    assert _close(fifo.finished[2], fair.finished[2])
    assert _close(fair.finished[2], 2 * P.engine + P.o + 2 * P.L + 2 * b)


def test_ranks_of_one_node_share_its_link():
    """Two ranks per node, a flat tree over 4 ranks: the root's node link carries the messages to ranks 2 and
    3 one after the other (and node 1's link receives them in turn); rank 1, on the root's node, copies its
    message itself. The last one arrives 2L + 2mG after the root posted its second send (e + 2o)."""
    m = 1 << 20
    alone = _time(Job("bcast", 4, m, m, "linear", UNCAPPED))
    shared = _time(Job("bcast", 4, m, m, "linear", UNCAPPED), params=dataclasses.replace(P, ranks_per_node=2))
    b = m * P.G
    assert _close(shared, 2 * P.engine + 2 * P.o + 2 * P.L + 2 * b)
    assert _close(alone, 2 * P.engine + P.o + 2 * P.L + 3 * b)  # one link per rank: all three on the root's


@pytest.mark.parametrize("k", range(0, 9))
def test_lockstep_binomial_bcast_closed_form(k):
    """MPICH's binomial Bcast, blocking sends: k steps of native_o + 2L + mG on the critical path."""
    m = 1 << 20
    t = _time(Job("bcast", 1 << k, m, m), "binomial")
    assert _close(t, k * (P.native_o + 2 * P.L + m * P.G))


# -- delivery and results ----------------------------------------------------------------------------
KINDS = ["binomial", "pipeline", "chain", "binary", "knomial", "linear", "two_tree", "in_order_binomial"]


def _segment_trees(job: Job) -> list:
    prep = prepare(job)
    return [prep.trees[s % len(prep.trees)] for s in range(prep.plan.nseg)]


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_every_segment_delivered_exactly_once(collective):
    """Real data through the real protocols: results right, and every segment crosses each edge of its tree
    exactly once in each direction the collective uses (down: bcast, up: reduce, both: allreduce)."""
    noise = parse_noise(["1kHz x 40us, poisson", "net: 2kHz x 5us", "skew: uniform:50us"])
    transfers = [CostParams(eager=4096), CostParams(eager=4096, transfer="cpu"), CostParams(ranks_per_node=4)]
    for i, (kind, size) in enumerate((k, s) for k in KINDS for s in (1, 2, 3, 7, 12, 33)):
        cfg = settings.Settings(max_segments=0, allreduce_roots=(i % 3))
        job = Job(collective, size, 9000 + 8 * i, 1024, kind, cfg)
        params = transfers[i % 3]
        _, world, bufs = run_once(job, params, noise=noise if i % 2 else None, seed=i, data=True, record=True)
        bufs.check(job.root)
        assert world.unmatched == 0
        crossed = collections.Counter((src, dst, tag) for src, dst, tag, _ in world.delivered)
        expected = collections.Counter()
        for s, tree in enumerate(_segment_trees(job)):
            for child in range(size):
                parent = tree.parent(child)
                if parent is None:
                    continue
                if collective in ("bcast", "allreduce"):
                    expected[(parent, child, s)] += 1
                if collective in ("reduce", "allreduce"):
                    expected[(child, parent, s)] += 1
        assert crossed == expected, (kind, size)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_lockstep_baselines_compute_the_collective(name):
    for collective in BASELINES[name]:
        for size in range(1, 14):
            job = Job(collective, size, 4 * (1000 + size), 4096)
            try:
                _, world, bufs = run_once(job, CostParams(eager=2048), name, data=True)
            except NotModelled:  # an Open MPI rule's pick at this point is not modelled
                continue
            bufs.check(job.root)
            assert world.unmatched == 0


def test_plugged_in_protocol_runs_by_name():
    """A non-tree protocol built from the library's pieces, registered by name and run like the others."""

    def flat(j: RankJob) -> None:
        segs = range(j.ctx.plan.nseg)
        if j.rank == j.root:
            others = [r for r in range(j.size) if r != j.root]
            queues = ChildSendQueues(j.ctx, others, j.buf, segs, j.on_complete)
            if not others:
                j.on_complete()
            queues.all_ready()
        else:
            WindowedReceiver(j.ctx, j.root, j.buf, segs, lambda pos: None, j.on_complete).start()

    register_protocol("bcast", "flat_test", flat)
    for size in (1, 2, 9):
        job = Job("bcast", size, 5000, 512, "flat_test", UNCAPPED)
        _, world, bufs = run_once(job, P, data=True, record=True)
        bufs.check()
        assert len(world.delivered) == (size - 1) * 10
    assert prepare(Job("bcast", 4, 5000, 512, "flat_test")).protocol == "flat_test"


# -- determinism ---------------------------------------------------------------------------------------
def test_same_seed_same_results_other_seed_other_noise(tmp_path):
    trace = tmp_path / "noise.txt"
    trace.write_text("# unit: us\n0 30\n700 12\n2300 80\n")
    cases = [
        ["100Hz x 250us"],
        ["10kHz x 2.5us, poisson"],
        [f"trace: {trace}", "skew: exponential:20us", "net: 1kHz x 3us, poisson"],
        ["fraction: 2.5%"],
    ]
    for comps in cases:
        noise = parse_noise(comps)
        job = Job("allreduce", 24, 1 << 20, 128 << 10)
        a = compare(job, P, noise, ("rabenseifner",), seed=5, samples=2)
        b = compare(job, P, noise, ("rabenseifner",), seed=5, samples=2)
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        if comps != ["fraction: 2.5%"]:
            c = compare(job, P, noise, ("rabenseifner",), seed=6, samples=2)
            assert a["results"][0]["noisy_us"] != c["results"][0]["noisy_us"]
    args = ["--collective", "reduce", "--ranks", "40", "--size", "2M", "--segment", "256K", "--seed", "3"]
    args += ["--noise", "1kHz x 25us, poisson", "--baseline", "binomial", "--samples", "3"]
    for name in ("a.json", "b.json"):
        assert cli.main([*args, "--json", str(tmp_path / name)]) == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    doc = json.loads((tmp_path / "a.json").read_text())
    assert [r["impl"] for r in doc["results"]] == ["adaptcoll", "lockstep:binomial"]
    assert len(doc["results"][0]["noisy_us"]) == 3


# -- noise timelines ------------------------------------------------------------------------------------
def test_periodic_timeline_stretches_work_over_detours():
    tl = Periodic(1, seed=1, frequency_hz=1000, duration_s=100e-6)
    detours = tl.detours(0, 0.0, 0.01)
    s0, e0 = next((s, e) for s, e in detours if s > 0)
    assert math.isclose(e0 - s0, 100e-6) and math.isclose(detours[2][0] - detours[1][0], 1e-3)
    assert tl.advance(0, s0 - 50e-6, 10e-6) == pytest.approx(s0 - 40e-6)  # done before the detour
    assert tl.advance(0, s0 - 50e-6, 60e-6) == pytest.approx(e0 + 10e-6)  # waits it out
    assert tl.advance(0, s0 - 50e-6, 0.0) == pytest.approx(s0 - 50e-6)
    tl2 = Periodic(1, seed=1, frequency_hz=1000, duration_s=100e-6)
    assert tl2.advance(0, s0 + 10e-6, 0.0) == pytest.approx(e0)  # inside a detour: its end
    assert tl2.advance(0, s0 + 20e-6, 1e-6) == pytest.approx(e0 + 1e-6)  # the same detour still counts
    assert tl2.advance(0, s0 + 2.15e-3, 2.85e-3) == pytest.approx(s0 + 2.15e-3 + 2.85e-3 + 3 * 100e-6)


def test_poisson_and_replay_take_their_share():
    tl = Poisson(3, seed=4, frequency_hz=2000, duration_s=20e-6)
    horizon = 20.0
    busy = sum(min(e, horizon) - max(s, 0) for s, e in tl.detours(2, 0.0, horizon))
    assert busy / horizon == pytest.approx(0.04, rel=0.05)
    assert tl.advance(2, 0.0, 1.0) == pytest.approx(1.0 / (1 - 0.04), rel=0.03)
    rp = Replay(2, 0, [0.0, 0.5e-3], [0.1e-3, 0.2e-3], 1e-3)
    assert rp.noise_fraction == pytest.approx(0.3)
    assert rp.advance(0, 0.0, 0.07) == pytest.approx(0.1, rel=0.02)
    assert FixedFraction(1, 0, 0.2).advance(0, 1.0, 0.8) == pytest.approx(2.0)


def test_trace_files(tmp_path):
    two = tmp_path / "selfish.txt"
    two.write_text("# selfish detour\n# unit: ns\n1000 500\n5000 250\n# span: 10000\n")
    starts, durations, span = read_trace(two)
    assert starts == [0.0, pytest.approx(4e-6)] and durations == [pytest.approx(5e-7), pytest.approx(2.5e-7)]
    assert span == pytest.approx(1e-5)
    fwq = tmp_path / "fwq.txt"
    fwq.write_text("100\n100\n130\n100\n")
    starts, durations, span = read_trace(fwq)
    assert starts == [pytest.approx(300e-6)] and durations == [pytest.approx(30e-6)] and span == pytest.approx(430e-6)
    bad = tmp_path / "bad.txt"
    cases = [("1 2 3\n", "expected"), ("x 1\n", "not a number"), ("# unit: h\n1 1\n", "unit"), ("", "no data")]
    for text, why in cases:
        bad.write_text(text)
        with pytest.raises(ValueError, match=why):
            read_trace(bad)


def test_noise_values_are_checked():
    for value, why in [
        ("10Hz", "cannot read"),
        ("skew: gauss:1ms", "DIST"),
        ("fraction: 120%", r"\[0, 1\)"),
        ("trace: /nonexistent/file", "cannot read"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_noise([value])
    with pytest.raises(ValueError, match="only one CPU noise"):
        parse_noise(["1kHz x 25us", "fraction: 1%"])
    assert parse_noise(["off", ""]).quiet


# -- calibration ----------------------------------------------------------------------------------------
def _synthetic_osu(path, truth: CostParams, ranks: int, sizes=(1 << 20, 4 << 20, 16 << 20)) -> None:
    """An osu.py-format JSON file whose medians are the simulator's own times under `truth`."""
    label = "adaptcoll:native_below=0"
    cfg = settings.Settings(native_below=0)
    results = []
    for collective in ("bcast", "reduce", "allreduce"):
        for size in sizes:
            m = Measurement(collective, ranks, size, label, "adaptcoll", cfg, 1.0, None, "synthetic")
            results.append(
                {"collective": collective, "size": size, "impl": label, "median_us": simulated_time(m, truth) * 1e6}
            )
    doc = {
        "tool": "bench/osu.py",
        "ranks": ranks,
        "options": {"noise": None},
        "impls": [{"label": label, "kind": "adaptcoll", "settings": dataclasses.asdict(cfg)}],
        "results": results,
    }
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("links, tolerance", [("fifo", 1e-6), ("fair", 2e-2)])
def test_calibration_round_trip(tmp_path, links, tolerance):
    """Times simulated with known parameters are fitted back to them (exactly with FIFO links, whose times are
    piecewise linear in the parameters; closely with fair sharing, whose small event-order jumps stop it)."""
    truth = CostParams(L=3.1e-6, o=4.0e-6, G=1.3e-10, fold=4.2e-10, engine=2.5e-6, links=links)
    sizes = (1 << 20, 4 << 20, 16 << 20) if links == "fifo" else (1 << 20, 16 << 20)
    files = []
    for ranks in (2, 4):
        files.append(tmp_path / f"osu{ranks}.json")
        _synthetic_osu(files[-1], truth, ranks, sizes)
    engine = tmp_path / "engine.txt"
    engine.write_text(
        "MPI, 2 ranks, 2000 segments of 8 B (median over 7): adaptcoll adds rank 0: 2.50 us, rank 1: 2.50 us "
        "per segment event; the bare mpi4py loop costs rank 0: 4.00 us, rank 1: 4.00 us per message\n"
    )
    rows = [m for f in files for m in read_measurements(f)]
    fitted, info = calibrate(rows, EngineCost(2.5, 4.0), start=CostParams(links=links))
    for field in ("L", "G", "fold"):
        assert getattr(fitted, field) == pytest.approx(getattr(truth, field), rel=tolerance), field
    assert info["rms_log_error"] < tolerance
    if links == "fair":
        return
    out, start = tmp_path / "params.json", tmp_path / "start.json"
    start.write_text('{"links": "fifo"}')
    argv = ["calibrate", "--osu", str(files[0]), "--osu", str(files[1]), "--engine-cost", str(engine)]
    assert cli.main([*argv, "--params", str(start), "--out", str(out)]) == 0
    loaded = load_params(out)
    assert pytest.approx(truth.G, rel=1e-6) == loaded.G
    assert pytest.approx(2.5e-6) == loaded.engine


PAIR_ORDER = Path(__file__).resolve().parents[1] / "bench" / "results" / "pair_order"


def test_link_model_from_pair_order_measurements(tmp_path):
    """bench/pair_order.py's measurements on this project's machine decide `links`: MPICH's messages of one
    pair in order ("pair"), Open MPI's together ("fair"); a ratio in between, or only eager-sized rows,
    refuses with the reason; a bad file names itself."""
    for lib, want in (("mpich", "pair"), ("openmpi", "fair")):
        for launch in (1, 2):
            assert links_from_pair_order(read_pair_order(PAIR_ORDER / f"{lib}_{launch}.json")) == want
    assert links_from_pair_order([(1 << 20, 5e-5, 1e-4), (4 << 20, 2e-4, 4e-4)]) == "pair"
    assert links_from_pair_order([(1 << 20, 1e-4, 1e-4)]) == "fair"
    with pytest.raises(ValueError, match=r"completes at 0\.80 of the second"):
        links_from_pair_order([(1 << 20, 8e-5, 1e-4)])
    with pytest.raises(ValueError, match="no row of 64 KiB or more"):
        links_from_pair_order([(4096, 1e-6, 2e-6)])
    bad = tmp_path / "order.json"
    for text in ("{}", '{"rows": [{"size": 65536, "first": 0, "second": 1e-5}]}', "not json", '{"rows": []}'):
        bad.write_text(text)
        with pytest.raises(ValueError, match="pair order") as err:
            read_pair_order(bad)
        assert str(bad) in str(err.value)


def test_calibrate_takes_the_link_model_from_pair_order(tmp_path, capsys):
    """`calibrate --pair-order FILE` writes the measured link model into the parameters file (and names the
    file among its sources), whatever --params started from."""
    truth = CostParams(links="fifo")
    osu = tmp_path / "osu2.json"
    _synthetic_osu(osu, truth, 2, (1 << 20,))
    start, out = tmp_path / "start.json", tmp_path / "params.json"
    start.write_text('{"links": "fifo"}')
    order = PAIR_ORDER / "mpich_1.json"
    argv = ["calibrate", "--osu", str(osu), "--fit", "G", "--params", str(start), "--pair-order", str(order)]
    assert cli.main([*argv, "--out", str(out)]) == 0
    assert load_params(out).links == "pair"
    assert json.loads(out.read_text())["source"]["pair_order"] == str(order)
    rows = read_measurements(osu)
    fitted, _ = calibrate(
        rows,
        start=CostParams(links="pair"),
        fields=["G"],
        pair_order=read_pair_order(order.with_name("openmpi_1.json")),
    )
    assert fitted.links == "fair"
    capsys.readouterr()
    for name in ("links", "copy_order", "eager", "latency"):  # choices and thresholds are not fitted
        assert cli.main(["calibrate", "--osu", str(osu), "--fit", name, "--out", str(out)]) == 2
        assert f"--fit: cannot fit '{name}'; choose from L, o, g, G, fold," in capsys.readouterr().err


def test_bad_parameter_files_name_the_field(tmp_path, capsys):
    path = tmp_path / "p.json"
    cases = [
        ('{"L": "fast"}', "field 'L' must be a number"),
        ('{"G": -1e-10}', "field 'G' must be a finite number >= 0"),
        ('{"fold": NaN}', "field 'fold'"),
        ('{"eager": 100.5}', "field 'eager'"),
        ('{"transfer": "pigeon"}', "field 'transfer'"),
        ('{"ranks_per_node": 0}', "field 'ranks_per_node'"),
        ('{"links": "psychic"}', "field 'links' must be 'fair' or 'fifo'"),
        ('{"copy_order": "later"}', "field 'copy_order' must be 'ready' or 'poll'"),
        ('{"latency": 1e-6}', "unknown field 'latency'"),
        ('{"format": "other/2"}', "field 'format'"),
        ('{"engine": true}', "field 'engine' must be a number"),
        ("[1, 2]", "expected a JSON object"),
        ("{L: 1}", "not valid JSON"),
    ]
    for text, why in cases:
        path.write_text(text)
        with pytest.raises(ValueError, match=why) as err:
            load_params(path)
        assert str(path) in str(err.value)
    argv = ["--collective", "bcast", "--ranks", "4", "--size", "1M", "--segment", "256K", "--params", str(path)]
    assert cli.main(argv) == 2
    assert "not valid JSON" in capsys.readouterr().err
    path.write_text('{"L": 2e-6, "source": {"osu": []}, "units": "s"}')
    assert load_params(path).L == 2e-6


# -- outputs --------------------------------------------------------------------------------------------
def test_perfetto_trace_of_a_reduce(tmp_path):
    job = Job("reduce", 6, 1 << 20, 256 << 10)
    log = TraceLog()
    noise = parse_noise(["2kHz x 50us"])
    stats, world, _ = run_once(job, P, noise=noise, trace=log)
    events = trace_events(log, job.size, lambda tag: tag, world.cpu_noise, stats.time_s)
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {r: f"rank {r}" for r in range(6)}
    cats = collections.Counter(e["cat"] for e in events if e["ph"] == "X")
    assert cats["send"] == cats["recv"] == world.messages and cats["fold"] > 0 and cats["idle"] > 0
    assert all(set(e["args"]) == {"peer", "seg", "bytes"} for e in events if e["ph"] == "X")
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == world.messages
    assert all(ends[i]["ts"] >= starts[i]["ts"] for i in starts)
    out = tmp_path / "t.json"
    argv = ["--collective", "bcast", "--ranks", "8", "--size", "1M", "--segment", "256K", "--trace", str(out)]
    assert cli.main(argv) == 0
    assert json.loads(out.read_text())["traceEvents"][0]["ph"] == "M"


def test_sweep_table_and_plots(tmp_path):
    assert parse_rank_list("16:128,1K") == [16, 32, 64, 128, 1024]
    assert parse_rank_list("4:64:4") == [4, 16, 64]
    conds = ["100Hz x 250us", "1kHz x 25us"]
    rows = sweep("bcast", [16, 32], 1 << 20, 256 << 10, conds, ["binomial"], P, samples=2)
    assert len(rows) == 2 * 2 * 2 and {r["impl"] for r in rows} == {"adaptcoll", "lockstep:binomial"}
    text = rows_csv(rows)
    assert text.splitlines()[0] == ",".join(ROW_FIELDS) and len(text.splitlines()) == 9
    pytest.importorskip("matplotlib")
    from adaptcoll.simulate import plots

    plots.plot_auto(rows, tmp_path / "ranks.png")
    plots.plot_auto([r for r in rows if r["ranks"] == 16], tmp_path / "grid.png")
    plots.plot_bars(rows, tmp_path / "bars.png")
    assert all((tmp_path / n).stat().st_size > 1000 for n in ("ranks.png", "grid.png", "bars.png"))


def test_pair_links_keep_one_pairs_messages_in_order():
    """links 'pair': fair between sender-receiver pairs, one pair's messages one after another (one RDMA
    queue pair). A chain's second segment then costs about one hop more than the first alone, not a
    second fill (with 'fair' both segments of a send window of 2 share each hop and arrive together);
    results stay exact, on the default network and on a described one."""
    from adaptcoll.schedule import shapes
    from adaptcoll.simulate.routes import Routes

    seg = 768 << 10
    base = CostParams()
    fair, pair = base, dataclasses.replace(base, links="pair")
    one = _time(Job("bcast", 8, seg, seg, "pipeline", UNCAPPED), params=pair)
    hop = one / 7
    two_pair = _time(Job("bcast", 8, 2 * seg, seg, "pipeline", UNCAPPED), params=pair)
    two_fair = _time(Job("bcast", 8, 2 * seg, seg, "pipeline", UNCAPPED), params=fair)
    assert two_pair - one < 1.5 * hop < 0.5 * (two_fair - one)
    for size in (2, 5, 9):
        for coll in ("bcast", "reduce", "allreduce"):
            job = Job(coll, size, 4 * 3001, 4 * 500, "two_tree", UNCAPPED)
            _, world, bufs = run_once(job, dataclasses.replace(pair, eager=2048), data=True, seed=size)
            bufs.check()
            assert world.unmatched == 0
    routes = Routes(shapes.nic_nodes(3, 4, nics=2))
    for coll in ("bcast", "reduce", "allreduce"):
        job = Job(coll, 12, 4 * 5000, 4 * 400, "two_tree", UNCAPPED)
        _, world, bufs = run_once(job, pair, data=True, seed=1, topology=routes)
        bufs.check()
        assert world.unmatched == 0
    with pytest.raises(ValueError, match="links must be one of fair, fifo, pair"):
        CostParams(links="fast")


def test_engine_cost_lines_per_engine(tmp_path):
    """bench/engine_cost.py prints one line per engine; calibrate --engine picks one (older output: its line)."""
    from adaptcoll.simulate.measured import read_engine_cost

    new = tmp_path / "new.txt"
    new.write_text(
        "MPI, 2 ranks, 2000 messages of 8 B, 8 in flight, median of 9 interleaved rounds: c_loop 0.3 us\n"
        "python engine: adaptcoll adds 3.060 us per segment event; the bare mpi4py loop costs 2.989 us per message\n"
        "compiled engine: adaptcoll adds 0.474 us per segment event; the bare C loop costs 0.295 us per message\n"
    )
    assert read_engine_cost(new) == EngineCost(3.06, 2.989)
    assert read_engine_cost(new, "compiled") == EngineCost(0.474, 0.295)
    old = tmp_path / "old.txt"
    old.write_text(
        "MPI, 2 ranks, 2000 segments of 8 B (median over 7): adaptcoll adds rank 0: 6.71 us, rank 1: 7.73 us per "
        "segment event; the bare mpi4py loop costs rank 0: 7.57 us, rank 1: 7.57 us per message\n"
    )
    assert read_engine_cost(old) == EngineCost((6.71 + 7.73) / 2, 7.57)
    with pytest.raises(ValueError, match="no 'compiled engine:' line"):
        read_engine_cost(old, "compiled")


def test_node_bandwidth_is_shared_by_concurrent_copies():
    """node_bw: the shared-memory copies running at once on a node share its memory bandwidth (a copy that
    starts while k-1 others run gets node_bw / k, at most its own 1/copy); 0 leaves the model unchanged."""
    cpu = dataclasses.replace(P, transfer="cpu", links="fair", eager=0)
    job = Job("bcast", 8, 1 << 20, 1, settings=UNCAPPED)
    plain = _time(job, "scatter_ring_allgather", cpu)
    assert _close(_time(job, "scatter_ring_allgather", dataclasses.replace(cpu, node_bw=0.0)), plain)
    # far above what the copies can use: the same times
    assert _close(_time(job, "scatter_ring_allgather", dataclasses.replace(cpu, node_bw=1e3 / cpu.G)), plain)
    # the ring's 8 concurrent copies on two copies' worth of bandwidth: slower, and slower still on one
    two = _time(job, "scatter_ring_allgather", dataclasses.replace(cpu, node_bw=2 / cpu.G))
    one = _time(job, "scatter_ring_allgather", dataclasses.replace(cpu, node_bw=1 / cpu.G))
    assert plain < two < one
    # a single copy at a time (a chain of two ranks) is never slowed by it
    pair = Job("bcast", 2, 1 << 20, 1 << 20, "chain", UNCAPPED)
    assert _close(_time(pair, params=dataclasses.replace(cpu, node_bw=1 / cpu.G)), _time(pair, params=cpu))
    # nodes of several ranks over NICs: only copies inside one node share it
    nodes = dataclasses.replace(P, ranks_per_node=4, links="fair")
    flat = Job("bcast", 8, 1 << 20, 1 << 20, "linear", UNCAPPED)
    assert _time(flat, params=dataclasses.replace(nodes, node_bw=0.5 / P.G)) > _time(flat, params=nodes)


def test_copy_contention_slows_concurrent_copies_by_a_power_of_their_count():
    """copy_contention c: a shared-memory copy that starts while k-1 others run on its node takes k**c times
    its own time (alone: unchanged; 0: the model as before), with or without node_bw."""
    cpu = dataclasses.replace(P, transfer="cpu", links="fair", eager=0, L=0.0, o=0.0, engine=0.0)
    pair = Job("bcast", 2, 1 << 20, 1 << 20, "chain", UNCAPPED)
    alone = _time(pair, params=cpu)
    assert _close(_time(pair, params=dataclasses.replace(cpu, copy_contention=0.5)), alone)
    # a root sending one message to each of two ranks: their copies run at once, the second to start is
    # stretched by 2**c (the first, alone when it starts, is not)
    fan = Job("bcast", 3, 1 << 20, 1 << 20, "linear", UNCAPPED)
    plain = _time(fan, params=cpu)
    for c in (0.25, 0.5, 1.0):
        stretched = _time(fan, params=dataclasses.replace(cpu, copy_contention=c))
        assert abs((stretched - plain) - alone * (2**c - 1)) <= 0.02 * alone, (c, plain, stretched, alone)
    ring = Job("bcast", 8, 1 << 20, 1, settings=UNCAPPED)
    ring_plain = _time(ring, "scatter_ring_allgather", cpu)
    assert _close(_time(ring, "scatter_ring_allgather", dataclasses.replace(cpu, copy_contention=0.0)), ring_plain)
    shared = dataclasses.replace(cpu, node_bw=4 / cpu.G)
    assert _time(ring, "scatter_ring_allgather", dataclasses.replace(shared, copy_contention=0.3)) > _time(
        ring, "scatter_ring_allgather", shared
    )
    with pytest.raises(ValueError, match="copy_contention"):
        dataclasses.replace(cpu, copy_contention=-0.1)
    assert "copy_contention" not in cpu.to_dict()


@pytest.mark.parametrize("core", ["python", "c"])
def test_call_cost_delays_every_ranks_start_on_both_cores(core, monkeypatch):
    """`call`: the CPU each rank's part of an adaptcoll call costs before its protocol starts. A quiet run
    with every rank paying it ends exactly `call` later (the whole schedule shifts), on either core; the
    lock-step baselines pay none; under CPU noise a rank's start can only be later; 0 is the model as
    before (and not written out), a negative value an error."""
    from adaptcoll.simulate import fastcore

    if core == "c" and fastcore.library() is None:
        pytest.skip(f"the simulator's C core is not built here: {fastcore.status()}")
    monkeypatch.setenv("ADAPTCOLL_SIM_CORE", core)
    call = 40e-6
    with_call = dataclasses.replace(P, call=call)
    for job in (
        Job("bcast", 5, 1 << 20, 1 << 18, "binomial", UNCAPPED),
        Job("reduce", 7, 1 << 16, 1 << 14, "two_tree", UNCAPPED, root=3),
        Job("allreduce", 4, 1 << 18, 1 << 16, "binary", UNCAPPED),
    ):
        plain, charged = _time(job), _time(job, params=with_call)
        assert abs(charged - plain - call) <= 1e-9, (job, plain, charged)
        baseline = "rabenseifner" if job.collective == "allreduce" else "binomial"
        assert _time(job, baseline, with_call) == _time(job, baseline)
    noisy = parse_noise(["1kHz x 25us"])
    job = Job("bcast", 9, 1 << 20, 1 << 17, "binomial", UNCAPPED)
    noisy_run = run_once(job, with_call, noise=noisy, seed=3)[0].time_s
    assert noisy_run >= _time(job, params=with_call) - 1e-12
    assert "call" not in P.to_dict() and with_call.to_dict()["call"] == call
    with pytest.raises(ValueError, match="call"):
        dataclasses.replace(P, call=-1e-6)


def test_call_cost_fits_the_16core_nodes_64k_rows():
    """With params_16core_call.json (the contention file plus call = 40 us, the Python engine's fixed cost
    of 2026-11-23) adaptcoll's 64 KiB Bcast and Reduce rows at 4 and 8 ranks are simulated within a median
    of 10 % (the contention file: 25-35 %, it has no such cost), and the 1-64 MiB medians stay <= 15 % for
    native and the shipped rule at every rank count."""
    import statistics

    from adaptcoll.simulate.calibrate import validate

    with_call = load_params(MEASURED_16CORE.parent / "params_16core_call.json")
    without = load_params(MEASURED_16CORE.parent / "params_16core_contention.json")
    assert with_call == dataclasses.replace(without, call=40e-6)
    for n in (4, 8, 16):
        rows = read_measurements(MEASURED_16CORE / f"osu_dataset_n{n}.json")
        small = [m for m in rows if m.size == 1 << 16 and m.kind == "adaptcoll" and m.collective != "allreduce"]
        medians = [statistics.median(abs(r["error_pct"]) for r in validate(small, p)) for p in (with_call, without)]
        if n < 16:
            assert medians[0] <= 10 < 20 <= medians[1], (n, medians)
        else:  # (16 ranks want about 70 us: the cost grows with the ranks there, which one constant misses)
            assert medians[0] < medians[1], (n, medians)
        big = validate([m for m in rows if m.size >= 1 << 20], with_call)
        native = [abs(r["error_pct"]) for r in big if r["model"] != "adaptcoll"]
        rule = [abs(r["error_pct"]) for r in big if r["impl"] == "adaptcoll:native_below=0"]
        assert statistics.median(native) <= 15 and statistics.median(rule) <= 15, n


def test_native_rows_are_modelled_by_mpichs_choice():
    from adaptcoll.simulate.calibrate import native_algorithm

    assert native_algorithm("bcast", 4, 16 << 20) == "binomial"
    assert native_algorithm("bcast", 16, 8 << 10) == "binomial"
    assert native_algorithm("bcast", 16, 256 << 10) == "scatter_allgather"
    assert native_algorithm("bcast", 12, 256 << 10) == "scatter_ring_allgather"
    assert native_algorithm("bcast", 16, 1 << 20) == "scatter_ring_allgather"
    assert native_algorithm("reduce", 16, 1 << 10) == "binomial"
    assert native_algorithm("reduce", 16, 1 << 20) == "reduce_scatter_gather"
    assert native_algorithm("allreduce", 16, 1 << 20) == "rabenseifner"
    for name in ("binomial", "scatter_allgather", "scatter_ring_allgather", "reduce_scatter_gather", "rabenseifner"):
        assert name in BASELINES


def test_node_bw_in_parameter_files(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "adaptcoll.simulate.params/1", "transfer": "cpu", "node_bw": 22e9}))
    assert load_params(str(path)).node_bw == 22e9
    path.write_text(json.dumps({"format": "adaptcoll.simulate.params/1", "node_bw": -1}))
    with pytest.raises(ValueError, match="node_bw"):
        load_params(str(path))


def test_large_copies_and_folds_cost_large_cost_times_more():
    """`large_from` / `large_cost`: a shared-memory copy or a fold of more than large_from bytes costs
    large_cost times as much per byte; up to large_from, and with the field off, nothing changes."""
    base = CostParams(transfer="cpu", L=1e-6, G=1e-10, fold=2e-10, o=0.0, engine=0.0, native_o=0.0, eager=0)
    large = dataclasses.replace(base, large_from=4 << 20, large_cost=1.5)
    for collective, name in (("bcast", "binomial"), ("reduce", "binomial")):
        small_job, big_job = Job(collective, 2, 4 << 20, 0), Job(collective, 2, 8 << 20, 0)
        assert run_once(small_job, large, name)[0].time_s == run_once(small_job, base, name)[0].time_s
        plain, slow = run_once(big_job, base, name)[0].time_s, run_once(big_job, large, name)[0].time_s
        assert slow == pytest.approx(1e-6 + 1.5 * (plain - 1e-6), rel=1e-9), (collective, plain, slow)
    assert "large_from" not in base.to_dict() and large.to_dict()["large_cost"] == 1.5
    with pytest.raises(ValueError, match="large_cost must be >= 1"):
        CostParams(large_cost=0.5)
    with pytest.raises(ValueError, match="'large_from' must be a whole number"):
        params_from_dict({"large_from": 1.5})


def test_mpich_fresh_temporaries_cost_fault_per_byte_touched():
    """`fault`: MPICH's Reduce (reduce-scatter + gather) and Allreduce (Rabenseifner) touch temporaries of
    the whole message at every call; from `fault_from` bytes each touched byte costs `fault` (measured
    here with ru_minflt at 2 ranks: 1.5 x the message off the root, 0.5 x at the root, 0.5 x per rank in
    Allreduce, which sets the critical path's delay); below it, off, or in other baselines nothing."""
    base = CostParams(transfer="cpu", L=1e-6, G=1e-10, fold=2e-10, o=0.0, engine=0.0, native_o=0.0, eager=0)
    fault = dataclasses.replace(base, fault=5e-10)
    big, small = 64 << 20, (32 << 20) - 4
    for collective, name, touched in (("reduce", "reduce_scatter_gather", 1.5), ("allreduce", "rabenseifner", 0.5)):
        plain, slow = (run_once(Job(collective, 2, big, 0), p, name)[0].time_s for p in (base, fault))
        assert slow - plain == pytest.approx(touched * big * 5e-10, rel=1e-9), (collective, plain, slow)
        job = Job(collective, 2, small, 0)
        assert run_once(job, fault, name)[0].time_s == run_once(job, base, name)[0].time_s
        assert (
            run_once(Job(collective, 4, big, 0), fault, name)[0].time_s
            > run_once(Job(collective, 4, big, 0), base, name)[0].time_s
        )
    job = Job("reduce", 2, big, 0)
    assert run_once(job, fault, "binomial")[0].time_s == run_once(job, base, "binomial")[0].time_s
    assert "fault" not in base.to_dict() and fault.to_dict()["fault_from"] == 32 << 20
    with pytest.raises(ValueError, match="'fault_from' must be a whole number"):
        params_from_dict({"fault_from": 1.5})


def test_sign_agreement_pairs_adaptcoll_rows_with_native():
    from adaptcoll.simulate.calibrate import sign_agreement

    def row(impl: str, size: int, measured: float, simulated: float) -> dict:
        model = "lockstep:binomial" if impl == "native" else "adaptcoll"
        return {
            "collective": "bcast",
            "ranks": 4,
            "size": size,
            "noise": "",
            "impl": impl,
            "model": model,
            "measured_us": measured,
            "simulated_us": simulated,
        }

    rows = [
        row("native", 1, 100, 100),
        row("adaptcoll", 1, 50, 60),
        row("adaptcoll:x", 1, 105, 95),  # right, wrong tie
        row("native", 2, 100, 100),
        row("adaptcoll", 2, 200, 90),  # wrong
        row("adaptcoll", 3, 10, 10),  # no native row: not a pair
    ]
    got = sign_agreement(rows)
    assert (got["pairs"], got["right"], got["ties"], got["ties_right"]) == (3, 1, 1, 0)
    assert [w[2:4] for w in got["wrong"]] == [(1, "adaptcoll:x"), (2, "adaptcoll")]


MEASURED_16CORE = Path(__file__).resolve().parents[1] / "bench" / "results" / "simulate" / "measured_16core"


def test_the_model_of_the_16core_node():
    """Issue 37's fidelity target on the one node measured: with params_16core_large.json the median |error| of
    native MPICH's rows and of the shipped rule's rows (1-64 MiB) is <= 15 % at 4, 8 and 16 ranks each; the
    parameters before the large-copy term missed it at 4 ranks (bench/RESULTS.md, "Large copies out of the
    caches")."""
    import statistics

    from adaptcoll.simulate.calibrate import validate

    params = load_params(MEASURED_16CORE.parent / "params_16core_large.json")
    before = load_params(MEASURED_16CORE.parent / "params_16core_nodebw.json")
    for ranks in (4, 8, 16):
        rows = [m for m in read_measurements(MEASURED_16CORE / f"osu_dataset_n{ranks}.json") if m.size >= 1 << 20]
        for impl in ("native", "adaptcoll:native_below=0"):
            chosen = [m for m in rows if m.impl == impl]
            assert len(chosen) == 12
            errors = [abs(r["error_pct"]) for r in validate(chosen, params)]
            assert statistics.median(errors) <= 15.0, (ranks, impl, sorted(errors))
            if (ranks, impl) == (4, "native"):
                old = [abs(r["error_pct"]) for r in validate(chosen, before)]
                assert statistics.median(old) > 15.0


def test_mpich_temporaries_set_the_16core_nodes_64mib_reduce():
    """With params_16core_fault.json (MPICH's fresh temporaries, `fault`), native MPICH's Reduce of 64 MiB is
    within 10 % at 4, 8 and 16 ranks (without the term 46-53 % too fast), the medians stay <= 15 %, and
    the simulator says which of adaptcoll and native is faster as measured in at least 89 of the 108 pairs
    (83 before; bench/RESULTS.md, "MPICH's large temporaries")."""
    import statistics

    from adaptcoll.simulate.calibrate import sign_agreement, validate

    params = load_params(MEASURED_16CORE.parent / "params_16core_fault.json")
    before = load_params(MEASURED_16CORE.parent / "params_16core_large.json")
    right = 0
    for ranks in (4, 8, 16):
        rows = [m for m in read_measurements(MEASURED_16CORE / f"osu_dataset_n{ranks}.json") if m.size >= 1 << 20]
        out = validate(rows, params)
        right += sign_agreement(out)["right"]
        for impl in ("native", "adaptcoll:native_below=0"):
            assert statistics.median(abs(r["error_pct"]) for r in out if r["impl"] == impl) <= 15.0, (ranks, impl)
        big = [m for m in rows if m.impl == "native" and m.collective == "reduce" and m.size == 64 << 20]
        assert len(big) == 1
        assert abs(validate(big, params)[0]["error_pct"]) <= 10.0
        assert validate(big, before)[0]["error_pct"] < -40.0
    assert right >= 89


_UNCAPPED = settings.from_environ({"ADAPTCOLL_MAX_SEGMENTS": "0"})


def _copies(order: str) -> tuple[dict[tuple[int, int], tuple[float, float]], float]:
    """A 3-rank pipeline Bcast (0 -> 1 -> 2) of two 1 MiB segments, transfer "cpu": each (receiver, segment)'s copy as
    (start, end), and the time of the run, under copy order `order`."""
    params = dataclasses.replace(P, transfer="cpu", links="fair", copy_order=order)
    job = Job("bcast", 3, 2 << 20, 1 << 20, "pipeline", settings=_UNCAPPED)
    log = TraceLog()
    stats, _, _ = run_once(job, params, trace=log, core="python")
    copies = {}
    for dst, _src, tag, nbytes, t0, t1, _id in log.recvs:
        assert nbytes == 1 << 20
        copies[(dst, tag - min(r[2] for r in log.recvs))] = (t0, t1)
    return copies, stats.time_s


def test_copy_order_ready_books_copies_ahead_of_completions_poll_does_not():
    """transfer "cpu": rank 1 has both receives posted (receive window 3). With "ready" its copy of segment 1
    follows its copy of segment 0 at once, ahead of the completion that forwards segment 0, so rank 2 copies
    segment 0 only after rank 1 has copied both; with "poll" the completion runs first (as adaptcoll's engine
    runs a finished receive's callback before its next Testsome), rank 2 starts on segment 0 while rank 1
    copies segment 1, and the call ends sooner. Both cores give the same run."""
    copy = (1 << 20) * P.G
    ready, t_ready = _copies("ready")
    poll, t_poll = _copies("poll")
    assert ready[(1, 1)][0] == pytest.approx(ready[(1, 0)][1])  # back to back
    assert ready[(2, 0)][0] > ready[(1, 1)][1]  # the forward waited for both copies
    assert poll[(1, 1)][0] > poll[(1, 0)][1]  # the callback (engine + posts) ran in between
    assert poll[(2, 0)][0] < poll[(1, 1)][1]  # rank 2 copies segment 0 meanwhile
    assert poll[(1, 1)][1] - poll[(1, 1)][0] == pytest.approx(copy)
    assert t_poll < t_ready - 0.5 * copy
    for order in ("ready", "poll"):
        params = dataclasses.replace(P, transfer="cpu", links="fair", copy_order=order)
        job = Job("bcast", 3, 2 << 20, 1 << 20, "pipeline", settings=_UNCAPPED)
        assert run_once(job, params, core="c")[0] == run_once(job, params, core="python")[0]


def _signs_on_the_16core_node(params: CostParams) -> tuple[int, int, list[tuple[int, list, list[dict]]]]:
    """(pairs with the sign right, wrong pairs outside measured ties, [(ranks, rows, validate's output)]) of
    the 16-core node's 1-64 MiB rows at 4, 8 and 16 ranks under `params`."""
    from adaptcoll.simulate.calibrate import TIE, sign_agreement, validate

    right = clear = 0
    runs = []
    for ranks in (4, 8, 16):
        rows = [m for m in read_measurements(MEASURED_16CORE / f"osu_dataset_n{ranks}.json") if m.size >= 1 << 20]
        out = validate(rows, params)
        agree = sign_agreement(out)
        right += agree["right"]
        clear += sum(abs(w[4] - 1) > TIE for w in agree["wrong"])
        runs.append((ranks, rows, out))
    return right, clear, runs


def test_copies_after_completions_fit_the_16core_nodes_8_rank_bcasts():
    """With params_16core_poll.json (copy_order "poll", G refitted) the 8-rank Bcast rows the "ready" model
    simulated 15-50 % too slow (16 MiB segments forwarded only after three copies) are within 15 %, and the
    simulator says which of adaptcoll and native is faster as measured in at least 97 of the 108 pairs, at
    most 4 of the wrong ones outside measured ties (89 and 8 with params_16core_fault.json; bench/RESULTS.md,
    "Copies after completions")."""
    from adaptcoll.simulate.calibrate import validate

    params = load_params(MEASURED_16CORE.parent / "params_16core_poll.json")
    before = load_params(MEASURED_16CORE.parent / "params_16core_fault.json")
    assert (params.copy_order, before.copy_order) == ("poll", "ready")
    right, clear, runs = _signs_on_the_16core_node(params)
    for ranks, rows, out in runs:
        if ranks == 8:
            bcast = [r for r in out if r["collective"] == "bcast" and r["model"] == "adaptcoll"]
            assert len(bcast) == 12 and all(abs(r["error_pct"]) <= 15.0 for r in bcast), bcast
            rule = "adaptcoll:native_below=0"
            big = [m for m in rows if m.collective == "bcast" and m.size == 64 << 20 and m.impl == rule]
            assert validate(big, before)[0]["error_pct"] > 40.0
    assert right >= 97 and clear <= 4


def test_copy_contention_fits_the_16core_node_at_every_rank_count():
    """With params_16core_contention.json (concurrent shared-memory copies slow one another, k**0.3; G and
    large_cost refitted) the median |error| of native MPICH's and of the shipped rule's rows is <= 15 % at 4,
    8 and 16 ranks each, where params_16core_poll.json missed at 4 ranks (16.2 / 17.2 %), and the simulator
    says which of adaptcoll and native is faster as measured in at least 97 of the 108 pairs, at most 3 of
    the wrong ones outside measured ties (bench/RESULTS.md, "Concurrent copies slow one another")."""
    import statistics

    from adaptcoll.simulate.calibrate import validate

    params = load_params(MEASURED_16CORE.parent / "params_16core_contention.json")
    before = load_params(MEASURED_16CORE.parent / "params_16core_poll.json")
    assert (params.copy_contention, before.copy_contention) == (0.3, 0.0)
    right, clear, runs = _signs_on_the_16core_node(params)
    for ranks, rows, out in runs:
        for impl in ("native", "adaptcoll:native_below=0"):
            errors = [abs(r["error_pct"]) for r in out if r["impl"] == impl]
            assert len(errors) == 12 and statistics.median(errors) <= 15.0, (ranks, impl, sorted(errors))
        if ranks == 4:
            old = validate(rows, before)
            for impl in ("native", "adaptcoll:native_below=0"):
                assert statistics.median(abs(r["error_pct"]) for r in old if r["impl"] == impl) > 15.0
    assert right >= 97 and clear <= 3
