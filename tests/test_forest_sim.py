"""Weighted forests (`forest:PATH`) in process: segments dealt by weight (round-robin when the weights are
equal), random forests of 1-4 weighted spanning trees running Bcast / Reduce / Allreduce on real data in
the simulator over every size 1..17, and the setting's checks."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest
from forest_files import random_schedule, random_tree, write_schedule

from adaptcoll.plans import forests
from adaptcoll.plans.dealing import _weighted, deal, tree_links, tree_weights
from adaptcoll.plans.schedule_file import ScheduleError
from adaptcoll.plans.trees import build_all
from adaptcoll.runtime import settings
from adaptcoll.simulate import cli
from adaptcoll.simulate.choice import rule_facts
from adaptcoll.simulate.params import CostParams
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import run_once
from adaptcoll.tune import table as tune_table
from adaptcoll.tune.policy import resolve


def test_equal_weights_deal_round_robin():
    """The weighted dealing itself, given equal weights, is today's round-robin (two_tree stays as it was)."""
    for ntrees in range(1, 7):
        for nseg in range(0, 50):
            rr = [list(range(k, nseg, ntrees)) for k in range(ntrees)]
            assert [list(p) for p in _weighted((Fraction(2, 3),) * ntrees, nseg)] == rr
            assert [list(p) for p in deal(ntrees, nseg, [0.7] * ntrees)] == rr
            assert [list(p) for p in deal(ntrees, nseg)] == rr


def test_unequal_weights_deal_by_share_and_interleave():
    assert [list(p) for p in deal(2, 8, [0.75, 0.25])] == [[0, 1, 3, 4, 5, 7], [2, 6]]
    rng = random.Random(5)
    for _ in range(400):
        ntrees, nseg = rng.randint(1, 5), rng.randint(0, 120)
        weights = [rng.uniform(0.01, 2.0) for _ in range(ntrees)]
        dealt = deal(ntrees, nseg, weights)
        assert sorted(s for part in dealt for s in part) == list(range(nseg))
        for part, w in zip(dealt, weights):
            assert abs(len(part) - nseg * w / sum(weights)) < 1, (weights, nseg)
            assert list(part) == sorted(part)
        assert dealt == deal(ntrees, nseg, list(weights))  # deterministic
    with pytest.raises(ValueError, match="2 weights for 3 trees"):
        deal(3, 4, [1, 2])
    with pytest.raises(ValueError, match="must be > 0"):
        deal(2, 4, [1, 0])


def _check_dealing(trees, nseg: int, size: int) -> None:
    """Every rank carries every segment on exactly one tree, with its place in that tree; each tree's
    share is within one segment of its weight (each forest an equal part)."""
    weights = tree_weights(trees)
    assert weights is not None and abs(sum(weights) - 1) < 1e-12
    dealt = deal(len(trees), nseg, weights)
    carrying = [(tree, segs) for tree, segs in zip(trees, dealt) if segs] or [(trees[0], dealt[0])]
    for r in range(size):
        links = tree_links(trees, r, nseg)  # a link per tree that carries segments, in tree order
        assert sorted(s for link in links for s in link.segs) == list(range(nseg))
        assert len(links) == len(carrying)
        for link, (tree, segs) in zip(links, carrying):
            assert (link.parent, link.children) == (tree.parent(r), tree.children(r))
            assert list(link.segs) == list(segs)  # every rank deals alike
    for segs, w in zip(dealt, weights):
        assert abs(len(segs) - nseg * w) < 1


def test_random_forests_run_every_collective_at_every_size(tmp_path):
    """Random forests (1-4 trees, random parents, child orders and weights; one or two roots) on real
    data: every result exact, every segment sent once per tree edge it crosses (no more, no less)."""
    rng = random.Random(22)
    cfg = settings.Settings(max_segments=0)
    for size in range(1, 18):
        roots = sorted(rng.sample(range(size), min(size, 2)))
        algorithm = write_schedule(tmp_path / f"s{size}.json", random_schedule(size, roots, rng))
        for collective in ("bcast", "reduce", "allreduce"):
            for root in roots if collective != "allreduce" else [0]:
                count = rng.choice((1, 3 * size + 1, 400))
                job = Job(collective, size, 4 * count, 64, algorithm, cfg, root=root)
                prep = prepare(job)
                want_roots = roots if collective == "allreduce" else [root]
                assert sorted({t.root for t in prep.trees}) == want_roots
                _, world, bufs = run_once(job, CostParams(eager=2048), data=True, prepared=prep, seed=size)
                bufs.check(root)
                nseg = prep.plan.nseg
                hops = (size - 1) * nseg * (2 if collective == "allreduce" else 1)
                assert (world.unmatched, world.messages) == (0, hops), (size, collective, root)
                _check_dealing(prep.trees, nseg, size)


