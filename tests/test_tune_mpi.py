"""Tuning over MPI: every rank makes rank 0's choice even when ranks are given different tables or none;
a bad table is ignored with one warning on rank 0; the table's configuration is what every form of
the next calls uses, Allgather and the Reduce-scatters included (stats() reports it per call); a real
`python -m adaptcoll.tune` run (block collectives included) writes a table the next launch finds in
the cache directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.tune import table
from adaptcoll.tune.choose import comm_tuning
from adaptcoll.tune.config import ServeConfig
from adaptcoll.tune.exchange import mpi_library
from adaptcoll.tune.policy import TUNED_NATIVE, TuningWarning

K, M = 1 << 10, 1 << 20
PIPE = ServeConfig("pipeline", 64 * K, 0, 0)
CHAIN = ServeConfig("chain:chains=2", 128 * K, 2, 1)
SIZES = (4 * K, 64 * K, 256 * K, M, 4 * M)


RING = ServeConfig("ring", 16 * K, 3, 0)


def _table(
    size: int, serve_from: int, config: ServeConfig, native_at: int | None = None, blocks: bool = False
) -> bytes:
    """bcast/reduce/allreduce entries at 16K, serve_from (adaptcoll) and native_at (native); with
    `blocks`, allgather/reduce_scatter entries at the same sizes, served with RING."""
    entries = []
    for coll in ("bcast", "reduce", "allreduce") + (("allgather", "reduce_scatter") if blocks else ()):
        points = [(16 * K, False), (serve_from, True)] + ([(native_at, False)] if native_at else [])
        chosen = RING if coll in ("allgather", "reduce_scatter") else config
        for nbytes, serve in points:
            entries.append(table.Entry(coll, "host", size, 1, size, nbytes, serve, chosen, ratio=1.5 if serve else 0.5))
    t = table.Table(mpi_library(), tuple(entries), {"host": "test"}, "now", {})
    return table.dumps(t).encode()


def _shared_dir(comm: MPI.Intracomm) -> Path:
    path = tempfile.mkdtemp(prefix="adaptcoll-tune-") if comm.Get_rank() == 0 else None
    return Path(comm.bcast(path, root=0))


def _choices(comm: adaptcoll.Intracomm) -> list[tuple[str, int, bool, str]]:
    """(collective, bytes, served, configuration label) for a few sizes, on this rank."""
    tuning = comm_tuning(comm)
    out = []
    for coll in ("bcast", "allreduce"):
        for n in SIZES:
            call = tuning.choose(coll, n)
            out.append((coll, n, call.serve, call.label))
    return out


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_every_rank_makes_rank_zeros_choice_with_different_files_or_none(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    where = _shared_dir(world)
    mine = where / f"rank{rank}.json"  # each rank its own file: no shared file system needed
    mine.write_bytes(_table(size, M, PIPE) if rank == 0 else _table(size, 64 * K, CHAIN, 4 * M))
    cases = {
        "rank 0 A, others B": str(mine),
        "rank 0 A, others none": str(mine) if rank == 0 else "off",
        "rank 0 none, others B": "off" if rank == 0 else str(mine),
        "rank 0 missing file, others B": str(where / "missing.json") if rank == 0 else str(mine),
    }
    try:
        for name, setting in cases.items():
            with adaptcoll.configured(tuning=setting):
                comm = adaptcoll.Intracomm(world.Dup())
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    buf = np.arange(M, dtype=np.uint8) if rank == 0 else np.zeros(M, np.uint8)
                    comm.Bcast(buf, 0)  # the first call sets the communicator up (collectively)
                assert np.array_equal(buf, np.arange(M, dtype=np.uint8)), name
                choices = _choices(comm)
                everyone = world.allgather(choices)
                assert all(c == everyone[0] for c in everyone), (name, everyone)
                served = {(c, n): label for c, n, serve, label in choices if serve}
                bad = [w for w in caught if issubclass(w.category, TuningWarning)]
                if name.startswith("rank 0 A"):
                    served_sizes = (256 * K, M, 4 * M)
                    want = {(c, n): f"{PIPE.label(c)} [table]" for c in ("bcast", "allreduce") for n in served_sizes}
                    assert served == want, served
                    assert not bad
                else:
                    assert all(label.endswith("[defaults]") for label in served.values()), (name, served)
                    expected = 1 if rank == 0 and "missing" in name else 0
                    assert len(bad) == expected, (name, [str(w.message) for w in bad])
                comm.Free()
        # a table that does not parse on rank 0: ignored with one warning there, the shipped rule everywhere
        (where / "rank0.json").write_text('{"format": "adaptcoll-tuning", "version": 1, "machine": {}}')
        with adaptcoll.configured(tuning=str(mine)):
            for attempt in range(2):
                comm = adaptcoll.Intracomm(world.Dup())
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = np.empty(64 * K, np.float32)
                    comm.Allreduce(np.ones(64 * K, np.float32), out)
                assert (out == size).all()
                bad = [str(w.message) for w in caught if issubclass(w.category, TuningWarning)]
                expected = 1 if rank == 0 and attempt == 0 else 0  # one warning, not one per communicator
                assert len(bad) == expected and all("machine.mpi_library: missing" in b for b in bad), bad
                assert comm_tuning(comm).sources[("allreduce", "host")] == "defaults"
                everyone = world.allgather(_choices(comm))
                assert all(c == everyone[0] for c in everyone)
                comm.Free()
    finally:
        world.Barrier()
        mine.unlink(missing_ok=True)
        world.Barrier()
        if rank == 0:
            for p in where.iterdir():
                p.unlink()
            where.rmdir()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_the_tables_configuration_is_what_every_form_uses(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    where = _shared_dir(world)
    path = where / "t.json"
    if rank == 0:
        path.write_bytes(_table(size, 256 * K, CHAIN, 4 * M, blocks=True))
    world.Barrier()
    try:
        with adaptcoll.configured(tuning=str(path)):
            comm = adaptcoll.Intracomm(world.Dup())
            adaptcoll.reset_stats()
            small, served, native = (np.ones(n // 4, np.float32) for n in (4 * K, 256 * K, 4 * M))
            for a in (small, served, native):
                out = np.empty_like(a)
                comm.Bcast(a.copy(), 0)
                comm.Ibcast(a.copy(), 0).Wait()
                comm.Reduce(a, out, MPI.SUM, 0)
                comm.Ireduce(a, out, MPI.SUM, 0).Wait()
                comm.Allreduce(a, out, MPI.SUM)
                assert (out == size).all()
                comm.Iallreduce(a, out, MPI.SUM).Wait()
                for init in (comm.Bcast_init(a, 0), comm.Allreduce_init(a, out), comm.Reduce_init(a, out, root=0)):
                    init.Start()
                    init.Wait()
                    init.Free()
                # Allgather / Reduce-scatter: the size is the whole array (every rank's block)
                whole = np.arange(a.size, dtype=np.float32)
                block = whole[: a.size // size]
                gathered, part = np.empty_like(whole[: block.size * size]), np.empty_like(block)
                comm.Allgather(block, gathered)
                comm.Iallgather(block, gathered).Wait()
                assert np.array_equal(gathered, np.tile(block, size))
                comm.Reduce_scatter_block(whole[: block.size * size], part)
                comm.Ireduce_scatter_block(whole[: block.size * size], part).Wait()
                comm.Reduce_scatter(whole[: block.size * size], part, [block.size] * size)
                assert np.array_equal(part, size * whole[rank * block.size : (rank + 1) * block.size])
            got = comm.bcast(np.arange(40 * K, dtype=np.int64) if rank == 0 else None, 0)  # pickled: 320 KiB
            assert np.array_equal(got, np.arange(40 * K))
            stats = adaptcoll.stats()
            assert comm._adaptcoll_below == {"bcast": 64 * K, "reduce": 64 * K, "allreduce": 64 * K}
            for name in ("Bcast", "Ibcast", "Bcast_init", "Reduce", "Ireduce", "Reduce_init"):
                coll = name.removesuffix("_init").removeprefix("I").lower()
                assert stats[name]["configs"] == {f"{CHAIN.label(coll)} [table]": 1}, (name, stats[name])
                assert stats[name]["native_reasons"] == {"below native_below": 1, TUNED_NATIVE.reason: 1}, name
            for name in ("Allreduce", "Iallreduce", "Allreduce_init"):
                assert stats[name]["configs"] == {f"{CHAIN.label('allreduce')} [table]": 1}, stats[name]
            assert stats["bcast"]["configs"] == {f"{CHAIN.label('bcast')} [table]": 1}
            for name in ("Allgather", "Iallgather", "Reduce_scatter_block", "Ireduce_scatter_block", "Reduce_scatter"):
                assert stats[name]["configs"] == {f"{RING.label()} [table]": 1}, (name, stats[name])
                assert stats[name]["native_reasons"] == {"below native_below": 1, TUNED_NATIVE.reason: 1}, name
            # explicit settings win over the table
            with adaptcoll.configured(bcast_algorithm="binomial", max_segments=0):
                comm.Bcast(served, 0)
                with adaptcoll.configured(native_below="8M"):
                    comm.Bcast(served, 0)
            stats = adaptcoll.stats()["Bcast"]
            assert stats["configs"][f"{ServeConfig('binomial', 128 * K, 0).label()} [table+settings]"] == 1
            assert stats["native_reasons"]["below native_below"] == 2
            comm.Free()
    finally:
        world.Barrier()
        if rank == 0:
            path.unlink()
            where.rmdir()


def _on_reported_hosts(host_of, body) -> None:
    """Run `body(comm, world, rank)` on a fresh adaptcoll communicator whose ranks report host
    `host_of(rank)` to the tuning exchange, after a 16 MiB Reduce, Allreduce and Bcast that must match
    native MPI's (the statistics count only those three)."""
    from adaptcoll.tune import exchange

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    with pytest.MonkeyPatch.context() as patch, adaptcoll.configured(tuning="off"):
        patch.setattr(exchange, "host_id", lambda: host_of(rank))
        comm = adaptcoll.Intracomm(world.Dup())
        try:
            adaptcoll.reset_stats()
            comm.Barrier()
            a = np.arange(4 * M, dtype=np.float32) + rank  # 16 MiB
            out, want = np.empty_like(a), np.empty_like(a)
            comm.Reduce(a, out, MPI.SUM, 0)
            world.Reduce(a, want, MPI.SUM, 0)
            if rank == 0:
                assert np.array_equal(out, want)
            comm.Allreduce(a, out, MPI.SUM)
            world.Allreduce(a, want, MPI.SUM)
            assert np.array_equal(out, want)
            b = a.copy() if rank == 0 else np.zeros_like(a)
            comm.Bcast(b, 0)
            assert np.array_equal(b, np.arange(4 * M, dtype=np.float32))
            body(comm, world, rank)
        finally:
            comm.Free()


