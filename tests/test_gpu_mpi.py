"""CuPy arrays through adaptcoll's collectives (skips where no GPU/CuPy): every op x dtype against native
MPI on host copies, with device folds (kernels) and, without CUDA-aware MPI, host staging."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_available import gpu_reason

REASON = gpu_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

OPS = {
    "SUM": ["i4", "u8", "f2", "f4", "f8", "c8", "c16"],
    "PROD": ["i8", "f4", "f8"],
    "MAX": ["i1", "f4", "f8"],
    "MIN": ["u2", "f8"],
    "LAND": ["i4", "?"],
    "LOR": ["u1", "?"],
    "LXOR": ["i8"],
    "BAND": ["u4"],
    "BOR": ["i2"],
    "BXOR": ["u8"],
}


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_cupy_collectives_equal_native_on_host_copies(mpi_ranks):
    import cupy
    from mpi4py import MPI

    import adaptcoll

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    with adaptcoll.configured(
        native_below=0, reduce_segment_size=4096, allreduce_segment_size=4096, bcast_segment_size=4096
    ):
        for op, dtypes in OPS.items():
            for dtype in dtypes:
                n = 10_000
                host = np.random.default_rng(rank).integers(0, 3, n).astype(dtype)
                dev = cupy.asarray(host)
                ref = np.zeros(n, dtype)
                world.Allreduce(host, ref, getattr(MPI, op))
                out = cupy.zeros(n, dtype)
                comm.Allreduce(dev, out, getattr(MPI, op))
                np.testing.assert_array_equal(cupy.asnumpy(out), ref, err_msg=f"{op} {dtype}")
                world.Reduce(host, ref, getattr(MPI, op), 1)
                comm.Reduce(dev, out, getattr(MPI, op), 1)
                if rank == 1:
                    np.testing.assert_array_equal(cupy.asnumpy(out), ref, err_msg=f"Reduce {op} {dtype}")
        b = cupy.arange(100_000, dtype="f8") if rank == 0 else cupy.zeros(100_000, "f8")
        comm.Bcast(b, 0)
        np.testing.assert_array_equal(cupy.asnumpy(b), np.arange(100_000, dtype="f8"))
    assert adaptcoll.stats()["Allreduce"]["adaptcoll"] >= sum(len(v) for v in OPS.values())


@pytest.mark.mpi(ranks=[4], timeout=300)
def test_cupy_routes_without_cuda_aware_mpi(mpi_ranks, monkeypatch):
    """Every route of a CuPy buffer with ADAPTCOLL_CUDA_AWARE=0 (the MPICH and Open MPI wheels are not
    CUDA-aware anyway: a device pointer reaching them is a segmentation fault, which fails this test).
    tests/test_device_routes.py checks the same routes without a GPU under an MPI guard."""
    import cupy
    from mpi4py import MPI

    import adaptcoll

    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "0")
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world.Dup())
    rank, size = world.Get_rank(), world.Get_size()
    adaptcoll.reset_stats()

    def host_data(n, dtype="f4", salt=0):
        return np.random.default_rng(100 * salt + rank).integers(-3, 4, n).astype(dtype)

    # the H100 segmentation fault: 1 MiB float32 Allreduce (served by the 1 MiB device threshold of then,
    # staged now); 4 KiB .. 8 MiB, the device threshold (4 MiB) and above served
    for n_bytes in (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20):
        host = host_data(n_bytes // 4, salt=n_bytes)
        ref = np.empty_like(host)
        world.Allreduce(host, ref, MPI.SUM)
        out = cupy.zeros_like(cupy.asarray(host))
        comm.Allreduce(cupy.asarray(host), out, MPI.SUM)
        np.testing.assert_array_equal(cupy.asnumpy(out), ref, err_msg=f"Allreduce {n_bytes}")
        red = cupy.zeros_like(out)
        world.Reduce(host, ref, MPI.SUM, size - 1)
        comm.Reduce(cupy.asarray(host), red, MPI.SUM, size - 1)
        if rank == size - 1:
            np.testing.assert_array_equal(cupy.asnumpy(red), ref, err_msg=f"Reduce {n_bytes}")
        b = cupy.asarray(host_data(n_bytes // 4, salt=7) if rank == 0 else np.zeros(n_bytes // 4, "f4"))
        comm.Bcast(b, 0)
        np.testing.assert_array_equal(cupy.asnumpy(b), np.random.default_rng(700).integers(-3, 4, n_bytes // 4))
    # what adaptcoll does not serve: MINLOC pairs, a buffer specification, algorithm=native
    pairs = np.zeros(1000, np.dtype([("v", "f4"), ("i", "i4")]))
    pairs["v"], pairs["i"] = host_data(1000, salt=3), rank
    ref_pairs = np.zeros_like(pairs)
    world.Allreduce([pairs, MPI.FLOAT_INT], [ref_pairs, MPI.FLOAT_INT], MPI.MINLOC)
    dev_pairs = cupy.asarray(pairs.view("u1"))
    dev_out = cupy.zeros_like(dev_pairs)
    comm.Allreduce([dev_pairs, MPI.FLOAT_INT], [dev_out, MPI.FLOAT_INT], MPI.MINLOC)
    got = cupy.asnumpy(dev_out).view(pairs.dtype)
    np.testing.assert_array_equal(got["v"], ref_pairs["v"])
    np.testing.assert_array_equal(got["i"], ref_pairs["i"])
    with adaptcoll.configured(allreduce_algorithm="native", bcast_algorithm="native"):
        host = host_data(1 << 18, salt=4)
        ref = np.empty_like(host)
        world.Allreduce(host, ref, MPI.SUM)
        out = cupy.zeros(1 << 18, "f4")
        comm.Allreduce(cupy.asarray(host), out, MPI.SUM)
        np.testing.assert_array_equal(cupy.asnumpy(out), ref)
    # nonblocking and persistent, staged (64 KiB) and served (4 MiB)
    for n in (1 << 14, 1 << 20):
        host = host_data(n, salt=5)
        ref = np.empty_like(host)
        world.Allreduce(host, ref, MPI.SUM)
        send, out = cupy.asarray(host), cupy.zeros(n, "f4")
        comm.Iallreduce(send, out, MPI.SUM).Wait()
        np.testing.assert_array_equal(cupy.asnumpy(out), ref)
        request = comm.Allreduce_init(send, out, MPI.SUM)
        for scale in (1, 2):
            send[...] = cupy.asarray(host * scale)
            request.Start()
            request.Wait()
            np.testing.assert_array_equal(cupy.asnumpy(out), ref * scale)
        request.Free()
    # pickle-based: CuPy arrays inside objects
    obj = comm.bcast({"a": cupy.arange(100_000, dtype="f8")} if rank == 0 else None, 0)
    np.testing.assert_array_equal(cupy.asnumpy(obj["a"]), np.arange(100_000, dtype="f8"))
    total = comm.allreduce(cupy.full(1000, rank + 1.0), op=MPI.SUM)
    np.testing.assert_array_equal(cupy.asnumpy(total), np.full(1000, size * (size + 1) / 2))
    stats = adaptcoll.stats()
    staged = sum(n for row in stats.values() for why, n in row["native_reasons"].items() if "staged" in why)
    assert staged >= 8 and stats["Allreduce"]["adaptcoll"] >= 2, stats
    comm.Free()