def test_forest_trees_come_from_the_file_and_allreduce_shares_forests_equally(tmp_path):
    sched = {
        "format": "adaptcoll.schedule/1",
        "collective": "allreduce",
        "ranks": 4,
        "forests": [
            {
                "root": 0,
                "trees": [
                    {"weight": 3, "children": [[1, 2], [], [3], []]},
                    {"weight": 1, "children": [[3], [], [], [1, 2]]},
                ],
            },
            {"root": 2, "trees": [{"weight": 5, "children": [[], [0], [1, 3], []]}]},
        ],
    }
    algorithm = write_schedule(tmp_path / "s.json", sched)
    bcast = prepare(Job("bcast", 4, 4096, 256, algorithm, settings.Settings(max_segments=0), root=0))
    assert [t.children(0) for t in bcast.trees] == [(1, 2), (3,)]
    assert tree_weights(bcast.trees) == (Fraction(3, 4), Fraction(1, 4))
    allreduce = prepare(Job("allreduce", 4, 4096, 256, algorithm, settings.Settings(max_segments=0)))
    assert tree_weights(allreduce.trees) == (Fraction(3, 8), Fraction(1, 8), Fraction(1, 2))
    with pytest.raises(ScheduleError, match=r"no forest rooted at rank 1 \(roots: 0, 2\)"):
        prepare(Job("reduce", 4, 4096, 256, algorithm, settings.Settings(), root=1))
    with pytest.raises(ScheduleError, match="is for 4 ranks but the communicator has 5"):
        prepare(Job("bcast", 5, 4096, 256, algorithm, settings.Settings()))


def test_rank_ordered_forests_serve_non_commutative_folds(tmp_path):
    """A forest whose trees fold in rank order (chains, in-order trees at root 0) serves a non-commutative
    op; any other leaves it to the library's rank-ordered tree (None here)."""
    chain = {"weight": 1, "children": [[1], [2], [3], []]}
    in_order = {"weight": 2, "children": [[1, 3], [2], [], []]}
    ordered = {"format": "adaptcoll.schedule/1", "collective": "reduce", "ranks": 4,
               "forests": [{"root": 0, "trees": [chain, in_order]}]}  # fmt: skip
    algorithm = write_schedule(tmp_path / "ordered.json", ordered)
    assert forests.root_trees(algorithm, 4, 0, rank_ordered=True) is not None
    assert forests.allreduce_trees(algorithm, 4, rank_ordered=True) is not None
    ordered["forests"][0]["trees"].append({"weight": 1, "children": [[2], [], [1, 3], []]})
    other = write_schedule(tmp_path / "other.json", ordered)
    assert forests.root_trees(other, 4, 0, rank_ordered=True) is None
    assert forests.allreduce_trees(other, 4, rank_ordered=True) is None
    assert forests.root_trees(other, 4, 0) is not None


def test_the_setting_reads_the_file_once_and_names_what_is_wrong(tmp_path, monkeypatch):
    rng = random.Random(3)
    good = write_schedule(tmp_path / "good.json", random_schedule(4, [0], rng))
    with settings.configured(bcast_algorithm=good, reduce_algorithm=good, allreduce_algorithm=good) as cfg:
        assert cfg.algorithm("allreduce") == good and cfg.is_explicit("reduce_algorithm")
    assert forests.load.cache_info().currsize >= 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = {
        f"forest:{bad}": r"bcast_algorithm: schedule .*bad.json: not JSON",
        f"forest:{tmp_path / 'missing.json'}": r"bcast_algorithm: schedule .*missing.json: cannot read it",
        "forest:": r"bcast_algorithm: forest needs a schedule file, written forest:PATH",
    }
    for value, message in cases.items():
        with pytest.raises(ValueError, match=message):
            settings.configure(bcast_algorithm=value)
    wrong = dict(
        random_schedule(3, [0], rng), forests=[{"root": 0, "trees": [{"weight": 1, "children": [[1], [], []]}]}]
    )
    with pytest.raises(
        ValueError, match=r"ADAPTCOLL_REDUCE_ALGORITHM: schedule .*wrong.json: forests\[0\]\.trees\[0\]: not a spanning"
    ):
        settings.from_environ({"ADAPTCOLL_REDUCE_ALGORITHM": write_schedule(tmp_path / "wrong.json", wrong)})
    assert settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": good}).allreduce_algorithm == good


def test_a_tuning_table_may_name_a_forest(tmp_path):
    good = write_schedule(tmp_path / "t.json", random_schedule(4, [0], random.Random(4)))
    entry = {
        "collective": "bcast",
        "comm_size": 4,
        "bytes": 1 << 20,
        "choice": "adaptcoll",
        "config": {"algorithm": good, "segment_size": 65536, "max_segments": 0},
    }
    table = tune_table.parse(json.dumps({**_table_header(), "entries": [entry]}))
    assert table.entries[0].config.algorithm == good


def _table_header() -> dict:
    """The smallest valid tuning-table header (adaptcoll.tune.table)."""
    return {"format": tune_table.FORMAT, "version": tune_table.VERSION, "machine": {"mpi_library": "test"}}


