"""Every buffer specification mpi4py accepts, for Bcast/Reduce/Allreduce and their I-forms: adaptcoll's
result equals native MPI's on the same specification, and stats() says who served it (and why not)."""

from __future__ import annotations

import array
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll


class DLPackOnly:
    """Host memory reachable only through __dlpack__ (no buffer protocol)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kw: Any) -> Any:
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


class CudaArrayInterfaceOnly:
    """Host memory behind `__cuda_array_interface__` (as mpi4py's own tests and some libraries make it):
    the CUDA driver (none here) says it is host memory, so adaptcoll serves it like any host buffer,
    whatever MPI's CUDA-awareness; device memory behind it is tests/test_device_routes.py's."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.a.shape,
            "typestr": self.a.dtype.str,
            "data": (self.a.ctypes.data, False),
            "version": 3,
            "strides": None,
        }


def _containers(code: str) -> dict[str, Callable[[np.ndarray], tuple[Any, np.ndarray]]]:
    """name -> make(values): (the buffer object, a NumPy array sharing its memory)."""

    def numpy_(v: np.ndarray) -> tuple[Any, np.ndarray]:
        a = v.copy()
        return a, a

    def array_(v: np.ndarray) -> tuple[Any, np.ndarray]:
        a = array.array(code, v.tolist())
        return a, np.frombuffer(a, v.dtype)

    def memoryview_(v: np.ndarray) -> tuple[Any, np.ndarray]:
        a = v.copy()
        return memoryview(a), a

    def bytearray_(v: np.ndarray) -> tuple[Any, np.ndarray]:
        b = bytearray(v.tobytes())
        return b, np.frombuffer(b, v.dtype)

    def dlpack_(v: np.ndarray) -> tuple[Any, np.ndarray]:
        a = v.copy()
        return DLPackOnly(a), a

    def cai_(v: np.ndarray) -> tuple[Any, np.ndarray]:
        a = v.copy()
        return CudaArrayInterfaceOnly(a), a

    return {
        "numpy": numpy_,
        "array.array": array_,
        "memoryview": memoryview_,
        "bytearray": bytearray_,
        "dlpack": dlpack_,
        "cuda_array_interface": cai_,
    }


def _specs(buf: Any, n: int, code: str, raw: bool) -> dict[str, Any]:
    """Every specification form for `buf` of n elements; `raw` buffers (bytearray) need a datatype."""
    types = {"typecode": code, "Datatype": MPI.Datatype.fromcode(code)}
    out: dict[str, Any] = {}
    if not raw:
        out["buf"] = buf
        out["(buf, count)"] = (buf, n)
        out["[buf, count]"] = [buf, n]
    for tname, dt in types.items():
        out[f"(buf, {tname})"] = (buf, dt)
        out[f"(buf, count, {tname})"] = (buf, n, dt)
        out[f"(buf, (count, displ), {tname})"] = (buf, (n - 3, 2), dt)
        out[f"(buf, count, displ, {tname})"] = (buf, n - 4, 1, dt)
        out[f"[buf, count, displ, {tname}]"] = [buf, n - 2, 2, dt]
    return out


