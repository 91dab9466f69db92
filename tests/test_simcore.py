"""The simulator's C core (adaptcoll/simulate/simcore.c) against the Python core, event for event.

The C core runs the compiled engine's tree protocols (progress.c) on a C copy of world.py and the fair
links; both must give the same times per rank, messages, bytes, events and callbacks for every tree
kind, 1-17 ranks, several roots, both link policies, several ranks per node, eager and rendezvous
sizes, the sync modes, ordered folds, windows, gaps, shared-memory copies and detour noise.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from adaptcoll.runtime import settings
from adaptcoll.simulate import fastcore
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import CostParams
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import run_once
from adaptcoll.simulate.world import World

pytestmark = pytest.mark.skipif(fastcore.library() is None, reason=f"no C core here: {fastcore.status()}")

KINDS = (
    "binomial",
    "in_order_binomial",
    "binary",
    "pipeline",
    "chain:chains=2",
    "linear:fanout=3",
    "knomial:radix=3",
    "two_tree",
    "multi_tree:fanout=3",
)
BASE = CostParams(o=2e-6, engine=1e-6)


def _both(job: Job, params: CostParams, noise=None, seed: int = 1, sample: int = 0) -> None:
    py_stats, py_world, _ = run_once(job, params, "adaptcoll", noise, seed, sample, core="python")
    c_stats, c_world, _ = run_once(job, params, "adaptcoll", noise, seed, sample, core="c")
    assert isinstance(py_world, World) and isinstance(c_world, fastcore.CoreRun)
    assert c_world.finished == py_world.finished, f"{job} per-rank finish times differ"
    assert c_stats == py_stats, f"{job}: {c_stats} != {py_stats}"
    assert (c_world.now, c_world.unmatched) == (py_world.now, py_world.unmatched)


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
@pytest.mark.parametrize("kind", KINDS)
def test_same_run_as_the_python_core(collective: str, kind: str) -> None:
    rng = random.Random(f"{collective} {kind}")
    for size in (1, 2, 3, 5, 8, 13, 17):
        root = rng.randrange(size)
        nbytes = rng.choice((4096, 48 << 10, 1 << 20))
        job = Job(collective, size, nbytes, rng.choice((1024, 8192, 64 << 10)), kind, root=root,
                  settings=settings.from_environ({"ADAPTCOLL_MAX_SEGMENTS": "0"}))  # fmt: skip
        _both(job, BASE)


WINDOWS = {
    "ADAPTCOLL_BCAST_SEND_WINDOW": "1",
    "ADAPTCOLL_BCAST_RECV_WINDOW": "5",
    "ADAPTCOLL_REDUCE_SEND_WINDOW": "1",
    "ADAPTCOLL_REDUCE_RECV_WINDOW": "5",
}
NODE_BW = {"ranks_per_node": 4, "node_bw": 5e9, "large_from": 32768, "large_cost": 1.5}
CONTENTION = {"transfer": "cpu", "copy_order": "poll", "copy_contention": 0.25}


def _variants() -> list[tuple[str, dict[str, str], dict[str, object], list[str]]]:
    """(name, settings, parameters, noise) of the model's other branches."""
    return [
        ("pair links", {}, {"links": "pair"}, []),
        ("fifo links", {}, {"links": "fifo"}, []),
        (
            "fifo links, 4 per node, gap, noise",
            {},
            {"links": "fifo", "ranks_per_node": 4, "g": 2e-6},
            ["20kHz x 5us", "net: 50kHz x 2us"],
        ),
        ("4 ranks per node", {}, {"ranks_per_node": 4}, []),
        ("4 per node, node_bw, large copies", {}, NODE_BW, []),
        ("transfer cpu", {}, {"transfer": "cpu"}, []),
        ("transfer cpu, copies after completions", {}, {"transfer": "cpu", "copy_order": "poll"}, []),
        (
            "4 per node, node_bw, copies after completions, noise",
            {},
            {**NODE_BW, "copy_order": "poll"},
            ["20kHz x 5us"],
        ),
        ("4 per node, node_bw, copy contention", {}, {**NODE_BW, "copy_contention": 0.3}, []),
        ("transfer cpu, copy contention alone, copies after completions", {}, CONTENTION, []),
        ("gap", {}, {"g": 3e-6}, []),
        ("all eager", {}, {"eager": 1 << 20}, []),
        ("sync all", {"ADAPTCOLL_SYNC_SENDS": "all"}, {}, []),
        ("sync none, eager", {"ADAPTCOLL_SYNC_SENDS": "none"}, {"eager": 1 << 20}, []),
        ("ordered folds", {"ADAPTCOLL_REPRODUCIBLE": "1"}, {}, []),
        ("windows 1 and 5", WINDOWS, {}, []),
        ("small tag space", {"ADAPTCOLL_TAG_SPACE": "3"}, {}, []),
        ("allreduce roots", {"ADAPTCOLL_ALLREDUCE_ROOTS": "3"}, {}, []),
        ("cpu noise", {}, {}, ["20kHz x 10us"]),
        ("poisson, net noise, skew", {}, {}, ["20kHz x 5us, poisson", "net: 50kHz x 2us", "skew: uniform:20us"]),
        ("noise, 4 per node, pair", {}, {"ranks_per_node": 4, "links": "pair"}, ["50kHz x 4us"]),
    ]


