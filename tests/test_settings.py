"""Settings: environment parsing with errors that name the variable, run-time changes, segment plans."""

from __future__ import annotations

import subprocess
import sys

import pytest

import adaptcoll
from adaptcoll import settings
from adaptcoll.buffers import parse
from adaptcoll.plan import plan_segments


def test_sizes_and_suffixes():
    env = {"ADAPTCOLL_BCAST_SEGMENT_SIZE": "64K", "ADAPTCOLL_REDUCE_SEGMENT_SIZE": "2M",
           "ADAPTCOLL_ALLREDUCE_SEGMENT_SIZE": "1000", "ADAPTCOLL_NATIVE_BELOW": "0"}
    s = settings.from_environ(env)
    assert (s.bcast_segment_size, s.reduce_segment_size, s.allreduce_segment_size) == (65536, 2 << 20, 1000)
    assert s.native_below == 0
    assert settings.parse_size("3MiB", "x") == 3 << 20


@pytest.mark.parametrize("var, value", [
    ("ADAPTCOLL_BCAST_ALGORITHM", "fibonacci"),
    ("ADAPTCOLL_REDUCE_ALGORITHM", "knomial:radix"),
    ("ADAPTCOLL_BCAST_SEGMENT_SIZE", "0"),
    ("ADAPTCOLL_ALLREDUCE_SEGMENT_SIZE", "12Q"),
    ("ADAPTCOLL_NATIVE_BELOW", "-1"),
    ("ADAPTCOLL_BCAST_SEND_WINDOW", "0"),
    ("ADAPTCOLL_REDUCE_RECV_WINDOW", "many"),
    ("ADAPTCOLL_SYNC_SENDS", "sometimes"),
    ("ADAPTCOLL_REPRODUCIBLE", "maybe"),
])
def test_invalid_environment_values_name_the_variable(var, value):
    with pytest.raises(ValueError, match=var):
        settings.from_environ({var: value})


def test_invalid_environment_at_import_is_a_clear_error():
    proc = subprocess.run([sys.executable, "-c", "import adaptcoll"], capture_output=True, text=True,
                          env={"ADAPTCOLL_BCAST_ALGORITHM": "nope", "PATH": ""}, timeout=60)
    assert proc.returncode != 0
    assert "ADAPTCOLL_BCAST_ALGORITHM" in proc.stderr and "binomial" in proc.stderr


def test_algorithm_choices_listed_in_error():
    with pytest.raises(ValueError) as info:
        settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": "star"})
    for kind in ("binomial", "in_order_binomial", "binary", "pipeline", "chain", "linear", "knomial", "native"):
        assert kind in str(info.value)


def test_configure_and_configured():
    before = adaptcoll.current_settings()
    with adaptcoll.configured(bcast_algorithm="chain:chains=2", bcast_segment_size="8K") as now:
        assert now.bcast_algorithm == "chain:chains=2" and now.bcast_segment_size == 8192
        assert adaptcoll.current_settings() is now
    assert adaptcoll.current_settings() == before
    with pytest.raises(TypeError, match="unknown adaptcoll setting"):
        adaptcoll.configure(bcast_segmentsize=4)
    with pytest.raises(ValueError, match="reduce_send_window"):
        adaptcoll.configure(reduce_send_window=-2)
    assert adaptcoll.current_settings() == before


def test_plan_rounds_to_whole_elements_and_respects_tag_space():
    p = plan_segments(count=100, itemsize=8, segment_bytes=20, tag_base=0, tag_space=1000)
    assert p.seg_count == 2 and p.nseg == 50
    p = plan_segments(count=10, itemsize=16, segment_bytes=1, tag_base=0, tag_space=1000)
    assert p.seg_count == 1  # at least one element
    p = plan_segments(count=1000, itemsize=1, segment_bytes=1, tag_base=7, tag_space=9)
    assert p.nseg <= 9 and sum(p.bounds(s)[1] - p.bounds(s)[0] for s in range(p.nseg)) == 1000
    assert len({p.tag(s) for s in range(p.nseg)}) == p.nseg
    assert plan_segments(0, 8, 64, 3, 10).nseg == 0


def test_buffer_forms_parse_to_the_same_view():
    import array

    import numpy as np
    from mpi4py import MPI

    a = np.arange(10, dtype="f8")
    for spec, count in [(a, 10), ([a, 4], 4), ((a, MPI.DOUBLE), 10), ((a, 3, "d"), 3), ((a, (3, 2), MPI.DOUBLE), 3),
                        ((a, 3, 2, MPI.DOUBLE), 3), (memoryview(a), 10), (array.array("d", range(10)), 10)]:
        msg = parse(spec, writable=True)
        assert not isinstance(msg, str), spec
        assert msg.count == count and msg.array.dtype == np.float64
    assert parse((a, 3, 2, MPI.DOUBLE), writable=True).array[0] == 2.0
    assert parse(np.zeros((4, 4))[:, 1], writable=True) == "non-contiguous buffer"
    assert parse((a, MPI.DOUBLE.Create_contiguous(2)), writable=True) == "derived datatype"
    assert parse(np.arange(3.0).view(np.dtype([("x", "f8")])), writable=True) == "unsupported dtype"
    assert parse((None, 3, MPI.DOUBLE), writable=True) == "BOTTOM addressing"

    class DeviceOnly:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "data": (0, False), "version": 3}
    assert parse(DeviceOnly(), writable=True) == "device memory"
