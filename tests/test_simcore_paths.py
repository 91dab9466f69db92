"""The C core on described networks (pathlinks.PathLinks) against the Python core, event for event.

Both sharing models (max-min's progressive filling, widened where held messages must move, by scan and
by heap; the bottleneck model) on fat trees with one and two spines, nodes behind two NICs with several
ranks per node (shared memory inside), and a chain of links of different bandwidth: adaptcoll's trees,
a weighted forest and the lock-step baselines, quiet and with CPU and link detours and start skew, 'pair'
order, gaps, the receiver's copies (transfer 'cpu') and shared-memory copies under node_bw. Same per-rank
finish times, RunStats (events included) and final time as tests/test_simcore.py asks of the default
network.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from test_simulate_topology import _both as _both_ways
from test_simulate_topology import _fat_tree as _topology_fat_tree

from adaptcoll.runtime import settings
from adaptcoll.schedule import shapes
from adaptcoll.schedule.describe import Description
from adaptcoll.simulate import fastcore
from adaptcoll.simulate.lockstep import BASELINES, NotModelled
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import run_once
from adaptcoll.simulate.world import World

pytestmark = pytest.mark.skipif(fastcore.library() is None, reason=f"no C core here: {fastcore.status()}")

MB = 1 << 20
NOISE = ("20kHz x 5us, poisson", "net: 50kHz x 2us", "skew: uniform:10us")
NO_CAP = settings.Settings(max_segments=0)


def _fat_tree(leaves: int, per_leaf: int, spines: int, over: float) -> Description:
    """tests/test_simulate_topology.py's fat tree (ranks under leaves under spines, uplinks 1/`over`)."""
    return _topology_fat_tree(leaves, per_leaf, spines, over=over)


def _chain() -> Description:
    """0 -> a -> b -> 1 at 10, 5 and 20 GB/s (and back)."""
    links = _both_ways(0, "a", 10e9, 1e-6) + _both_ways("a", "b", 5e9, 2e-6) + _both_ways("b", 1, 20e9, 3e-6)
    return Description(2, tuple(links), ("a", "b"), name="chain")


NETWORKS = {
    "fat tree 32, 2 spines": (lambda: _fat_tree(4, 8, 2, 4.0), DEFAULT_PARAMS),
    "4 nodes x 8, 2 NICs": (
        lambda: shapes.nic_nodes(4, 8, nics=2),
        dataclasses.replace(DEFAULT_PARAMS, ranks_per_node=8),
    ),
    "8 nodes x 4, 1 NIC, 1 per node": (lambda: shapes.nic_nodes(8, 4), DEFAULT_PARAMS),
}


def _same(job: Job, params: CostParams, routes: Routes, impl: str = "adaptcoll", noise=None, sample: int = 0) -> None:
    py_stats, py_world, _ = run_once(job, params, impl, noise, 3, sample, topology=routes, core="python")
    c_stats, c_world, _ = run_once(job, params, impl, noise, 3, sample, topology=routes, core="c")
    assert isinstance(py_world, World) and isinstance(c_world, fastcore.CoreRun)
    assert c_world.finished == py_world.finished, f"{impl} {job}: per-rank finish times differ"
    assert c_stats == py_stats, f"{impl} {job}: {c_stats} != {py_stats}"
    assert (c_world.now, c_world.unmatched) == (py_world.now, py_world.unmatched)


@pytest.mark.parametrize("sharing", ["maxmin", "bottleneck"])
@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_trees_run_alike_on_described_networks(network: str, sharing: str) -> None:
    make, params = NETWORKS[network]
    desc = make()
    routes = Routes(desc, sharing)
    noise = parse_noise(list(NOISE))
    rng = random.Random(f"{network} {sharing}")
    for collective in ("bcast", "reduce", "allreduce"):
        for kind in ("two_tree", "binomial", "linear:fanout=8"):
            if kind.startswith("linear") and collective != "bcast":  # many messages at once: slow in Python
                continue
            job = Job(collective, desc.ranks, 2 * MB, 64 << 10, kind, root=rng.randrange(desc.ranks), settings=NO_CAP)
            _same(job, params, routes)
            if kind == "two_tree":
                _same(job, params, routes, noise=noise, sample=1)


