"""The simulator on a described network (--topology): routes, per-link bandwidth and latency, shared links.

Small descriptions built by hand, whose times are computed by hand: latencies add along a route and
its slowest link sets the speed; messages sharing a link share it; disjoint routes do not interfere;
an oversubscribed fat tree slows cross-leaf traffic; lock-step baselines see the network too; and a
description of the default network (a link per rank each way, one non-blocking switch) gives the
default model's results exactly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from adaptcoll.runtime import settings
from adaptcoll.schedule.describe import Description, Link, save
from adaptcoll.simulate import cli
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import NoRoute, Routes
from adaptcoll.simulate.run import best_lockstep, compare, run_once
from adaptcoll.simulate.world import World

ROOT = Path(__file__).resolve().parent.parent
# no CPU costs, everything eager: a message leaves when posted and its receive completes when it is in
FREE = CostParams(o=0.0, engine=0.0, native_o=0.0, fold=0.0, eager=1 << 30)
MB = 1 << 20
REL = 1e-12


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


def _both(a, b, bw: float, lat: float) -> list[Link]:
    return [Link(a, b, bw, lat), Link(b, a, bw, lat)]


def _arrivals(
    desc: Description,
    sends: list[tuple[int, int, int]],
    params: CostParams = FREE,
    sharing: str = "maxmin",
    starts: Optional[list[float]] = None,
) -> list[float]:
    """Post every (src, dst, bytes) when its ranks start (`starts`, else all at 0); the time each receive
    completes, in the order given."""
    world = World(desc.ranks, params, topology=Routes(desc, sharing))
    got = [-1.0] * len(sends)
    pending = [0] * desc.ranks
    for src, dst, _ in sends:
        pending[src] += 1
        pending[dst] += 1

    def finish(rank: int) -> None:
        pending[rank] -= 1
        if pending[rank] == 0:
            world.done(rank)

    def starter(rank: int):
        def start() -> None:
            t = world.ranks[rank]
            for i, (src, dst, n) in enumerate(sends):
                if dst == rank:

                    def received(i: int = i) -> None:
                        got[i] = world.now
                        finish(rank)

                    t.irecv(range(n), src, i, received)
            for i, (src, dst, n) in enumerate(sends):
                if src == rank:
                    t.isend(range(n), dst, i, lambda: finish(rank))
            if pending[rank] == 0:
                world.done(rank)

        return start

    for r in range(desc.ranks):
        world.start(r, starts[r] if starts else 0.0, starter(r))
    world.run()
    return got


def _chain() -> Description:
    """0 -> a -> b -> 1 at 10, 5 and 20 GB/s, 1, 2 and 3 us (and back)."""
    links = _both(0, "a", 10e9, 1e-6) + _both("a", "b", 5e9, 2e-6) + _both("b", 1, 20e9, 3e-6)
    return Description(2, tuple(links), ("a", "b"), name="chain")


def _star(ranks: int, bw: float = 10e9, lat: float = 1e-6) -> Description:
    links = [link for r in range(ranks) for link in _both(r, "sw", bw, lat)]
    return Description(ranks, tuple(links), ("sw",), name="star")


def _fat_tree(leaves: int = 2, per_leaf: int = 4, spines: int = 1, bw: float = 10e9, over: float = 4.0):
    """Ranks under leaves under spines; each leaf's uplinks carry 1/`over` of its ranks' bandwidth."""
    links: list[Link] = []
    names = [f"spine{s}" for s in range(spines)] + [f"leaf{k}" for k in range(leaves)]
    for k in range(leaves):
        for s in range(spines):
            links += _both(f"leaf{k}", f"spine{s}", per_leaf * bw / over / spines, 1e-6)
        for r in range(k * per_leaf, (k + 1) * per_leaf):
            links += _both(r, f"leaf{k}", bw, 1e-6)
    return Description(leaves * per_leaf, tuple(links), tuple(names), name=f"fat tree {over:g}:1")


def _default_network(ranks: int, params: CostParams = DEFAULT_PARAMS) -> Description:
    """The default model as a description: a link of G s/B each way per rank, one switch, L/2 per link."""
    return _star(ranks, 1.0 / params.G, params.L / 2)


# -- one message, shared links, disjoint routes ------------------------------------------------------
def test_three_hop_route_adds_latencies_and_runs_at_its_slowest_link():
    (t,) = _arrivals(_chain(), [(0, 1, MB)])
    assert _close(t, MB / 5e9 + 6e-6), t
    assert Routes(_chain()).describe_route(0, 1) == ["0", "'a'", "'b'", "1"]


def test_two_messages_sharing_a_link_take_twice_as_long():
    star = _star(3)
    (alone,) = _arrivals(star, [(0, 2, MB)])
    both = _arrivals(star, [(0, 2, MB), (1, 2, MB)])  # both into rank 2: its link from the switch
    assert _close(alone, MB / 10e9 + 2e-6)
    assert _close(both[0], 2 * MB / 10e9 + 2e-6) and _close(both[1], both[0]), both


def test_messages_on_disjoint_routes_do_not_interfere():
    star = _star(4)
    got = _arrivals(star, [(0, 1, MB), (2, 3, MB), (1, 0, MB), (3, 2, MB)])  # full duplex: no link shared
    assert all(_close(t, MB / 10e9 + 2e-6) for t in got), got


def test_a_short_message_leaves_a_shared_link_early_and_the_long_one_speeds_up():
    """Fair sharing over a route: both at half speed until the short one is done, then full speed."""
    got = _arrivals(_star(3), [(0, 2, MB), (1, 2, 3 * MB)])
    assert _close(got[0], 2 * MB / 10e9 + 2e-6)
    assert _close(got[1], (2 * MB + 2 * MB) / 10e9 + 2e-6), got  # 1 MB at half speed, 2 MB at full


def test_max_min_hands_a_share_left_over_to_the_others_on_the_link():
    """A (0 -> 1) shares rank 0's link with B (0 -> 2); B also shares rank 2's link with C, D, E. Filling:
    rank 2's link is full first, at C/4 each for B..E (C: 10 GB/s); A gets what B leaves of rank 0's
    link, 3C/4 (alone on rank 1's link it could take C). A is done at MB / (3C/4); B..E at 4 MB / C
    (rank 2's link stays shared by 4 to the end). The bottleneck model gives A only C/2."""
    star = _star(6, 10e9, 0.0)
    sends = [(0, 1, MB), (0, 2, MB), (3, 2, MB), (4, 2, MB), (5, 2, MB)]
    got = _arrivals(star, sends)
    assert _close(got[0], MB / (0.75 * 10e9)), got[0]
    assert all(_close(t, 4 * MB / 10e9) for t in got[1:]), got
    old = _arrivals(star, sends, sharing="bottleneck")
    assert _close(old[0], 2 * MB / 10e9), old[0]  # the earlier model: A at its equal share of rank 0's link
    assert all(_close(t, 4 * MB / 10e9) for t in old[1:]), old


def test_one_link_shared_by_n_gives_each_one_nth():
    star = _star(6, 10e9, 0.0)
    got = _arrivals(star, [(r, 5, MB) for r in range(5)])  # all into rank 5
    assert all(_close(t, 5 * MB / 10e9) for t in got), got


def test_max_min_weighs_links_of_different_bandwidth_in_bytes_per_second():
    """As above with the links of ranks 0 and 1 at 20 GB/s, the others at 10: B..E get 2.5 GB/s each on
    rank 2's link, A the rest of rank 0's link, 17.5 GB/s (the bottleneck model: 10, half of it)."""
    links = [link for r in range(6) for link in _both(r, "sw", 20e9 if r < 2 else 10e9, 0.0)]
    star = Description(6, tuple(links), ("sw",), name="star")
    sends = [(0, 1, MB), (0, 2, MB), (3, 2, MB), (4, 2, MB), (5, 2, MB)]
    got = _arrivals(star, sends)
    assert _close(got[0], MB / 17.5e9), got[0]
    assert all(_close(t, 4 * MB / 10e9) for t in got[1:]), got
    assert _close(_arrivals(star, sends, sharing="bottleneck")[0], MB / 10e9)


def _reference_max_min(flows: list, cost: list[float]) -> dict[int, float]:
    """Max-min fair rates in bytes/s from scratch (plain progressive filling): id(flow) -> rate."""
    left = {id(f): f for f in flows}
    room = {x: 1.0 / cost[x] for f in flows for x in f.path}  # bytes/s not yet given out
    rates: dict[int, float] = {}
    while left:
        users = {x: [f for f in left.values() if x in f.path] for x in room}
        level, x = min((room[x] / len(fs), x) for x, fs in users.items() if fs)
        for f in users[x]:
            rates[id(f)] = level
            del left[id(f)]
            for y in f.path:
                room[y] -= level
    return rates


def test_max_min_rates_match_a_reference_and_never_overload_a_link(monkeypatch):
    """Random sends on a small two-level network of mixed bandwidths, ranks starting at random times:
    after every start and finish the rates equal a from-scratch progressive filling and no link carries
    more than its bandwidth. The runs need the widening of the refilled set and depart from the
    bottleneck model, or they would not test much."""
    import random

    from adaptcoll.simulate import maxmin, pathlinks

    checks = {"states": 0, "wider": 0, "not_bottleneck": 0}
    reshare = pathlinks.PathLinks._reshare

    def checked(self, path, now, src):
        reshare(self, path, now, src)
        flows = list({id(f): f for links in self._on for f in links}.values())
        cost = self._routes.cost
        want = _reference_max_min(flows, cost)
        for f in flows:
            assert f.rate / f.worst == pytest.approx(want[id(f)], rel=1e-9)
            if f.rate > 1.0000001 / max(wt * len(self._on[x]) for x, wt in zip(f.path, f.weights)):
                checks["not_bottleneck"] += 1
        for x, on in enumerate(self._on):
            assert sum(f.rate / f.worst for f in on) <= (1.0 + 1e-9) / cost[x]
        checks["states"] += 1

    fill = maxmin._fill

    def counted(members, on, cost, token):
        more = fill(members, on, cost, token)
        checks["wider"] += bool(more)
        return more

    monkeypatch.setattr(pathlinks.PathLinks, "_reshare", checked)
    monkeypatch.setattr(maxmin, "_fill", counted)
    for seed in range(6):
        rng = random.Random(seed)
        bw = [5e9, 10e9, 20e9, 40e9]
        links: list[Link] = []
        for r in range(10):
            links += _both(r, f"s{r % 3}", rng.choice(bw), 1e-7)
        links += _both("s0", "s1", rng.choice(bw), 1e-7) + _both("s1", "s2", rng.choice(bw), 1e-7)
        desc = Description(10, tuple(links), ("s0", "s1", "s2"))
        sends = [(s, d, rng.randrange(16, 512) << 10) for s, d in (rng.sample(range(10), 2) for _ in range(40))]
        starts = [rng.uniform(0.0, 40e-6) for _ in range(10)]
        assert all(t > 0 for t in _arrivals(desc, sends, starts=starts))
    assert checks["states"] > 400 and checks["wider"] > 0 and checks["not_bottleneck"] > 0, checks


# -- routes ---------------------------------------------------------------------------------------
def test_routes_prefer_latency_then_hops_and_are_deterministic():
    links = _both(0, "s", 10e9, 5e-6) + _both("s", 1, 10e9, 5e-6)  # 2 hops, 10 us
    links += _both(0, "p", 10e9, 1e-6) + _both("p", "q", 10e9, 1e-6) + _both("q", 1, 10e9, 1e-6)  # 3 hops, 3 us
    links += _both(0, "u", 10e9, 1e-6) + _both("u", "v", 10e9, 1e-6) + _both("v", "w", 10e9, 0.0)
    links += _both("w", 1, 10e9, 1e-6)  # 4 hops, also 3 us: more hops lose
    desc = Description(2, tuple(links), ("s", "p", "q", "u", "v", "w"))
    assert Routes(desc).describe_route(0, 1) == ["0", "'p'", "'q'", "1"]
    assert _arrivals(desc, [(0, 1, MB)])[0] == pytest.approx(MB / 10e9 + 3e-6, rel=REL)


def test_equal_routes_spread_over_spines_deterministically():
    desc = _fat_tree(leaves=4, per_leaf=4, spines=4)
    pairs = [(s, d) for s in range(16) for d in range(16) if s // 4 != d // 4]
    first = Routes(desc)
    again = Routes(desc)
    spines = {p: first.describe_route(*p)[2] for p in pairs}
    assert spines == {p: again.describe_route(*p)[2] for p in reversed(pairs)}  # any order of asking
    assert set(spines.values()) == {f"'spine{s}'" for s in range(4)}
    counts = sorted(list(spines.values()).count(f"'spine{s}'") for s in range(4))
    assert counts[0] >= len(pairs) // 8, counts  # spread, not all on one
    assert first.describe_route(0, 1) == ["0", "'leaf0'", "1"]  # inside a leaf: never up
    assert first.dijkstras <= 4  # one per leaf (each rank's first hop), not one per rank


def test_two_nics_per_node_share_the_flows():
    """4 ranks per node, each with a link to both of its node's NICs: flows between nodes use both."""
    links: list[Link] = []
    nics = [f"n{n}{k}" for n in range(2) for k in "ab"]
    for n in range(2):
        for k in "ab":
            links += _both(f"n{n}{k}", "core", 10e9, 1e-6)
            links += [link for r in range(4 * n, 4 * n + 4) for link in _both(r, f"n{n}{k}", 10e9, 1e-6)]
    routes = Routes(Description(8, tuple(links), (*nics, "core")))
    firsts = [routes.describe_route(s, d)[1] for s in range(4) for d in range(4, 8)]
    assert set(firsts) == {"'n0a'", "'n0b'"}, firsts
    assert all(len(routes.describe_route(s, d)) == 5 for s in range(4) for d in range(4, 8))


def test_ranks_relay_only_where_no_switch_connects_them_and_no_route_is_an_error():
    links = _both(0, 1, 10e9, 1e-6) + _both(1, 2, 10e9, 1e-6)  # a chain of ranks, no switch
    chain = Routes(Description(4, tuple(links)))
    assert chain.describe_route(0, 2) == ["0", "1", "2"]
    with pytest.raises(NoRoute, match="no route from rank 0 to rank 3"):
        chain.route(0, 3)


# -- a fat tree, baselines, collectives ------------------------------------------------------------
def test_oversubscribed_fat_tree_slows_cross_leaf_traffic():
    tree = _fat_tree(leaves=2, per_leaf=4, spines=1, over=4.0)  # 4 ranks at 10 GB/s over one 10 GB/s uplink
    inside = _arrivals(tree, [(0, 1, MB), (1, 0, MB), (2, 3, MB), (3, 2, MB)])
    across = _arrivals(tree, [(r, r + 4, MB) for r in range(4)])
    assert all(_close(t, MB / 10e9 + 2e-6) for t in inside), inside
    assert all(_close(t, 4 * MB / 10e9 + 4e-6) for t in across), across
    full = _fat_tree(leaves=2, per_leaf=4, spines=1, over=1.0)
    assert all(_close(t, MB / 10e9 + 4e-6) for t in _arrivals(full, [(r, r + 4, MB) for r in range(4)]))


def test_lockstep_baselines_cross_the_described_network():
    """MPICH's binomial Bcast on 2 ranks: native_o + handshake + transfer, the handshake and the data
    each taking the route's latency, the data at the route's slowest link."""
    params = dataclasses.replace(DEFAULT_PARAMS, eager=0)
    job = Job("bcast", 2, MB, MB, "binomial", settings.Settings(max_segments=0))
    stats = run_once(job, params, "binomial", topology=Routes(_chain()))[0]
    assert _close(stats.time_s, params.native_o + 2 * 6e-6 + MB / 5e9), stats.time_s
    tree = _fat_tree(leaves=4, per_leaf=4, spines=1, over=4.0)
    job16 = Job("bcast", 16, 4 * MB, 256 << 10, "two_tree")
    flat = _star(16, 10e9, 1e-6)
    times = {}
    for impl in ("binomial", "scatter_allgather", "adaptcoll"):
        slow = run_once(job16, DEFAULT_PARAMS, impl, topology=Routes(tree))[0].time_s
        fast = run_once(job16, DEFAULT_PARAMS, impl, topology=Routes(flat))[0].time_s
        times[impl] = (slow, fast)
    # binomial: one message per uplink at a time, so only latency: its critical path 0 -> 8 -> 12 -> 14 -> 15
    # crosses leaves twice, each time 2 links more (1 us each) for the handshake and for the data
    slow, fast = times.pop("binomial")
    assert _close(slow - fast, 2 * (2e-6 + 2e-6)), slow - fast
    slow, fast = times["scatter_allgather"]  # its allgather crosses the uplinks many at a time: 4:1 shows
    assert slow > fast * 1.2, (slow, fast)
    slow, fast = times["adaptcoll"]  # two in-order binary trees: few edges between leaves
    assert slow > fast, (slow, fast)


# -- the default network, described ---------------------------------------------------------------
NOISE = ("1kHz x 25us, poisson", "net: 1kHz x 10us")


DEFAULT_JOBS = [
    (Job("bcast", 64, 2 * MB, 64 << 10, "two_tree"), DEFAULT_PARAMS),
    (Job("bcast", 33, 1 * MB, 128 << 10, "binomial"), dataclasses.replace(DEFAULT_PARAMS, g=1.5e-6)),
    (Job("reduce", 32, 2 * MB, 128 << 10, "binomial"), DEFAULT_PARAMS),
    (Job("allreduce", 24, 2 * MB, 128 << 10, "two_tree"), DEFAULT_PARAMS),
    (Job("bcast", 16, 64 << 10, 4 << 10, "binomial"), DEFAULT_PARAMS),  # eager
]


def _default_and_described(job: Job, params: CostParams, sharing: str) -> tuple[dict, dict]:
    noise = parse_noise(list(NOISE))
    names = ("binomial",) if job.collective != "allreduce" else ("ring",)
    plain = compare(job, params, noise, names, seed=3, samples=2)
    routes = Routes(_default_network(job.size), sharing)
    described = compare(job, params, noise, names, seed=3, samples=2, topology=routes)
    summary = {"name": "star", "ranks": job.size, "switches": 1, "links": 2 * job.size, "sharing": sharing}
    assert described.pop("topology") == summary
    return plain, described


@pytest.mark.parametrize("job, params", DEFAULT_JOBS)
def test_description_of_the_default_network_gives_the_default_results_exactly(job, params):
    """Bit for bit, quiet and noisy, adaptcoll and baselines, events included: PathLinks' bottleneck
    sharing on two links of equal bandwidth is FairLinks (same arithmetic, same order of rescheduling)."""
    plain, described = _default_and_described(job, params, "bottleneck")
    assert described == plain


@pytest.mark.parametrize("job, params", DEFAULT_JOBS)
def test_max_min_on_the_default_network_is_fairlinks_where_its_shares_are_max_min(job, params):
    """FairLinks gives a message 1 / max(n_out, n_in); that is max-min when one side of every message is
    a single sender's fan-out or a single receiver's fan-in (binomial trees: bit for bit, events
    included). In two_tree a rank's receive link also carries the other tree's segments, and a share
    FairLinks leaves unused is handed on: the times move, by well under 0.1 %."""
    plain, described = _default_and_described(job, params, "maxmin")
    if job.algorithm == "binomial":
        assert described == plain
        return
    for got, want in zip(described["results"], plain["results"]):
        assert got["quiet_us"] == pytest.approx(want["quiet_us"], rel=1e-3)
        assert got["noisy_us"] == pytest.approx(want["noisy_us"], rel=1e-3)
    assert described != plain


def test_best_lockstep_takes_the_topology():
    job = Job("bcast", 16, 4 * MB, 256 << 10, "two_tree")
    tree = Routes(_fat_tree(leaves=4, per_leaf=4, over=4.0))
    best = best_lockstep(job, DEFAULT_PARAMS, parse_noise([]), names=("binomial", "scatter_allgather"), topology=tree)
    assert best["topology"]["ranks"] == 16
    for row, name in zip(best["results"], ("binomial", "scatter_allgather")):
        alone = run_once(job, DEFAULT_PARAMS, name, topology=tree)[0].time_s
        default = run_once(job, DEFAULT_PARAMS, name)[0].time_s
        assert row["quiet_us"] == alone * 1e6 and alone != default, (name, row["quiet_us"], alone, default)


# -- errors and the command line -------------------------------------------------------------------
def test_wrong_size_and_fifo_links_are_rejected():
    routes = Routes(_star(4))
    with pytest.raises(ValueError, match="has 4 ranks but the job has 8"):
        run_once(Job("bcast", 8, MB, MB), DEFAULT_PARAMS, topology=routes)
    with pytest.raises(ValueError, match="links must be 'fair'"):
        run_once(Job("bcast", 4, MB, MB), dataclasses.replace(DEFAULT_PARAMS, links="fifo"), topology=routes)


def test_cli_wrong_size_exits_2(tmp_path, capsys):
    path = tmp_path / "star.json"
    save(path, _star(4))
    argv = ["--collective", "bcast", "--ranks", "8", "--size", "1M", "--segment", "256K", "--topology", str(path)]
    assert cli.main(argv) == 2
    assert "has 4 ranks but the job has 8" in capsys.readouterr().err


def test_cli_sharing_picks_the_model(tmp_path, capsys):
    """--sharing picks the model: the report and the summary line say which, the times are run_once's
    with that model; an unknown model is refused."""
    path = tmp_path / "star.json"
    star = _star(6, 10e9, 0.0)
    save(path, star)
    argv = ["--collective", "bcast", "--ranks", "6", "--size", "1M", "--segment", "1M", "--algorithm", "binomial"]
    times = {}
    for sharing in ("maxmin", "bottleneck"):
        out = tmp_path / f"{sharing}.json"
        assert cli.main([*argv, "--topology", str(path), "--sharing", sharing, "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        assert report["topology"]["sharing"] == sharing
        times[sharing] = report["results"][0]["quiet_us"]
        job = Job("bcast", 6, MB, MB, "binomial")
        expect = run_once(job, DEFAULT_PARAMS, "adaptcoll", topology=Routes(star, sharing))[0].time_s * 1e6
        assert times[sharing] == pytest.approx(expect, rel=REL)
    assert "links shared by the bottleneck model" in capsys.readouterr().out
    with pytest.raises(ValueError, match="sharing must be one of"):
        Routes(star, "fifo")


def test_cli_topology(tmp_path):
    path = tmp_path / "tree.json"
    desc = _fat_tree(leaves=2, per_leaf=4, over=4.0)
    save(path, desc)
    out = tmp_path / "out.json"
    argv = ["--collective", "bcast", "--ranks", "8", "--size", "1M", "--segment", "256K", "--algorithm", "binomial"]
    argv += ["--baseline", "binomial", "--topology", str(path), "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "adaptcoll.simulate", *argv], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "network: fat tree 4:1" in done.stdout
    report = json.loads(out.read_text())
    summary = {"name": "fat tree 4:1", "ranks": 8, "switches": 3, "links": 20, "sharing": "maxmin", "file": str(path)}
    assert report["topology"] == summary
    job = Job("bcast", 8, MB, 256 << 10, "binomial")
    for row, impl in zip(report["results"], ("adaptcoll", "binomial")):
        expect = run_once(job, DEFAULT_PARAMS, impl, topology=Routes(desc))[0].time_s * 1e6
        assert row["quiet_us"] == pytest.approx(expect, rel=REL)


def test_cli_topology_gives_the_rule_its_nodes(tmp_path):
    """Without --segment the rule chooses, and on a described network it counts the network's nodes as the
    hosts would tell the library (2 nodes of 4 ranks: the case of several ranks per node); a declared
    ADAPTCOLL_TOPOLOGY still wins."""
    from adaptcoll.schedule import shapes

    path = tmp_path / "nodes.json"
    desc = shapes.fat_tree(2, 4, 4.0)
    save(path, desc)
    out = tmp_path / "out.json"
    argv = ["--collective", "reduce", "--ranks", "8", "--size", "16M", "--topology", str(path), "--json", str(out)]
    assert cli.main(argv) == 0
    choice = json.loads(out.read_text())["results"][0]["choice"]
    assert "case '3-63 ranks, several nodes'" in choice, choice
    assert "node=" + ",".join(str(r // 4) for r in range(8)) == desc.node_spec()
    previous = settings.use(settings.Settings(topology="nodes=8"))
    try:
        assert cli.main(argv) == 0
    finally:
        settings.use(previous)
    assert "case '3-63 ranks, one per node'" in json.loads(out.read_text())["results"][0]["choice"]
