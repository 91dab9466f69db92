"""Buffer specifications: every mpi4py form parses to the same 1-D view; what is not served comes back as
a typed Native value whose kind says what the caller does with it."""

from __future__ import annotations

import array

import numpy as np
from mpi4py import MPI

from adaptcoll.buffers import Message, parse
from adaptcoll.runtime.native import Kind, Native


def test_buffer_forms_parse_to_the_same_view():
    a = np.arange(10, dtype="f8")
    for spec, count in [
        (a, 10),
        ([a, 4], 4),
        ((a, MPI.DOUBLE), 10),
        ((a, 3, "d"), 3),
        ((a, (3, 2), MPI.DOUBLE), 3),
        ((a, 3, 2, MPI.DOUBLE), 3),
        (memoryview(a), 10),
        (array.array("d", range(10)), 10),
    ]:
        msg = parse(spec, writable=True)
        assert isinstance(msg, Message), spec
        assert msg.count == count and msg.array.dtype == np.float64
    msg = parse((a, 3, 2, MPI.DOUBLE), writable=True)
    assert isinstance(msg, Message) and msg.array[0] == 2.0


def _native(spec, writable=True) -> Native:
    found = parse(spec, writable=writable)
    assert isinstance(found, Native), spec
    return found


def test_unserved_buffers_say_why_and_what_kind():
    a = np.arange(10, dtype="f8")
    assert isinstance(parse(np.zeros(4), writable=False), Message)
    pair = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT])
    assert _native((a, 1, pair)).reason == "datatype not served"  # mixed signature (double, int)
    assert _native((np.zeros(4), 1, MPI.DOUBLE_INT)).reason == "datatype not served"  # predefined, but mixed
    pair.Free()
    assert _native(np.arange(3.0).view(np.dtype([("x", "f8")]))).reason == "unsupported dtype"
    assert _native((a, 20, MPI.DOUBLE)).kind is Kind.INVALID
    assert _native((a, (2, 1))).kind is Kind.INVALID  # a displacement needs a datatype (mpi4py: malformed)
    assert _native("abc").kind is Kind.INVALID
    assert _native([a, 1, 2, 3, 4]).kind is Kind.INVALID
    assert _native((None, 3)).kind is Kind.INVALID  # BOTTOM needs an explicit datatype

    class NullPointer:  # what adaptcoll.device calls host memory (no driver knows it) but nobody can read
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "data": (0, False), "version": 3}

    assert _native(NullPointer()) == Native("unsupported buffer", Kind.INVALID)  # native MPI raises mpi4py's error


def _message(spec, writable=True) -> Message:
    found = parse(spec, writable=writable)
    assert isinstance(found, Message), (spec, found)
    return found


def _mpi4py_error(fn) -> tuple[str, str]:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    raise AssertionError("mpi4py accepted it")


def test_bad_buffers_give_scratch_and_mpi4pys_error():
    """Read-only (received into) and non-contiguous buffers are still Messages of the same signature (so
    the decision is the same as on ranks with good buffers), over scratch memory, carrying mpi4py's error."""
    ro = np.arange(4.0)
    ro.flags.writeable = False
    assert _message(ro, writable=False).error is None  # read-only is fine for a send buffer
    bad = _message(ro)
    assert bad.count == 4 and bad.datatype == MPI.DOUBLE and not np.may_share_memory(bad.array, ro)
    assert bad.store is None and bad.load is not None
    bad.load()  # an in-place root still reads its (read-only) contribution
    np.testing.assert_array_equal(bad.array, ro)
    native = _mpi4py_error(lambda: MPI.COMM_SELF.Allreduce(np.zeros(4), ro))
    assert (type(bad.error).__name__, str(bad.error)) == native
    strided = np.arange(16.0)[::2]
    for writable in (False, True):
        msg = _message(strided, writable)
        assert msg.count == 8 and msg.error is not None and "contiguous" in str(msg.error)
        msg.load()  # a sender still contributes its data, in element order
        np.testing.assert_array_equal(msg.array, strided)
    msg = _message([strided, 3, 2, "d"], writable=False)
    msg.load()
    np.testing.assert_array_equal(msg.array, strided[2:5])
    assert _message(np.zeros((4, 4))[:, 1]).error is not None


