"""Lock-step baselines of MPICH and Open MPI in the simulator: results on real data, a closed form of
Open MPI's pipeline, the tuned rules' picks, and `--baseline best`."""

from __future__ import annotations

import json

import pytest

from adaptcoll.simulate import cli
from adaptcoll.simulate.lockstep import BASELINES, NotModelled, ompi_tuned_choice
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