@pytest.mark.parametrize("variant", _variants(), ids=lambda v: v[0])
def test_same_run_in_every_branch_of_the_model(variant) -> None:
    name, env, fields, noise_texts = variant
    params = dataclasses.replace(BASE, **fields)
    noise = parse_noise(noise_texts) if noise_texts else None
    rng = random.Random(name)
    env = {"ADAPTCOLL_MAX_SEGMENTS": "0", **env}
    for collective in ("bcast", "reduce", "allreduce"):
        for size in (2, 6, 11, 16):
            kind = rng.choice(KINDS)
            job = Job(collective, size, rng.choice((64 << 10, 1 << 20)), rng.choice((8192, 64 << 10)), kind,
                      root=rng.randrange(size), settings=settings.from_environ(env))  # fmt: skip
            for sample in range(2 if noise else 1):
                _both(job, params, noise, seed=3, sample=sample)


def test_the_rules_choice_at_a_thousand_ranks() -> None:
    """The case the C core is for: the shipped rule's two_tree / multi_tree at scale, many messages."""
    job = Job("bcast", 256, 4 << 20, 0, settings=settings.from_environ({"ADAPTCOLL_ENGINE": "compiled"}))
    _both(job, dataclasses.replace(BASE, o=0.5e-6, engine=0.1e-6))


def test_core_setting_and_what_the_c_core_refuses(monkeypatch) -> None:
    job = Job("allreduce", 4, 1 << 20, 1 << 16, "ring")
    with pytest.raises(fastcore.CoreUnavailable, match="ring"):
        run_once(job, BASE, core="c")
    assert isinstance(run_once(job, BASE)[1], World)  # auto: the Python core runs what C does not
    tree = Job("bcast", 4, 1 << 20, 1 << 16, "binomial")
    assert isinstance(run_once(tree, BASE)[1], fastcore.CoreRun)  # auto: C where it applies
    assert isinstance(run_once(tree, BASE, data=True)[1], World)
    with pytest.raises(fastcore.CoreUnavailable, match="fixed-fraction noise"):
        run_once(tree, BASE, "adaptcoll", parse_noise(["fraction: 2.5%"]), core="c")
    monkeypatch.setenv("ADAPTCOLL_SIM_CORE", "python")
    assert isinstance(run_once(tree, BASE)[1], World)
    monkeypatch.setenv("ADAPTCOLL_SIM_CORE", "fast")
    with pytest.raises(ValueError, match="ADAPTCOLL_SIM_CORE must be one of auto, python, c"):
        run_once(tree, BASE)


