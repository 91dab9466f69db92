"""Lock-step baselines of MPICH and Open MPI in the simulator: results on real data, a closed form of
Open MPI's pipeline, the tuned rules' picks, and `--baseline best`."""

from __future__ import annotations

import dataclasses
import json

import pytest

from adaptcoll.simulate import cli
from adaptcoll.simulate.lockstep import (
    BASELINES,
    NotModelled,
    baseline_names,
    check_applicable,
    estimated_messages,
    ompi_tuned_choice,
)
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import CostParams
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.run import best_lockstep, run_once
from adaptcoll.simulate.sweep import sweep

NEW = [
    "reduce_scatter_gather",
    "ompi_pipeline",
    "ompi_split_bintree",
    "ompi_binomial",
    "ompi_ring",
    "ompi_ring_segmented",
    "ompi_tuned",
    "ompi40_tuned",
]
P = CostParams(L=4e-6, o=0.7e-6, g=0.0, G=1e-10, fold=3e-10, engine=2.1e-6, native_o=0.3e-6, eager=1024, links="fifo")


def _check(job: Job, name: str, params: CostParams = CostParams(eager=2048)) -> bool:
    try:
        _, world, bufs = run_once(job, params, name, data=True)
    except NotModelled:
        return False
    bufs.check(job.root)
    assert world.unmatched == 0
    return True


