"""The CPU-aware cost model and choice of adaptcoll.schedule (cost.py, choose.py, `--cpu`): counts and
times against hand arithmetic on small trees, the choice's rule, the CLI. No MPI; seconds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from adaptcoll.plans import schedule_file as forest
from adaptcoll.plans import trees as tree_shapes
from adaptcoll.plans.dealing import deal
from adaptcoll.schedule import describe, shapes
from adaptcoll.schedule.choose import choose, cpu_floor, fixed_trees
from adaptcoll.schedule.cli import main
from adaptcoll.schedule.cost import DEFAULT_CPU, CpuCosts, cpu_costs, estimate, rank_work, segments_dealt
from adaptcoll.schedule.network import Network
from adaptcoll.simulate.params import DEFAULT_PARAMS

# 4 ranks: 0 -> 1, 2; 1 -> 3
TREE = ((1, 2), (3,), (), ())


def test_defaults_are_the_simulators() -> None:
    assert (DEFAULT_CPU.o, DEFAULT_CPU.engine, DEFAULT_CPU.fold, DEFAULT_CPU.eager) == (
        DEFAULT_PARAMS.o,
        DEFAULT_PARAMS.engine,
        DEFAULT_PARAMS.fold,
        DEFAULT_PARAMS.eager,
    )
    assert cpu_costs(DEFAULT_PARAMS) == DEFAULT_CPU
    assert cpu_costs({"o": 1e-6, "fold": 0}) == CpuCosts(1e-6, DEFAULT_CPU.engine, 0.0, DEFAULT_CPU.eager)
    with pytest.raises(ValueError):
        cpu_costs({"o": -1})


@pytest.mark.parametrize("weights,nseg", [((1.0, 1.0), 7), ((3.0, 1.0), 8), ((0.5, 0.3, 0.2), 11), ((2.0, 1.0), 1)])
def test_segments_dealt_as_the_protocol_deals(weights: tuple[float, ...], nseg: int) -> None:
    assert segments_dealt(list(weights), nseg) == [len(p) for p in deal(len(weights), nseg, list(weights))]


def test_rank_work_by_hand() -> None:
    msgs, folds = rank_work([(3, TREE)], 0, "bcast", 4)
    assert list(msgs) == [6, 6, 3, 3]  # per segment: 2 sends; 1 receive + 1 send; 1 receive; 1 receive
    assert list(folds) == [0, 0, 0, 0]
    msgs, folds = rank_work([(3, TREE)], 0, "reduce", 4)
    assert list(msgs) == [6, 6, 3, 3] and list(folds) == [6, 3, 0, 0]
    msgs, folds = rank_work([(3, TREE), (2, ((3,), (), (1,), (2,)))], 0, "allreduce", 4)
    # second tree: 0 -> 3 -> 2 -> 1, 2 segments; allreduce doubles the messages
    assert list(msgs) == [2 * (6 + 2), 2 * (6 + 2), 2 * (3 + 4), 2 * (3 + 4)]
    assert list(folds) == [6 + 2, 3 + 0, 0 + 2, 0 + 2]


def test_estimate_by_hand_on_a_flat_switch() -> None:
    c = 10e9
    d = shapes.flat_switch(4, bandwidth=c, latency=1e-6)
    net = Network(d)
    size, seg = 4 << 20, 1 << 20
    cpu = CpuCosts(5e-6, 3e-6, 2e-11, 65536)
    e = estimate(net, [(1.0, TREE)], 0, "reduce", size, seg, cpu)
    assert e.segments == 4 and e.segment == seg
    # rank 0 receives 2 x the message on its link from the switch; rank 1 receives 1 x and sends 1 x
    assert e.link_s == pytest.approx(2 * size / c)
    # busiest CPU: rank 0 (8 messages, 2 x 4 segments folded) vs rank 1 (8 messages, 4 folded)
    assert e.cpu_s == pytest.approx(8 * 8e-6 + 8 * seg * 2e-11)
    assert e.depth == 2 and e.binds == "links"
    assert e.total_s >= max(e.link_s, e.cpu_s) and e.fill_s > 0
    # more CPU per message: the CPU binds, and the estimate grows with it
    slow = estimate(net, [(1.0, TREE)], 0, "reduce", size, seg, CpuCosts(1e-3, 0.0, 2e-11, 65536))
    assert slow.binds == "cpu" and slow.cpu_s == pytest.approx(8 * 1e-3 + 8 * seg * 2e-11)
    assert slow.total_s > e.total_s + 7e-3
    # smaller segments: more messages, more CPU
    assert estimate(net, [(1.0, TREE)], 0, "reduce", size, 64 << 10, cpu).cpu_s > e.cpu_s


def test_cpu_floor_is_below_every_schedule() -> None:
    d = shapes.nic_nodes(4, 4, nics=2)
    net = Network(d)
    for collective in ("bcast", "reduce", "allreduce"):
        for shape in ("two_tree", "binomial", "topo", "pipeline"):
            got = fixed_trees(d, shape, 0, collective)
            assert got is not None
            kids, roots = got
            assert len(set(roots)) == (d.ranks if collective == "allreduce" else 1)
            for seg in (64 << 10, 1 << 20):
                e = estimate(net, kids, roots, collective, 4 << 20, seg)
                assert cpu_floor(collective, d.ranks, 4 << 20, seg) <= e.cpu_s * (1 + 1e-9)


def test_fixed_trees_are_the_librarys() -> None:
    d = shapes.nic_nodes(4, 4)
    got = fixed_trees(d, "two_tree", 0)
    assert got is not None and got[1] == (0, 0)
    assert [k for _, k in got[0]] == [
        tuple(t.children(r) for r in range(16)) for t in tree_shapes.build_all("two_tree", 16, 0)
    ]
    assert fixed_trees(shapes.dgx1(), "topo", 0) is None  # no nodes: topo is binomial
    # allreduce: one root per rank (0, 1, ..., as the library spreads them), cut once `limit` trees are there
    got = fixed_trees(d, "two_tree", 0, "allreduce", limit=5)
    assert got is not None and got[1] == (0, 0, 1, 1, 2, 2)
    assert [k for _, k in got[0][2:4]] == [
        tuple(t.children(r) for r in range(16)) for t in tree_shapes.build_all("two_tree", 16, 1)
    ]


def test_choice_keeps_a_fixed_shape_unless_the_forest_is_clearly_better() -> None:
    d = shapes.nic_nodes(8, 4, nics=2)  # 32 ranks: the layered construction (fast)
    for collective, size in (("bcast", 16 << 20), ("reduce", 4 << 20)):
        c = choose(d, collective, 0, size, segments=(256 << 10, 1 << 20), trees=(2, 4), fanouts=(2,))
        assert c.best_fixed is not None and c.best_forest is not None
        forest_t, fixed_t = c.best_forest.estimate.total_s, c.best_fixed.estimate.total_s
        assert c.chosen is (c.best_forest if forest_t < 0.97 * fixed_t else c.best_fixed)
        assert all(c.chosen.estimate.total_s <= x.estimate.total_s * 1.0 / 0.97 for x in c.candidates)
        # a margin that no forest can beat keeps the fixed shape; no fixed shapes: a forest
        assert choose(d, collective, 0, size, (1 << 20,), (2,), (2,), margin=0.99).chosen.fixed
        assert not choose(d, collective, 0, size, (1 << 20,), (2,), (2,), fixed=()).chosen.fixed
    # the reduce here is CPU-bound (folds at 6.7 GB/s, 9 us a message): two_tree's balance wins
    c = choose(d, "reduce", 0, 4 << 20, segments=(256 << 10,), trees=(2, 4), fanouts=(2,))
    assert c.chosen.fixed and c.chosen.estimate.binds == "cpu"


def test_allreduce_choice_offers_the_one_rooted_fixed_shapes() -> None:
    """The compiled rule runs Allreduce's trees from one root: the choice weighs that form of each fixed
    shape beside the library's default (one root per rank), and writes a chosen one as one forest."""
    d = shapes.nic_nodes(8, 4, nics=2)
    c = choose(d, "allreduce", 0, 4 << 20, segments=(256 << 10,), trees=(2,), fanouts=(2,))
    names = [x.name for x in c.candidates if x.fixed]
    assert "two_tree" in names and "two_tree (one root)" in names
    one = next(x for x in c.candidates if x.name == "two_tree (one root)")
    every = next(x for x in c.candidates if x.name == "two_tree")
    assert set(one.roots) == {0} and len(one.trees) == 2
    assert len(set(every.roots)) > 1
    best = min(c.candidates, key=lambda x: x.estimate.total_s)
    assert c.chosen.estimate.total_s <= best.estimate.total_s / 0.97
    # a one-rooted shape, once chosen, is written as one forest (the default form: one per root)
    assert [f.root for f in dataclasses.replace(c, chosen=one).schedule("allreduce", 0, d).forests] == [0]
    assert len(dataclasses.replace(c, chosen=every).schedule("allreduce", 0, d).forests) == len(set(every.roots))
    # with the library set to one root already, no second copy
    again = choose(d, "allreduce", 0, 4 << 20, segments=(256 << 10,), trees=(2,), fanouts=(2,), allreduce_roots=1)
    assert not any("(one root)" in x.name for x in again.candidates)