class _BrokenTree:
    """Rank 2 waits for rank 0, which never sends to it."""

    params = ()
    root = 0

    def parent(self, rank: int):
        return None if rank == 0 else 0

    def children(self, rank: int):
        return (1,) if rank == 0 else ()


def test_a_deadlock_is_reported_not_hung() -> None:
    from adaptcoll.simulate.world import Deadlock

    job = Job("bcast", 3, 1 << 16, 1 << 14, "binomial")
    broken = dataclasses.replace(prepare(job), trees=(_BrokenTree(),))
    with pytest.raises(Deadlock, match="1 of 3 ranks never finished; 0 sends and 3 receives unmatched"):
        run_once(job, BASE, prepared=broken, core="c")
    with pytest.raises(Deadlock, match=r"1 of 3 ranks never finished .* 0 sends and 3 receives unmatched"):
        run_once(job, BASE, prepared=broken, core="python")


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_weighted_forests_run_alike(collective: str, tmp_path) -> None:
    """`forest:PATH` schedules: random trees of random weights, segments dealt by weight on both cores."""
    from forest_files import random_schedule, write_schedule

    rng = random.Random(collective)
    for size in (5, 12):
        roots = list(range(size)) if collective == "allreduce" else [rng.randrange(size)]
        algorithm = write_schedule(tmp_path / f"{collective}-{size}.json", random_schedule(size, roots, rng))
        job = Job(collective, size, 1 << 20, 16 << 10, algorithm, root=roots[0],
                  settings=settings.from_environ({"ADAPTCOLL_MAX_SEGMENTS": "0"}))  # fmt: skip
        _both(job, BASE)


# -- lock-step baselines -----------------------------------------------------------------------------
LOCKSTEP_VARIANTS = {
    "default": ({}, []),
    "4 ranks per node, node_bw": ({"ranks_per_node": 4, "node_bw": 5e9}, []),
    "transfer cpu, copies after completions": ({"transfer": "cpu", "copy_order": "poll", "node_bw": 5e9}, []),
    "transfer cpu, node_bw, copy contention": ({**CONTENTION, "node_bw": 5e9}, []),
    "pair links, faults": ({"links": "pair", "fault": 6e-10, "fault_from": 1 << 16}, []),
    "fifo links, noise": ({"links": "fifo"}, ["20kHz x 10us", "net: 50kHz x 2us"]),
    "noise and skew": ({}, ["20kHz x 10us", "net: 50kHz x 2us", "skew: uniform:20us"]),
}


@pytest.mark.parametrize("variant", sorted(LOCKSTEP_VARIANTS))
def test_lockstep_baselines_run_alike(variant: str) -> None:
    """Every baseline whose steps are flat runs on the C core as lockstep.LockStep runs it in Python."""
    from adaptcoll.simulate.lockstep import BASELINES, NotModelled

    fields, noise_texts = LOCKSTEP_VARIANTS[variant]
    params = dataclasses.replace(CostParams(), **fields)
    noise = parse_noise(noise_texts) if noise_texts else None
    ran = 0
    for name in sorted(BASELINES):
        for collective in BASELINES[name]:
            for size in (3, 8, 13):
                job = Job(collective, size, 1 << 20, 1 << 16, root=size // 3)
                try:
                    py_stats, py_world, _ = run_once(job, params, name, noise, 2, 1, core="python")
                except NotModelled:
                    with pytest.raises(NotModelled):
                        run_once(job, params, name, noise, 2, 1, core="c")
                    continue
                try:
                    c_stats, c_world, _ = run_once(job, params, name, noise, 2, 1, core="c")
                except fastcore.CoreUnavailable as exc:
                    assert name == "ompi_han" and "concurrent parts" in str(exc)
                    continue
                assert c_world.finished == py_world.finished, (name, collective, size)
                assert (c_stats, c_world.now) == (py_stats, py_world.now), (name, collective, size)
                ran += 1
    assert ran >= 60