@pytest.mark.parametrize("name", NEW)
def test_new_baselines_compute_the_collective(name):
    """Every size 1..13, roots 0, size // 2 and size - 1 (Bcast/Reduce), a small and a segmented message."""
    ran = 0
    for collective in BASELINES[name]:
        for size in range(1, 14):
            roots = sorted({0, size // 2, size - 1}) if collective != "allreduce" else [0]
            for root in roots:
                for nbytes in (4 * (1000 + size), 3_000_000):
                    ran += _check(Job(collective, size, nbytes, 4096, root=root), name)
    assert ran > 0


def test_ring_segmented_in_several_phases():
    """Messages above size x 1 MiB: the segmented ring's phases, not the plain ring."""
    for size in (2, 3):
        assert _check(Job("allreduce", size, 4 * (2 * size * 262144 + 1000), 4096), "ompi_ring_segmented")


def test_ompi_tuned_scatter_allgather_bcast_on_data():
    """Open MPI 5's rule at 16-31 ranks and >= 1 MiB picks scatter_allgather."""
    assert ompi_tuned_choice("bcast", 16, 2 << 20) == ("scatter_allgather", 0)
    assert _check(Job("bcast", 16, 2 << 20, 4096, root=5), "ompi_tuned")


def test_tuned_rules_at_scale():
    """The fixed rules' picks at the points of the adaptcoll-vs-lock-step tables."""
    for n in (1024, 16384, 65536):
        assert ompi_tuned_choice("bcast", n, 16 << 20) == ("scatter_allgather", 0)
        assert ompi_tuned_choice("reduce", n, 4 << 20) == ("binomial", 0)
        assert ompi_tuned_choice("allreduce", n, 4 << 20) == ("rabenseifner", 0)
        assert ompi_tuned_choice("bcast", n, 16 << 20, "4.0") == ("pipeline", 8 << 10)
        assert ompi_tuned_choice("allreduce", n, 4 << 20, "4.0") == ("ring", 0)
    assert ompi_tuned_choice("reduce", 1024, 4 << 20, "4.0") == ("pipeline", 1024)
    assert ompi_tuned_choice("reduce", 16384, 4 << 20, "4.0") == ("binomial", 1024)
    assert ompi_tuned_choice("bcast", 512, 20000) == ("split_binary_tree", 0)
    with pytest.raises(NotModelled):
        run_once(Job("bcast", 4, 4096, 4096), P, "ompi_tuned")


@pytest.mark.parametrize(
    "ranks,nseg",  # 1-2 segments only at 2 ranks: for more ranks Open MPI's rule gives smaller segments there
    [(r, n) for r in (2, 3, 5, 9) for n in (1, 2, 40, 64) if r == 2 or n >= 33],
)
def test_ompi_pipeline_bcast_closed_form(ranks, nseg):
    """Open MPI's pipeline (bcast_generic on a chain, 128 KiB segments here), FIFO links: the first segment
    takes P-1 hops of native_o + 2L + B; each later one a stage period, 2 native_o + 2L + B (post the next
    receive, post the send, its rendezvous) or native_o + 2L + B with no intermediate rank; the last
    segment's step posts no receive (one native_o less)."""
    seg = 128 << 10
    t = run_once(Job("bcast", ranks, nseg * seg, seg), P, "ompi_pipeline")[0].time_s
    o, L, B = P.native_o, P.L, seg * P.G
    if ranks == 2:
        expect = nseg * (o + 2 * L + B)
    else:
        expect = (ranks - 1) * (o + 2 * L + B) + (nseg - 1) * (2 * o + 2 * L + B) - (o if nseg > 1 else 0)
    assert abs(t - expect) <= 1e-9 * expect, (t, expect)


def test_best_picks_the_minimum():
    job = Job("reduce", 12, 1 << 20, 4096, root=3)
    noise = parse_noise(["1kHz x 25us, poisson"])
    best = best_lockstep(job, CostParams(), noise, samples=2)
    rows = {r["impl"].split(":", 1)[1]: r for r in best["results"]}
    assert set(rows) | set(best["skipped"]) == set(n for n in BASELINES if "reduce" in BASELINES[n])
    assert best["quiet_best"] == min(rows, key=lambda n: rows[n]["quiet_us"])
    assert best["noisy_best"] == min(rows, key=lambda n: rows[n]["median_us"])
    for name, row in rows.items():
        assert row["quiet_us"] == pytest.approx(run_once(job, CostParams(), name)[0].time_s * 1e6, rel=1e-12)


def test_best_skips_what_is_impractical(tmp_path, capsys):
    job = Job("allreduce", 64, 1 << 20, 4096)
    best = best_lockstep(job, CostParams(), parse_noise([]), max_messages=64 * 20)
    assert {"ring", "ompi_ring", "ompi_ring_segmented"} <= set(best["skipped"])
    assert "rabenseifner" not in best["skipped"] and best["noisy_best"] is None
    out = tmp_path / "r.json"
    args = ["--collective", "allreduce", "--ranks", "64", "--size", "1M", "--segment", "256K"]
    assert cli.main([*args, "--baseline", "best", "--best-max-messages", "1280", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "best lock-step: quiet" in text and "skipped ring:" in text
    doc = json.loads(out.read_text())
    assert doc["best"]["quiet_best"] == best["quiet_best"]
    rows = sweep("bcast", [8], 1 << 20, 1 << 18, ["1kHz x 25us"], ["best"], CostParams(), samples=2, adaptcoll=False)
    top = [r for r in rows if r["impl"] == "lockstep:best"]
    assert len(top) == 1 and top[0]["best_quiet"] and top[0]["best_noisy"]
    others = [r for r in rows if r["impl"] != "lockstep:best"]
    assert top[0]["quiet_us"] == min(r["quiet_us"] for r in others)
    assert top[0]["median_us"] == min(r["median_us"] for r in others)


def test_mpich_smp_computes_the_collective_on_nodes_of_several_ranks():
    """MPICH's node-aware algorithms at 1-17 ranks x 1-4 ranks per node, roots 0, size // 2 and size - 1:
    the right result on every rank, every message matched; with one rank per node they are MPICH's flat
    choice itself (the same simulated time)."""
    import dataclasses

    from adaptcoll.simulate.lockstep import mpich_choice

    for collective in ("bcast", "reduce", "allreduce"):
        for size in range(1, 18):
            roots = sorted({0, size // 2, size - 1}) if collective != "allreduce" else [0]
            for rpn in (1, 2, 3, 4):
                params = dataclasses.replace(CostParams(eager=2048), ranks_per_node=rpn)
                for root in roots:
                    for nbytes in (4 * (1000 + size), 1_000_000):
                        assert _check(Job(collective, size, nbytes, 4096, root=root), "mpich_smp", params)
            for nbytes in (4 * (1000 + size), 1_000_000):
                job = Job(collective, size, nbytes, 4096)
                flat = run_once(job, P, mpich_choice(collective, size, nbytes))[0].time_s
                assert abs(run_once(job, P, "mpich_smp")[0].time_s - flat) <= 1e-12 * flat


def test_ompi_han_computes_the_collective_on_nodes_of_several_ranks():
    """Open MPI 5's HAN at 1-17 ranks x 1-4 ranks per node, roots 0, size // 2 and size - 1, a 1-segment and
    a 16-segment message: the right result on every rank, every message matched. Wherever HAN runs its own
    algorithm (several nodes, several ranks on one, equal nodes for Bcast and Reduce) every sub-collective it
    calls is modelled; where it falls back to tuned, its time is ompi_tuned's where that models the pick."""
    import dataclasses

    from adaptcoll.simulate.lockstep import _han_runs

    hierarchical = 0
    for collective in ("bcast", "reduce", "allreduce"):
        for size in range(1, 18):
            roots = sorted({0, size // 2, size - 1}) if collective != "allreduce" else [0]
            for rpn in (1, 2, 3, 4):
                params = dataclasses.replace(CostParams(eager=2048), ranks_per_node=rpn)
                runs = _han_runs(collective, size, rpn)
                for root in roots:
                    for nbytes in (4 * (1000 + size), 1_000_000):
                        ran = _check(Job(collective, size, nbytes, 4096, root=root), "ompi_han", params)
                        assert ran or not runs, (collective, size, rpn, root, nbytes)
                        hierarchical += runs
        for size in (2, 5, 9, 16):
            job = Job(collective, size, 1_000_000, 4096)
            try:
                flat = run_once(job, P, "ompi_tuned")[0].time_s
            except NotModelled:
                continue
            assert run_once(job, P, "ompi_han")[0].time_s == flat
    assert hierarchical == 252  # (collective, size, ranks per node, root, bytes) points where HAN runs its own


@pytest.mark.parametrize("collective,messages", [("bcast", 112), ("reduce", 217), ("allreduce", 329)])
def test_ompi_han_decomposition_at_two_nodes_of_four(collective, messages):
    """8 ranks, 4 per node, 1,000,000 bytes: 16 HAN segments (15 of 64 KiB). Inside each node tuned's pick
    for 4 ranks, 3 messages a segment (Bcast basic linear; Reduce binomial, the last segment chain), 96 in
    all per stage; between the two nodes Bcast: tuned's binary tree for segment 0, then libnbc's linear
    Ibcast, 16; Reduce: libnbc's Ireduce chain of 8 KiB fragments, 8 per full segment, and binomial for the
    last, 121; Allreduce: both stages of each, 96 + 121 + 16 + 96."""
    import dataclasses

    params = dataclasses.replace(CostParams(eager=2048), ranks_per_node=4)
    stats, world, bufs = run_once(Job(collective, 8, 1_000_000, 4096, root=5), params, "ompi_han", data=True)
    bufs.check(5 if collective == "reduce" else 0)
    assert world.unmatched == 0 and stats.messages == messages


def test_best_includes_ompi_han_on_nodes(capsys):
    """`--baseline best` runs ompi_han (on the nodes given, and where it falls back to tuned), and
    `--baseline ompi_han` with --ranks-per-node runs it on those nodes."""
    import dataclasses

    job = Job("allreduce", 16, 1 << 20, 4096)
    for rpn in (1, 4):
        params = dataclasses.replace(CostParams(), ranks_per_node=rpn)
        best = best_lockstep(job, params, parse_noise([]))
        rows = {r["impl"].split(":", 1)[1]: r for r in best["results"]}
        assert "ompi_han" in rows and "ompi_han" not in best["skipped"]
        assert rows["ompi_han"]["quiet_us"] == pytest.approx(run_once(job, params, "ompi_han")[0].time_s * 1e6)
    args = ["--collective", "reduce", "--ranks", "16", "--ranks-per-node", "4", "--size", "1M"]
    assert cli.main([*args, "--baseline", "ompi_han"]) == 0
    assert "lockstep:ompi_han" in capsys.readouterr().out


def test_ompi_han_parts_on_their_own(monkeypatch):
    """The algorithms HAN's parts run, each as a flat baseline on 2-20 ranks (more than HAN's tests give
    them), roots 0, 1, size // 2 and size - 1: libnbc's Ireduce (reduce-scatter + gather, binomial, chain)
    and binomial Ibcast, tuned's linear / binomial / k-nomial / binary-tree picks."""
    from functools import partial

    from adaptcoll.simulate import lockstep as ls

    parts = {
        "han_redscat": {"reduce": ls._nbc_redscat_gather_reduce},
        "han_nbc_binomial": {"reduce": ls._nbc_binomial_reduce, "bcast": ls._nbc_binomial_bcast},
        "han_nbc_chain": {"reduce": ls._nbc_chain_reduce},
        "han_linear": {"reduce": ls._linear_reduce, "bcast": ls._linear_bcast},
        "han_bmtree": {"bcast": partial(ls._tree_bcast, tree=ls._bmtree)},
        "han_kmtree": {"bcast": partial(ls._tree_bcast, tree=ls._kmtree)},
        "han_bintree": {"bcast": partial(ls._tree_bcast, tree=ls._bintree)},
    }
    for name, by in parts.items():
        monkeypatch.setitem(ls.BASELINES, name, by)
        for collective in by:
            for size in range(2, 21):
                for root in sorted({0, 1, size // 2, size - 1}):
                    assert _check(Job(collective, size, 4 * (17000 + size), 4096, root=root), name)
    # the k-nomial tree of coll_base_bcast.c's example (10 ranks, radix 4), and the binomial one
    assert ls._kmtree(0, 10, 0) == (None, [4, 8, 1, 2, 3]) and ls._kmtree(4, 10, 0) == (0, [5, 6, 7])
    assert ls._bmtree(1, 10, 0) == (0, [3, 5, 9]) and ls._bmtree(6, 10, 0) == (2, [])


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_estimated_messages_cover_what_each_baseline_sends(collective):
    """`--baseline best` skips baselines by estimated_messages (so a run cannot send p^2 messages at 16K
    ranks unawares): the estimate is at least half of what the baseline really sends, and at most four
    times it plus p log p (trees are estimated at p log p); 64 ranks x 1 and x 8, 40 x 4, messages of 64
    KiB and 1 MiB; mpich_smp's phases are each MPICH's own choice, a ring's ~p^2 included."""
    P = CostParams()
    checked = 0
    off = []
    for size, rpn in ((64, 1), (64, 8), (40, 4)):
        for nbytes in (64 << 10, 1 << 20):
            job = Job(collective, size, nbytes, 0)
            for name in baseline_names(collective):
                try:
                    check_applicable(name, collective, size, job.count, rpn)
                except ValueError:
                    continue
                stats = run_once(job, dataclasses.replace(P, ranks_per_node=rpn), name)[0]
                estimate = estimated_messages(name, collective, size, job.count, rpn)
                if not stats.messages <= 2 * estimate or not estimate <= 4 * stats.messages + size * 6:
                    off.append((name, size, rpn, nbytes, estimate, stats.messages))
                checked += 1
    assert not off, off
    assert checked >= 12