def test_the_simulator_runs_a_forest_from_its_command_line(tmp_path, capsys):
    size = 6
    sched = random_schedule(size, [0], random.Random(9))
    sched["forests"][0]["trees"].append({"weight": 1.0, "children": random_tree(size, 0, random.Random(1))})
    algorithm = write_schedule(tmp_path / "cli.json", sched)
    argv = ["--collective", "allreduce", "--ranks", str(size), "--size", "256K", "--segment", "16K"]
    assert cli.main([*argv, "--algorithm", algorithm, "--json", str(tmp_path / "r.json")]) == 0
    row = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert row["quiet_us"] > 0


def test_two_tree_as_a_forest_runs_exactly_as_two_tree(tmp_path):
    """A schedule holding two_tree's two trees at equal weights is two_tree: same dealing, same simulated
    time and messages, to the last bit; weighting them 3:1 changes the run."""
    size, nbytes = 13, 1 << 20
    tree_pair = build_all("two_tree", size, 0)

    def schedule(weights: tuple[float, float]) -> dict:
        trees = [
            {"weight": w, "children": [list(t.children(r)) for r in range(size)]} for w, t in zip(weights, tree_pair)
        ]
        return {
            "format": "adaptcoll.schedule/1",
            "collective": "bcast",
            "ranks": size,
            "forests": [{"root": 0, "trees": trees}],
        }

    cfg = settings.Settings(max_segments=0)
    runs = {}
    for name, algorithm in (
        ("two_tree", "two_tree"),
        ("equal", write_schedule(tmp_path / "equal.json", schedule((0.5, 0.5)))),
        ("3:1", write_schedule(tmp_path / "skew.json", schedule((3.0, 1.0)))),
    ):
        job = Job("bcast", size, nbytes, 16 << 10, algorithm, cfg)
        stats, world, bufs = run_once(job, CostParams(eager=2048), data=True, seed=1)
        bufs.check()
        runs[name] = (stats.time_s, world.messages, world.bytes)
    assert runs["equal"] == runs["two_tree"]
    assert runs["3:1"][1] == runs["two_tree"][1] and runs["3:1"][0] != runs["two_tree"][0]


def test_a_forest_set_explicitly_runs_uncapped_unless_the_cap_is_explicit(tmp_path):
    """Weights need segments: an explicit forest takes no segment cap of the table or rule (4 segments would
    deal 0.9 / 0.1 as 4 : 0), unless ADAPTCOLL_MAX_SEGMENTS is explicit too; in the library and the simulator."""
    algorithm = write_schedule(tmp_path / "cap.json", random_schedule(4, [0], random.Random(6)))
    free = settings.Settings(bcast_algorithm=algorithm, explicit=("bcast_algorithm",))
    capped = settings.Settings(bcast_algorithm=algorithm, max_segments=2, explicit=("bcast_algorithm", "max_segments"))
    for cfg, cap, nseg in ((free, 0, 16), (capped, 2, 2)):
        previous = settings.use(cfg)
        try:
            call = resolve(b"", "", rule_facts(4, 1), warn=False).choose("bcast", 1 << 20)
        finally:
            settings.use(previous)
        assert (call.algorithm, call.max_segments) == (algorithm, cap)
        assert prepare(Job("bcast", 4, 1 << 20, 64 << 10, algorithm, cfg)).plan.nseg == nseg
        assert prepare(Job("bcast", 4, 1 << 20, 64 << 10, "", cfg)).plan.nseg == nseg
    rule = settings.Settings(max_segments=4)
    assert prepare(Job("bcast", 4, 1 << 20, 64 << 10, "binomial", rule)).plan.nseg == 4


def test_pinned_pairs_run_every_collective_exactly(tmp_path):
    """The pinned pair (two trees, one per NIC) synthesized for 4 nodes x 4 ranks behind two NICs runs
    Bcast, Reduce and Allreduce on real data in the simulator: exact, every segment once per edge."""
    from adaptcoll.plans import schedule_file as forest_file
    from adaptcoll.schedule import shapes
    from adaptcoll.schedule.synthesize import synthesize

    d = shapes.nic_nodes(4, 4, nics=2)
    cfg = settings.Settings(max_segments=0)
    for collective, root in (("bcast", 0), ("bcast", 6), ("reduce", 6), ("allreduce", 0)):
        got = synthesize(d, collective, root, trees=2, method="pinned")
        path = tmp_path / f"{collective}-{root}.json"
        path.write_text(forest_file.dumps(got.schedule))
        job = Job(collective, d.ranks, 4 * 1000, 256, f"forest:{path}", cfg, root=root)
        prep = prepare(job)
        assert len(prep.trees) == 2
        _, world, bufs = run_once(job, CostParams(eager=2048), data=True, prepared=prep, seed=3)
        bufs.check(root)
        hops = (d.ranks - 1) * prep.plan.nseg * (2 if collective == "allreduce" else 1)
        assert (world.unmatched, world.messages) == (0, hops), collective