def _check_stats(name: str, route: str | None, where: str) -> None:
    row = adaptcoll.stats().get(name)
    assert row is not None, f"{where}: {name} not counted"
    if route is None:
        assert row["adaptcoll"] == 1 and row["native"] == 0, f"{where}: expected adaptcoll to serve, got {row}"
    else:
        reasons = row["native_reasons"]
        assert row["native"] == 1 and len(reasons) == 1 and next(iter(reasons)).startswith(route), (
            f"{where}: expected native ({route}...), got {row}"
        )


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_every_buffer_form_matches_native(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    n = 11
    checked = 0
    dtype_codes = {
        "numpy": "dfiqB",
        "array.array": "dfiq",
        "memoryview": "di",
        "bytearray": "B",
        "dlpack": "di",
        "cuda_array_interface": "d",
    }
    with adaptcoll.configured(native_below=0, bcast_segment_size=16, reduce_segment_size=16, allreduce_segment_size=16):
        for cname, codes in dtype_codes.items():
            for code in codes:
                make = _containers(code)[cname]
                raw = cname == "bytearray"
                dt = np.dtype(code)
                base = (np.arange(n) % 7 + 1).astype(dt)
                for label, _ in _specs(base, n, code, raw).items():
                    where = f"{cname} {code} {label}"
                    route = None  # adaptcoll serves every form (host memory behind a CUDA interface too)
                    root = checked % size
                    # sendbuf is recvbuf: read as IN_PLACE whether adaptcoll serves the call or hands it on
                    modes = ("plain", "IN_PLACE", "aliased")
                    # -- Bcast / Ibcast
                    for name in ("Bcast", "Ibcast"):
                        init = base * (root + 2) if rank == root else np.zeros(n, dt)
                        (mine, mine_np), (ref, ref_np) = make(init), make(init)
                        adaptcoll.reset_stats()
                        if name == "Bcast":
                            comm.Bcast(_specs(mine, n, code, raw)[label], root)
                        else:
                            comm.Ibcast(_specs(mine, n, code, raw)[label], root).Wait()
                        world.Bcast(_specs(ref, n, code, raw)[label], root)
                        np.testing.assert_array_equal(mine_np, ref_np, err_msg=f"{name} {where}")
                        _check_stats(name, route, f"{name} {where}")
                    # -- Reduce / Ireduce (plain and IN_PLACE at the root)
                    for name in ("Reduce", "Ireduce"):
                        for mode in modes:
                            contrib = base + rank
                            (s, _), (r, r_np) = make(contrib), make(np.zeros(n, dt))
                            (s2, _), (r2, r2_np) = make(contrib), make(np.zeros(n, dt))
                            if mode != "plain" and rank == root:
                                (r, r_np), (r2, r2_np) = make(contrib), make(contrib)
                            rs, rr = _specs(r, n, code, raw)[label], _specs(r2, n, code, raw)[label]
                            if mode == "plain" or rank != root:
                                ss, sr = _specs(s, n, code, raw)[label], _specs(s2, n, code, raw)[label]
                            elif mode == "IN_PLACE":
                                ss, sr = MPI.IN_PLACE, MPI.IN_PLACE
                            else:
                                ss, sr = rs, MPI.IN_PLACE  # sendbuf is recvbuf: adaptcoll reads it as IN_PLACE
                            adaptcoll.reset_stats()
                            if name == "Reduce":
                                comm.Reduce(ss, rs, MPI.SUM, root)
                            else:
                                comm.Ireduce(ss, rs, MPI.SUM, root).Wait()
                            world.Reduce(sr, rr, MPI.SUM, root)
                            if rank == root:
                                np.testing.assert_array_equal(r_np, r2_np, err_msg=f"{name} {mode} {where}")
                            _check_stats(name, route, f"{name} {mode} {where}")
                    # -- Allreduce / Iallreduce
                    for name in ("Allreduce", "Iallreduce"):
                        for mode in modes:
                            contrib = base + rank
                            if mode == "plain":
                                (s, _), (r, r_np) = make(contrib), make(np.zeros(n, dt))
                                (s2, _), (r2, r2_np) = make(contrib), make(np.zeros(n, dt))
                                ss, sr = _specs(s, n, code, raw)[label], _specs(s2, n, code, raw)[label]
                                rs, rr = _specs(r, n, code, raw)[label], _specs(r2, n, code, raw)[label]
                            else:
                                (r, r_np), (r2, r2_np) = make(contrib), make(contrib)
                                rs, rr = _specs(r, n, code, raw)[label], _specs(r2, n, code, raw)[label]
                                ss, sr = (MPI.IN_PLACE if mode == "IN_PLACE" else rs), MPI.IN_PLACE
                            op = MPI.MAX if code == "B" else MPI.SUM
                            adaptcoll.reset_stats()
                            if name == "Allreduce":
                                comm.Allreduce(ss, rs, op)
                            else:
                                comm.Iallreduce(ss, rs, op).Wait()
                            world.Allreduce(sr, rr, op)
                            np.testing.assert_array_equal(r_np, r2_np, err_msg=f"{name} {mode} {where}")
                            _check_stats(name, route, f"{name} {mode} {where}")
                    checked += 1
    assert checked > 100
    # host memory behind a CUDA interface on the native route, MPI not CUDA-aware: never refused, and the
    # in-place forms (IN_PLACE on the root, a CAI buffer elsewhere) enter the same native collective
    os.environ["ADAPTCOLL_CUDA_AWARE"] = "0"
    try:
        for name in ("Bcast", "Reduce", "Iallreduce"):
            adaptcoll.reset_stats()
            values = np.arange(n, dtype="d") + rank
            mine = values.copy()
            if name == "Bcast":
                comm.Bcast(CudaArrayInterfaceOnly(mine), 0)
                expected = np.arange(n, dtype="d")
            elif name == "Reduce":
                send = MPI.IN_PLACE if rank == 0 else CudaArrayInterfaceOnly(values)
                comm.Reduce(send, CudaArrayInterfaceOnly(mine), MPI.SUM, 0)
                expected = sum(np.arange(n, dtype="d") + r for r in range(size)) if rank == 0 else values
            else:
                comm.Iallreduce(MPI.IN_PLACE, CudaArrayInterfaceOnly(mine), MPI.SUM).Wait()
                expected = sum(np.arange(n, dtype="d") + r for r in range(size))
            np.testing.assert_array_equal(mine, expected, err_msg=name)
            _check_stats(name, "below native_below", name)
        # the decision notes the memory (the fast path only sizes it): a communicator before its first
        # blocking call has no fast-path thresholds yet, so its nonblocking call takes the decision
        fresh = adaptcoll.Intracomm(world.Dup())
        adaptcoll.reset_stats()
        mine = np.arange(n, dtype="d") + rank
        fresh.Iallreduce(MPI.IN_PLACE, CudaArrayInterfaceOnly(mine), MPI.SUM).Wait()
        np.testing.assert_array_equal(mine, sum(np.arange(n, dtype="d") + r for r in range(size)))
        notes = adaptcoll.stats()["Iallreduce"].get("notes", {})
        assert [n for n in notes if n.startswith("host memory behind __cuda_array_interface__")], notes
        fresh.Free()
    finally:
        del os.environ["ADAPTCOLL_CUDA_AWARE"]


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_derived_datatypes_and_bottom_served_by_signature(mpi_ranks):
    """Derived datatypes of one basic type and BOTTOM addressing are served from their type signature
    (a view when the elements are back to back, packed through MPI otherwise); a user-defined op on a
    derived datatype goes native (the op sees the datatype it was given)."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    strided = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()

    def add_pairs(inbuf: Any, inoutbuf: Any, datatype: MPI.Datatype) -> None:
        out = np.frombuffer(inoutbuf, "d")
        out += np.frombuffer(inbuf, "d")

    add = MPI.Op.Create(add_pairs, commute=True)
    try:
        with adaptcoll.configured(native_below=0):
            for dt, count, n in ((pair, 3, 6), (strided, 1, 8)):
                mine = np.arange(n, dtype="d") if rank == 0 else np.zeros(n)
                ref = mine.copy()
                adaptcoll.reset_stats()
                comm.Bcast([mine, count, dt], 0)
                world.Bcast([ref, count, dt], 0)
                np.testing.assert_array_equal(mine, ref)
                _check_stats("Bcast", None, "Bcast derived")
                s = np.arange(n, dtype="d") + rank
                r, r2 = np.zeros(n), np.zeros(n)
                adaptcoll.reset_stats()
                comm.Allreduce([s, count, dt], [r, count, dt], MPI.SUM)
                world.Allreduce(s, r2, MPI.SUM)  # MPICH refuses predefined ops on derived types itself
                if dt is strided:
                    r2[1::2] = 0  # the gaps are not part of the message
                np.testing.assert_array_equal(r, r2)
                _check_stats("Allreduce", None, "Allreduce derived")
                if dt is not pair:
                    continue
                adaptcoll.reset_stats()
                comm.Allreduce([s, count, dt], [r, count, dt], add)
                world.Allreduce([s, count, dt], [r2, count, dt], add)
                np.testing.assert_array_equal(r, r2)
                _check_stats("Allreduce", "user op on a derived datatype", "Allreduce derived user op")
                adaptcoll.reset_stats()
                comm.Reduce([s, count, dt], [r, count, dt], add, size - 1)
                world.Reduce([s, count, dt], [r2, count, dt], add, size - 1)
                if rank == size - 1:
                    np.testing.assert_array_equal(r, r2)
                    assert r.sum() > 0
                _check_stats("Reduce", "user op on a derived datatype", "Reduce derived user op")
            # absolute addressing: (BOTTOM, count, datatype) with the address inside the datatype
            a = np.arange(4, dtype="d") if rank == 0 else np.zeros(4)
            absolute = MPI.DOUBLE.Create_hindexed([4], [MPI.Get_address(a)]).Commit()
            try:
                adaptcoll.reset_stats()
                comm.Bcast([MPI.BOTTOM, 1, absolute], 0)
                np.testing.assert_array_equal(a, np.arange(4, dtype="d"))
                _check_stats("Bcast", None, "Bcast BOTTOM")
            finally:
                absolute.Free()
    finally:
        pair.Free()
        strided.Free()
        add.Free()
