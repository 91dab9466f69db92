"""The shared-memory node level in the simulator (`shm`, `topo:intra=shm`): the library's own node
protocols and trees between node leaders give exact results on every node layout and root, fold in
rank order, cost what the model says, and refuse what the library would not run on the node level."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptcoll.backends.base import ReduceOp
from adaptcoll.runtime import settings
from adaptcoll.simulate.cli import main as cli_main
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import CostParams
from adaptcoll.simulate.programs import Job, make_buffers, prepare
from adaptcoll.simulate.run import compare, run_once
from adaptcoll.simulate.world import World

SMALL = settings.Settings(shm_segment_size=128, shm_slots=2)
"""128-byte slots, 2 per rank: every message below takes several segments and reuses every slot."""
SIZE = {"bcast": 1001, "reduce": 1000, "allreduce": 1000}


def _algorithm(size: int, rpn: int) -> str:
    """Alternate the two settings (and the shape between leaders) over the layouts."""
    if rpn == 1 or (size + rpn) % 2:
        return "shm"
    return "topo:intra=shm,inner=pipeline"


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_exact_on_every_layout_and_root(collective):
    """1-17 ranks, 1-4 ranks per node (the last node smaller where it does not divide), every root."""
    for size in range(1, 18):
        for rpn in range(1, 5):
            roots = range(size) if collective != "allreduce" else [0]
            for root in roots:
                job = Job(collective, size, SIZE[collective], 0, _algorithm(size, rpn), SMALL, root)
                _, world, bufs = run_once(job, CostParams(ranks_per_node=rpn), data=True)
                bufs.check(root)
                assert world.unmatched == 0


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_single_node_of_1_to_8_ranks(collective):
    """One node (ranks == ranks per node): no messages at all, every root, slots reused many times."""
    for size in range(1, 9):
        for root in range(size) if collective != "allreduce" else [0]:
            job = Job(collective, size, 8 * SIZE[collective], 0, "shm", SMALL, root)
            stats, _, bufs = run_once(job, CostParams(ranks_per_node=size), data=True)
            bufs.check(root)
            assert stats.messages == 0


def _matmul7(lower, higher):
    """higher = lower @ higher (mod 7) for every group of 4 elements as a 2x2 matrix: associative, not commutative."""
    a = lower.reshape(-1, 2, 2).astype(np.int64) % 7
    b = higher.reshape(-1, 2, 2).astype(np.int64) % 7
    higher[:] = ((a @ b) % 7).reshape(-1)


MATMUL7 = ReduceOp("USER", commutative=False, user_fold=_matmul7)


def _run_op(job, params, op, noise=None, sample=0):
    """run_once with another op than SUM (data mode): returns the buffers."""
    cpu = starts = None
    if noise is not None:
        cpu = noise.cpu_timeline(job.size, sample)
        starts = noise.start_times(job.size, 0, sample)
    world = World(job.size, params, job.itemsize, params.engine, params.o, cpu_noise=cpu, data=True)
    bufs = make_buffers(job.collective, job.size, job.count, job.root, data=True, seed=sample)
    starter = prepare(job, params.ranks_per_node).starter(world, bufs, op)
    for r in range(job.size):
        world.start(r, starts[r] if starts else 0.0, starter(r))
    world.run()
    return bufs


def test_single_node_folds_in_rank_order_whatever_the_timing():
    noise = parse_noise(["1kHz x 25us, poisson", "skew: uniform:30us"])
    for size in range(1, 9):
        for collective in ("reduce", "allreduce"):
            job = Job(collective, size, 1008, 0, "shm", SMALL, 0)  # 252 floats: whole 2x2 matrices
            for sample, noisy in ((0, None), (1, noise), (2, noise)):
                bufs = _run_op(job, CostParams(ranks_per_node=size), MATMUL7, noisy, sample)
                want = bufs.local[0].copy()
                for x in bufs.local[1:]:
                    higher = x.copy()
                    _matmul7(want, higher)
                    want = higher
                ranks = [0] if collective == "reduce" else range(size)
                for r in ranks:
                    assert np.array_equal(bufs.result[r], want), (collective, size, sample, r)


def test_non_commutative_op_across_nodes_is_refused():
    job = Job("allreduce", 8, 1000, 0, "topo:intra=shm", SMALL)
    with pytest.raises(ValueError, match="non-commutative op across nodes"):
        _run_op(job, CostParams(ranks_per_node=4), MATMUL7)


def test_exact_under_noise_and_skew():
    noise = parse_noise(["1kHz x 25us, poisson", "skew: uniform:20us"])
    for collective in ("bcast", "reduce", "allreduce"):
        for algorithm in ("shm", "topo:intra=shm,inner=knomial:radix=3"):
            job = Job(collective, 13, 8 * SIZE[collective], 0, algorithm, SMALL, 5 if collective != "allreduce" else 0)
            for sample in range(3):
                _, _, bufs = run_once(job, CostParams(ranks_per_node=4), noise=noise, sample=sample, data=True)
                bufs.check(job.root)


def test_cost_of_one_segment_between_two_ranks():
    """Entry: start event, copy in, flags; reader: start event, sees the flag shm_flag later, event, copy out."""
    params = CostParams(ranks_per_node=2, shm_copy=2e-10, shm_flag=3e-6)
    n = 4096
    stats, world, _ = run_once(Job("bcast", 2, n, 0, "shm"), params)
    assert world.finished[0] == pytest.approx(params.engine + n * params.shm_copy, rel=1e-12)
    assert stats.time_s == pytest.approx(2 * params.engine + 2 * n * params.shm_copy + params.shm_flag, rel=1e-12)


def test_only_node_leaders_send_messages():
    """64 ranks as 8 nodes of 8: one message per segment per edge of the tree between the 8 leaders."""
    params = CostParams(ranks_per_node=8)
    for collective in ("bcast", "reduce"):
        for algorithm in ("shm", "topo:intra=shm,inner=pipeline"):
            job = Job(collective, 64, 4 << 20, 0, algorithm)
            prepared = prepare(job, 8)
            stats = run_once(job, params, prepared=prepared)[0]
            assert prepared.plan.nseg == 8 and stats.messages == 7 * 8
    same = [run_once(Job("allreduce", 64, 4 << 20, 0, a), params)[0] for a in ("shm", "topo:intra=shm")]
    assert same[0] == same[1]  # shm is topo:intra=shm with binomial trees between leaders


def test_declared_topology_refines_the_nodes():
    cfg = settings.Settings(shm_segment_size=128, shm_slots=2, topology="nodes=4")
    job = Job("allreduce", 8, 1000, 0, "topo:intra=shm", cfg)
    prepared = prepare(job, 4)
    assert prepared.node is not None and prepared.node.describe()["nodes"] == 4
    run_once(job, CostParams(ranks_per_node=4), data=True)[2].check()


def test_environment_setting_selects_the_node_level():
    cfg = settings.from_environ({"ADAPTCOLL_REDUCE_ALGORITHM": "topo:intra=shm", "ADAPTCOLL_SHM_SEGMENT_SIZE": "256"})
    prepared = prepare(Job("reduce", 12, 4000, 0, "", cfg, 7), 4)
    assert prepared.protocol == "topo:intra=shm" and prepared.plan.seg_count * 4 == 256
    assert prepared.node is not None


def test_report_says_what_ran():
    job = Job("bcast", 16, 1 << 20, 0, "topo:intra=shm")
    report = compare(job, CostParams(ranks_per_node=4), parse_noise([]))
    row = report["results"][0]
    assert report["job"]["algorithm"] == "topo:intra=shm" and row["protocol"] == "topo:intra=shm"
    assert row["node_level"] == {"nodes": 4, "largest_node": 4, "slots": 4, "slot_bytes": 512 * 1024}
    assert report["params"]["shm_copy"] == CostParams().shm_copy
    plain = compare(Job("bcast", 16, 1 << 20, 0, "binomial"), CostParams(ranks_per_node=4), parse_noise([]))
    assert "shm_copy" not in plain["params"] and "node_level" not in plain["results"][0]


@pytest.mark.parametrize(
    ("algorithm", "rpn", "cfg", "message"),
    [
        ("shm:radix=2", 4, settings.Settings(), "shm takes no parameters"),
        ("topo:intra=shm,inner=bogus", 4, settings.Settings(), "bogus"),
        ("topo:intra=shm,fanout=2", 4, settings.Settings(), "fanout"),
        ("topo:intra=shm", 1, settings.Settings(), "topo trees need a topology"),
        ("shm", 4, settings.Settings(shm_bytes=1000), "cannot hold 4 slots"),
        ("shm", 4, settings.Settings(shm_segment_size=64, tag_space=4), "slot-sized segments but only 4 tags"),
    ],
)
def test_what_the_node_level_cannot_run_is_a_value_error(algorithm, rpn, cfg, message):
    with pytest.raises(ValueError, match=message):
        prepare(Job("reduce", 8, 4096, 0, algorithm, cfg), rpn)


def test_cli(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--collective", "allreduce", "--ranks", "32", "--size", "1M", "--ranks-per-node", "8"]
    assert cli_main([*argv, "--algorithm", "topo:intra=shm", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "algorithm topo:intra=shm" in text and "node level: 4 node(s) of up to 8 ranks" in text
    assert json.loads(out.read_text())["results"][0]["node_level"]["nodes"] == 4
    assert cli_main([*argv, "--algorithm", "shm:x=1"]) == 2
    assert "shm takes no parameters" in capsys.readouterr().err