VARIANTS = {
    "pair links, gap": ({"links": "pair", "g": 1e-6}, []),
    "transfer cpu, noise": ({"transfer": "cpu"}, list(NOISE)),
    "all eager": ({"eager": 4 * MB}, []),
    "4 per node, node_bw, large copies": (
        {"ranks_per_node": 4, "node_bw": 5e9, "large_from": 32768, "large_cost": 1.5},
        [],
    ),
}


@pytest.mark.parametrize("sharing", ["maxmin", "bottleneck"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_branches_of_the_model_run_alike_on_a_fat_tree(variant: str, sharing: str) -> None:
    fields, noise_texts = VARIANTS[variant]
    params = dataclasses.replace(DEFAULT_PARAMS, **fields)
    noise = parse_noise(noise_texts) if noise_texts else None
    routes = Routes(_fat_tree(4, 4, 1, 4.0), sharing)
    for collective in ("bcast", "reduce", "allreduce"):
        job = Job(collective, 16, MB, 64 << 10, "two_tree", root=5, settings=NO_CAP)
        _same(job, params, routes, noise=noise)


@pytest.mark.parametrize("sharing", ["maxmin", "bottleneck"])
def test_lockstep_baselines_run_alike_on_described_networks(sharing: str) -> None:
    noise = parse_noise(list(NOISE))
    ran = 0
    for desc in (_fat_tree(2, 6, 2, 2.0), _chain()):
        routes = Routes(desc, sharing)
        for name in sorted(BASELINES):
            for collective in BASELINES[name]:
                job = Job(collective, desc.ranks, MB, 64 << 10, root=desc.ranks // 3)
                try:
                    run_once(job, DEFAULT_PARAMS, name, noise, 3, 0, topology=routes, core="python")
                except NotModelled:
                    continue
                try:
                    _same(job, DEFAULT_PARAMS, routes, name, noise)
                except fastcore.CoreUnavailable as exc:
                    assert name == "ompi_han" and "concurrent parts" in str(exc)
                    continue
                ran += 1
    assert ran >= 20


@pytest.mark.parametrize("sharing", ["maxmin", "bottleneck"])
def test_a_weighted_forest_runs_alike_on_a_described_network(sharing: str, tmp_path) -> None:
    from forest_files import random_schedule, write_schedule

    rng = random.Random(sharing)
    desc = _fat_tree(4, 6, 2, 3.0)
    routes = Routes(desc, sharing)
    for collective in ("bcast", "allreduce"):
        roots = list(range(desc.ranks)) if collective == "allreduce" else [rng.randrange(desc.ranks)]
        algorithm = write_schedule(tmp_path / f"{collective}.json", random_schedule(desc.ranks, roots, rng))
        job = Job(collective, desc.ranks, MB, 16 << 10, algorithm, root=roots[0], settings=NO_CAP)
        _same(job, DEFAULT_PARAMS, routes)


def test_a_route_not_handed_over_is_added_and_the_run_repeated(monkeypatch) -> None:
    """The C core asks for a route Python did not expect (none here): the same run, one route at a time."""
    monkeypatch.setattr(fastcore, "_tree_pairs", lambda *args: set())
    _same(Job("allreduce", 8, MB, 128 << 10, "binomial", root=2), DEFAULT_PARAMS, Routes(_fat_tree(2, 4, 1, 2.0)))


def test_what_the_c_core_refuses_on_a_described_network(monkeypatch) -> None:
    routes = Routes(_fat_tree(2, 2, 1, 1.0), "bottleneck")
    job = Job("bcast", 4, MB, 64 << 10, "binomial")
    fifo = dataclasses.replace(DEFAULT_PARAMS, links="fifo")
    with pytest.raises(fastcore.CoreUnavailable, match="not FIFO"):
        run_once(job, fifo, topology=routes, core="c")
    with pytest.raises(ValueError, match="links must be 'fair'"):  # auto: the Python core says why
        run_once(job, fifo, topology=routes)
    assert isinstance(run_once(job, DEFAULT_PARAMS, topology=routes)[1], fastcore.CoreRun)
    monkeypatch.setattr(fastcore, "SHARINGS", ("maxmin",))
    with pytest.raises(fastcore.CoreUnavailable, match="'bottleneck' sharing of a described network"):
        run_once(job, DEFAULT_PARAMS, topology=routes, core="c")