def test_signature_not_form_decides():
    """Every legal form of 1000 doubles is 1000 DOUBLE elements; dense derived types are views of the
    user's memory, others pack and unpack through MPI."""
    from adaptcoll.buffers.datatypes import signature

    b = np.arange(1000.0)
    contiguous = MPI.DOUBLE.Create_contiguous(1000).Commit()
    blocks = MPI.DOUBLE.Create_contiguous(10).Create_contiguous(100).Commit()
    vector = MPI.DOUBLE.Create_vector(10, 100, 100).Commit()  # stride == block: dense
    indexed = MPI.DOUBLE.Create_indexed([500, 500], [0, 500]).Commit()
    struct = MPI.Datatype.Create_struct([400, 600], [0, 3200], [MPI.DOUBLE, MPI.DOUBLE]).Commit()
    strided = MPI.DOUBLE.Create_vector(1000, 1, 2).Commit()  # every other double: packed
    swapped = MPI.DOUBLE.Create_indexed([500, 500], [500, 0]).Commit()  # out of order: packed
    try:
        for spec in ([b, 1000, MPI.DOUBLE], [b, 1, contiguous], [b, blocks], (b, 1, vector), (b, indexed), [b, struct]):
            msg = _message(spec)
            assert msg.count == 1000 and msg.datatype == MPI.DOUBLE, spec
            assert msg.load is None and msg.store is None and np.shares_memory(msg.array, b), spec
            np.testing.assert_array_equal(msg.array, b)
        assert signature(contiguous).per_item == 1000 and signature(contiguous).dense
        assert not signature(strided).dense and not signature(swapped).dense
        wide = np.arange(2000.0)
        msg = _message([wide, 1, strided])
        assert msg.count == 1000 and not np.shares_memory(msg.array, wide)
        msg.load()
        np.testing.assert_array_equal(msg.array, wide[::2])
        msg.array[:] = -1
        msg.store()
        assert (wide[::2] == -1).all() and (wide[1::2] == np.arange(1.0, 2000.0, 2)).all()
        msg = _message((b, 1, swapped))
        msg.load()
        np.testing.assert_array_equal(msg.array, np.concatenate([b[500:], b[:500]]))
        # absolute addresses (BOTTOM): MPI reads and writes them
        absolute = MPI.DOUBLE.Create_hindexed([4, 4], [MPI.Get_address(b[10:]), MPI.Get_address(b[0:])]).Commit()
        msg = _message([MPI.BOTTOM, 1, absolute])
        msg.load()
        np.testing.assert_array_equal(msg.array, [10, 11, 12, 13, 0, 1, 2, 3])
        absolute.Free()
    finally:
        for t in (contiguous, blocks, vector, indexed, struct, strided, swapped):
            t.Free()


def test_dlpack_strict_producers_parse_like_mpi4py_and_are_not_consumed():
    """A ctypes DLPack producer whose capsule frees its tensor: every dtype (bool, float16, complex,
    lanes > 1) and both protocol versions parse to what mpi4py infers, no capsule is consumed (the
    deleter runs once, from the capsule, never late), and NumPy's from_dlpack is the counter-example."""
    import gc

    from dlpack_producer import LegacyProducer, Producer, late_calls, outstanding

    cases = [
        (np.arange(6, dtype="i1"), None, "b", 6),
        (np.array([1, 0, 1], "?"), None, "?", 3),
        (np.arange(5, dtype="e"), None, "e", 5),
        (np.arange(4) * (1 + 2j), None, "D", 4),
        (np.arange(8, dtype="i1"), (0, 8, 4), "B", 8),  # int8 x 4 lanes: raw bytes, as mpi4py reads it
        (np.arange(8.0), (2, 64, 2), "D", 4),  # two float lanes: complex, as mpi4py reads it
    ]
    before_late = late_calls()
    for make in (Producer, LegacyProducer):
        for data, dl_dtype, code, count in cases:
            shape = (count,) if dl_dtype is not None and dl_dtype[2] == 2 else None
            if dl_dtype is not None and dl_dtype[2] == 4:
                shape = (2,)
            producer = make(data, dl_dtype=dl_dtype, shape=shape)
            msg = _message(producer)
            assert msg.datatype == MPI.Datatype.fromcode(code) and msg.count == count, (make, data.dtype, dl_dtype)
            assert msg.array.tobytes() == data.tobytes()
            mv = MPI.buffer.frombuffer(producer)  # mpi4py's reading of the same producer
            assert mv.nbytes == msg.nbytes
            mv.release()
            for spec in ([producer, MPI.Datatype.fromcode(code)], (producer, count, code), (producer, (1, 1), code)):
                assert _message(spec).datatype == MPI.Datatype.fromcode(code)
            del msg, producer
    strided = Producer(np.arange(12.0), strides=(3,), shape=(4,))
    msg = _message(strided, writable=False)
    assert msg.error is not None and "contiguous" in str(msg.error)
    msg.load()
    np.testing.assert_array_equal(msg.array, [0.0, 3.0, 6.0, 9.0])
    read_only = Producer(np.arange(3.0), read_only=True)
    assert _message(read_only, writable=False).error is None
    assert "writable" in str(_message(read_only).error)
    del msg, strided, read_only
    gc.collect()
    assert outstanding() == 0 and late_calls() == before_late
    for _ in range(4):  # the counter-example: NumPy consumes the capsule and calls the freed deleter late
        arr = np.from_dlpack(Producer(np.arange(3.0)))
        del arr
    gc.collect()
    assert late_calls() > before_late
