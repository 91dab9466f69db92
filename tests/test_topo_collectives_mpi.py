"""Collectives on the hierarchical (`topo`) and two-tree kinds equal native MPI under several declared
topologies (consecutive and explicit, even and uneven groups, 1-2 levels, several inner shapes)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll


def _topologies(size: int) -> list[str]:
    explicit = ",".join(str(min(r // 3, 1)) for r in range(size))  # uneven: 3 ranks, then the rest
    return [f"nodes={min(2, size)}", f"nodes={min(3, size)},sockets=2", f"node={explicit}", "flat"]


@pytest.mark.mpi(ranks=[3, 6], timeout=180)
def test_topo_and_two_tree_equal_native(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    algorithms = ["two_tree"] + [f"topo:inner={inner}" for inner in ("binomial", "pipeline", "knomial", "two_tree")]
    cases = 0
    for topology in _topologies(size):
        # a fresh communicator per topology: the topology is read once per communicator
        comm = adaptcoll.Intracomm(world.Dup())
        try:
            for algorithm in algorithms:
                with adaptcoll.configured(
                    native_below=0,
                    topology=topology,
                    bcast_algorithm=algorithm,
                    reduce_algorithm=algorithm,
                    allreduce_algorithm=algorithm,
                    bcast_segment_size=64,
                    reduce_segment_size=64,
                    allreduce_segment_size=64,
                    max_segments=0,
                ):
                    for root in sorted({0, size - 1, size // 2}):
                        n = 101
                        ref = np.arange(n, dtype="f8") * (root + 1) if rank == root else np.zeros(n)
                        got = ref.copy()
                        world.Bcast(ref, root)
                        comm.Bcast(got, root)
                        np.testing.assert_array_equal(got, ref, err_msg=f"Bcast {algorithm} {topology} root={root}")
                        mine = np.arange(n, dtype="i8") * (rank + 2)
                        ref_r, got_r = np.zeros(n, "i8"), np.zeros(n, "i8")
                        world.Reduce(mine, ref_r, MPI.SUM, root)
                        comm.Reduce(mine, got_r, MPI.SUM, root)
                        if rank == root:
                            np.testing.assert_array_equal(got_r, ref_r, err_msg=f"Reduce {algorithm} {topology}")
                        world.Allreduce(mine, ref_r, MPI.MAX)
                        comm.Allreduce(mine, got_r, MPI.MAX)
                        np.testing.assert_array_equal(got_r, ref_r, err_msg=f"Allreduce {algorithm} {topology}")
                        cases += 1
        finally:
            MPI.Intracomm.Free(comm)
    served = adaptcoll.stats()
    assert served["Bcast"]["adaptcoll"] >= cases and served["Allreduce"]["adaptcoll"] >= cases