@pytest.mark.mpi(ranks=[4], timeout=120)
def test_ranks_on_several_hosts_take_the_several_nodes_case(mpi_ranks):
    """Four ranks made to report two hosts (two ranks each): every rank resolves the rule's case for
    nodes of several ranks (Python engine: Bcast and Allreduce native, Reduce two_tree from 8M; compiled
    engine: the topo pair's Bcast, two_tree 32K Reduce and Allreduce from 1M; docs/tuning.md), and the
    results match native MPI's."""
    from adaptcoll.tune.defaults import NODE_TREES_64K, TWO_TREE, TWO_TREE_32K

    def check(comm, world, rank) -> None:
        facts = comm_tuning(comm).facts
        assert (facts.nodes, facts.ranks_per_node, facts.in_rank_order) == (2, 2, True)
        stats = adaptcoll.stats()
        if facts.compiled:  # every collective served, Bcast on the topo pair
            served = {"Reduce": TWO_TREE_32K, "Allreduce": TWO_TREE_32K, "Bcast": NODE_TREES_64K}
            for name, config in served.items():
                label = f"{config.label(name.lower())} [defaults]"
                assert stats[name]["configs"] == {label: 1}, stats[name]
            reduce_at_8m = TWO_TREE_32K
        else:
            assert stats["Reduce"]["configs"] == {f"{TWO_TREE.label('reduce')} [defaults]": 1}, stats["Reduce"]
            for name in ("Allreduce", "Bcast"):  # no band served at any size: native, below the first
                assert stats[name]["native_reasons"] == {"below native_below": 1}, stats[name]
                assert not stats[name]["configs"], stats[name]
            reduce_at_8m = TWO_TREE
        assert set(world.allgather(comm_tuning(comm).choose("reduce", 8 * M).label)) == {
            f"{reduce_at_8m.label('reduce')} [defaults]"
        }

    _on_reported_hosts(lambda rank: 1000 + rank // 2, check)


@pytest.mark.mpi(ranks=[4], timeout=120)
def test_hosts_not_in_rank_order_keep_only_the_trees_that_follow_the_nodes(mpi_ranks):
    """Four ranks made to report two hosts taken in turn (ranks 0, 2 on one, 1, 3 on the other, as
    `--map-by node` places them): every rank sees the placement, Reduce and Allreduce go native (the flat
    trees' bands were simulated with consecutive ranks per node), the compiled engine's Bcast stays on the
    topo pair, and the results match native MPI's."""
    from adaptcoll.tune.defaults import NODE_TREES_64K

    def check(comm, world, rank) -> None:
        facts = comm_tuning(comm).facts
        assert (facts.nodes, facts.ranks_per_node, facts.in_rank_order) == (2, 2, False)
        stats = adaptcoll.stats()
        for name in ("Reduce", "Allreduce"):
            assert not stats[name]["configs"], stats[name]
        assert comm_tuning(comm).choose("reduce", 16 * M).serve is False
        if facts.compiled:
            assert stats["Bcast"]["configs"] == {f"{NODE_TREES_64K.label('bcast')} [defaults]": 1}, stats["Bcast"]
        else:
            assert not stats["Bcast"]["configs"], stats["Bcast"]

    _on_reported_hosts(lambda rank: 1000 + rank % 2, check)


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_unmeasured_communicator_size_uses_the_nearest_and_says_so(mpi_ranks):
    world = MPI.COMM_WORLD
    where = _shared_dir(world)
    path = where / "t4.json"
    if world.Get_rank() == 0:
        path.write_bytes(_table(4, M, PIPE))
    world.Barrier()
    try:
        with adaptcoll.configured(tuning=str(path)):
            comm = adaptcoll.Intracomm(world.Dup())
            adaptcoll.reset_stats()
            a = np.ones(M, np.uint8)
            comm.Bcast(a, 0)
            row = adaptcoll.stats()["Bcast"]
            assert row["configs"] == {f"{PIPE.label()} [table~4]": 1}
            assert any("bcast (host) on 3 ranks" in n and "measured on 4 ranks" in n for n in row["tuning"]), row
            assert "measured on 4 ranks" in adaptcoll.stats_table()
            comm.Free()
    finally:
        world.Barrier()
        if world.Get_rank() == 0:
            path.unlink()
            where.rmdir()


_NEXT_LAUNCH = """
import json, numpy as np, adaptcoll
from mpi4py import MPI
comm = adaptcoll.Intracomm(MPI.COMM_WORLD)
for n in (64 * 1024, 1 << 20):
    a = np.ones(n // 4, np.float32); out = np.empty_like(a)
    comm.Bcast(a, 0); comm.Allreduce(a, out)
    comm.Reduce_scatter_block(a, out[: a.size // comm.size]); comm.Allgather(a[: a.size // comm.size], out)
if comm.rank == 0:
    print(json.dumps(adaptcoll.stats()))
"""


def test_a_real_tuner_run_writes_a_table_the_next_launch_loads(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(XDG_CACHE_HOME=str(tmp_path), MPIEXEC_TIMEOUT="100")
    collectives = "bcast,allreduce,allgather,reduce_scatter"
    tune = [sys.executable, "-m", "adaptcoll.tune", "--sizes", "64K,1M", "--collectives", collectives]
    done = subprocess.run(
        ["mpiexec", "-n", "2", *tune, "--budget", "4"], env=env, capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr
    written = list((tmp_path / "adaptcoll").glob("tuning-*.json"))
    assert len(written) == 1 and f"written to {written[0]}" in done.stdout, (done.stdout, written)
    t = table.parse(written[0].read_bytes(), str(written[0]))
    assert sorted((e.collective, e.bytes, e.comm_size) for e in t.entries) == [
        ("allgather", 64 * K, 2), ("allgather", M, 2), ("allreduce", 64 * K, 2), ("allreduce", M, 2),
        ("bcast", 64 * K, 2), ("bcast", M, 2), ("reduce_scatter", 64 * K, 2), ("reduce_scatter", M, 2),
    ]  # fmt: skip
    assert "allreduce         1M:" in done.stderr  # the progress lines (plain text: rich is optional)
    for e in t.entries:
        assert e.samples > 0 and e.candidates and e.p25 <= e.ratio <= e.p75
        if e.collective in ("allgather", "reduce_scatter"):  # the ring's shapes, one run at these sizes
            assert e.config.algorithm == "ring" and len(e.candidates) == 1, e
    nxt = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-c", _NEXT_LAUNCH], env=env, capture_output=True, text=True, timeout=110
    )
    assert nxt.returncode == 0, nxt.stderr
    stats = json.loads(nxt.stdout.strip().splitlines()[-1])
    names = {
        "bcast": "Bcast",
        "allreduce": "Allreduce",
        "allgather": "Allgather",
        "reduce_scatter": "Reduce_scatter_block",
    }
    for e in t.entries:
        row = stats[names[e.collective]]
        if e.serve:
            assert row["configs"].get(f"{e.config.label(e.collective)} [table]", 0) >= 1, (e, row)
        else:
            assert sum(row["native_reasons"].values()) >= 1, (e, row)
    assert all("no tuning table" not in n for n in stats["Bcast"]["tuning"]), stats["Bcast"]["tuning"]


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_the_tuners_candidates_keep_their_remembered_decisions(mpi_ranks, monkeypatch):
    """The tuner's interleaved rounds run each candidate under its own settings; on one shared
    communicator object every call found the previous candidate's entry stale and decided afresh (1 MiB
    Bcast: candidates 156-177 us against native 87), so each candidate has its own object. After the
    set-up round no call decides again."""
    import adaptcoll.forms.collectives as forms
    from adaptcoll.decision import decide
    from adaptcoll.tune import measure
    from adaptcoll.tune.candidates import candidates

    comm = adaptcoll.Intracomm(MPI.COMM_WORLD)
    comm.Bcast(np.zeros(1), 0)  # the tuning is set up by the first blocking call
    made = []
    real = decide.bcast

    def counted(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    for module in (decide, forms):
        for name in dir(module):
            if getattr(module, name) is real:
                monkeypatch.setattr(module, name, counted)
    point = measure.Point("bcast", 64 << 10, candidates("bcast", comm.Get_size()))
    configs = list(point.configs)[:3]
    runner = measure._Runner(MPI.COMM_WORLD, comm, point, configs, "float64")
    runner.round([0, 1, 2, 3], 1)
    assert len(made) == 3  # the set-up round: one decision per candidate
    times = runner.round([0, 1, 2, 3], 5)
    assert len(made) == 3 and times.shape == (4, 5) and (times > 0).all()
