"""Buffer specifications: every mpi4py form parses to the same 1-D view; what is not served comes back as
a typed Native value whose kind says what the caller does with it."""

from __future__ import annotations

import array

import numpy as np
from mpi4py import MPI

from adaptcoll.buffers import Message, parse
from adaptcoll.native import Kind, Native


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
    assert _native(np.zeros((4, 4))[:, 1]) == Native("non-contiguous buffer", Kind.BAD_BUFFER)
    ro = np.zeros(4)
    ro.flags.writeable = False
    assert _native(ro).kind is Kind.BAD_BUFFER
    assert isinstance(parse(ro, writable=False), Message)  # read-only is fine for a send buffer
    assert _native((a, MPI.DOUBLE.Create_contiguous(2))).reason == "derived datatype"
    assert _native(np.arange(3.0).view(np.dtype([("x", "f8")]))).reason == "unsupported dtype"
    assert _native((None, 3, MPI.DOUBLE)).reason == "BOTTOM addressing"
    assert _native((a, 20, MPI.DOUBLE)).kind is Kind.INVALID
    assert _native("abc").kind is Kind.INVALID
    assert _native([a, 1, 2, 3, 4]).kind is Kind.INVALID

    class DeviceOnly:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "data": (0, False), "version": 3}

    assert _native(DeviceOnly()) == Native("device memory", Kind.DEVICE)
