"""Tracing over MPI: with ADAPTCOLL_TRACE set, every rank's file holds every segment of each known plan
exactly once (Bcast, Reduce, Allreduce with one root and with a root per rank), results still equal
native MPI's, the clock offsets are within their stated bound, the merged JSON validates, and turning
tracing off records nothing more."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI
from test_trace import expected_events, recorded_events

import adaptcoll
from adaptcoll.state.comm_state import comm_state
from adaptcoll.trace import format as fmt
from adaptcoll.trace import record
from adaptcoll.trace.merge import load, merge
from adaptcoll.trace.perfetto import to_trace_events, validate

COUNT, SEG = 37, 5  # float64: 8 segments of 5 elements (the last of 2)


@pytest.mark.mpi(ranks=[3, 4], timeout=120)
def test_trace_files_hold_every_segment_once(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    directory = world.bcast(tempfile.mkdtemp(prefix="adaptcoll-trace-") if rank == 0 else None)
    data = np.arange(COUNT, dtype="f8") * (rank + 1)
    cases = [("bcast", 1, 0), ("reduce", size - 1, 0), ("allreduce", 0, 1), ("allreduce", 0, 0)]
    plans = []
    serve = {f"{c}_segment_size": SEG * 8 for c in ("bcast", "reduce", "allreduce")}
    with adaptcoll.configured(native_below=0, max_segments=0, trace=directory, **serve):
        for collective, root, roots in cases:
            with adaptcoll.configured(allreduce_roots=roots):
                got, want = np.zeros(COUNT), np.zeros(COUNT)
                if collective == "bcast":
                    got = data.copy() if rank == root else np.zeros(COUNT)
                    want = got.copy()
                    comm.Bcast(got, root)
                    world.Bcast(want, root)
                    plans.append(comm_state(world).trees("binomial", root))
                elif collective == "reduce":
                    comm.Reduce(data, got, MPI.SUM, root)
                    world.Reduce(data, want, MPI.SUM, root)
                    plans.append(comm_state(world).trees("binomial", root))
                else:
                    comm.Allreduce(data, got, MPI.SUM)
                    world.Allreduce(data, want, MPI.SUM)
                    plans.append(comm_state(world).allreduce_trees("binomial", roots))
                np.testing.assert_array_equal(got, want, err_msg=f"{collective} traced")
    record.flush()
    mine = Path(directory) / fmt.file_name(rank)
    written = len(fmt.read(mine).events)
    with adaptcoll.configured(native_below=0, **serve):  # tracing off again: nothing more is recorded
        comm.Bcast(data, 0)
    record.close(directory)
    assert len(fmt.read(mine).events) == written > 0
    world.Barrier()
    if rank == 0:
        try:
            files = load(directory)
            assert [t.world_rank for t in files] == list(range(size))
            for t in files:
                assert t.names == ["bcast", "reduce", "allreduce"] and len(t.operations) == len(cases)
                (c,) = t.comms
                assert c["members"] == list(range(size)) and c["ref"] == 0
                assert abs(c["offset_ns"]) <= c["rtt_ns"] // 2 + 1, c  # one node: the true offset is 0
                for op, ((collective, _, _), tset) in enumerate(zip(cases, plans)):
                    nseg = -(-COUNT // SEG)
                    want = expected_events(collective, tset, t.world_rank, nseg)
                    assert recorded_events(t, op) == want, (collective, t.world_rank)
            timeline = merge(files)
            assert [o.name for o in timeline.operations] == [c[0] for c in cases]
            assert validate(to_trace_events(timeline)) == []
            assert timeline.flows == sum(1 for s in timeline.slices if s.cat == "send") > 0
            assert all(e == 0 for _, e in timeline.offsets.values())  # one kernel: one clock
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    world.Barrier()