def test_choice_packs_once_per_tree_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packing ignores the fanouts: the choice packs once per K and still offers what it found."""
    from adaptcoll.schedule import synthesize as synth_mod

    calls: list[int] = []
    real = synth_mod.pack

    def counting(net, root, collective, trees):  # type: ignore[no-untyped-def]
        calls.append(trees)
        return real(net, root, collective, trees)

    monkeypatch.setattr(synth_mod, "pack", counting)
    d = shapes.dgx1()  # 8 ranks: packing and layered both run
    c = choose(d, "bcast", 0, 4 << 20, segments=(1 << 20,), trees=(2, 4), fanouts=(2, 0), bus_fanouts=(0, 3))
    assert sorted(calls) == [2, 4]
    assert c.best_forest is not None
    fresh = [synth_mod.synthesize(d, "bcast", 0, trees=k, fanout=f) for k, f in ((2, 2), (4, 2), (4, 4))]
    offered = {tuple((w, kids) for w, kids in x.trees) for x in c.candidates if not x.fixed}
    for got in fresh:  # every forest a fresh synthesis makes is among the candidates
        assert tuple((t.weight, t.children) for t in got.schedule.forests[0].trees) in offered


def test_cli_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "n.json"
    describe.save(topo, shapes.nic_nodes(8, 4, nics=2))
    out = tmp_path / "s.json"
    args = ["--topology", str(topo), "--collective", "reduce", "-o", str(out)]
    assert main([*args, "--size", "4M", "--cpu", "--try-trees", "2", "--segments", "256K,1M"]) == 0
    text = capsys.readouterr().out
    assert "bound: links" in text and "CPU" in text and "chosen:" in text and "two_tree" in text
    assert "any schedule: >= " in text  # reduce: the folds' floor, whatever the segment size
    s = forest.load(out)
    rec = s.forests[0].bound
    # 32 ranks, 4 MiB: 31/32 of every byte folded at 1.5e-10 s/B, one message each way at 9 us
    assert rec["any_floor_s"] == pytest.approx((4 << 20) * 31 / 32 * 1.5e-10 + 2 * 31 / 32 * 9.0e-6)
    assert rec["any_floor_s"] <= rec["cpu_floor_s"] <= rec["cpu_s"]
    assert rec["segment"] in (256 << 10, 1 << 20) and rec["binds"] in ("cpu", "links") and rec["size"] == 4 << 20
    assert json.loads(out.read_text())["collective"] == "reduce"
    assert main([*args, "--size", "4M", "--segment", "1M"]) == 0
    assert "estimate for 4194304 bytes in 1024 KiB segments" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([*args, "--cpu"])  # --cpu needs --size
    assert exc.value.code == 2
