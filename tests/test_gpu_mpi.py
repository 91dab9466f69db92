"""CuPy arrays through adaptcoll's collectives (skips where no GPU/CuPy): every op x dtype against native
MPI on host copies, with device folds (kernels) and, without CUDA-aware MPI, host staging."""

from __future__ import annotations

import numpy as np
import pytest


def _gpu_reason() -> str | None:
    try:
        import cupy
    except Exception as exc:
        return f"CuPy is not installed ({type(exc).__name__}); install the 'gpu' extra on a GPU machine"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy found no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({exc})"
    return None


REASON = _gpu_reason()
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
