"""The fast-call extension (adaptcoll.runtime.fastcalls): each signature passes its arguments and result
as ctypes does, bad arguments raise (never a wrong value in C), and where it is off or cannot be built
the ctypes function itself is used. Its use on the MPI paths: tests/test_engines.py."""

from __future__ import annotations

import array
import ctypes
import mmap
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from adaptcoll.runtime import cbuild, fastcalls

SOURCE = textwrap.dedent(
    """
    #include <sys/types.h>
    #include <stdint.h>
    static ssize_t last;
    int f_i_ni(ssize_t a, int b) { return (int)(a % 100003) * 3 + b; }
    ssize_t f_n_ni(ssize_t a, int b) { return a * 2 + b; }
    int f_i_n(ssize_t a) { return (int)(a >> 33) - 1; }
    void f_v_n(ssize_t a) { last = a; }
    ssize_t f_last(void) { return last; }
    int f_i_piip(void *p, int a, int b, void *q) { *(int64_t *)q = (int64_t)(intptr_t)p + a; return a - b; }
    int f_i_pppi(void *p, void *q, void *r, int n) {
        ((int64_t *)p)[0] = n; ((int32_t *)q)[0] = -n; return r == 0 ? n : -n; }
    """
)

SIGNATURES = {
    "f_i_ni": ("i(n,i)", ctypes.c_int, [ctypes.c_ssize_t, ctypes.c_int]),
    "f_n_ni": ("n(n,i)", ctypes.c_ssize_t, [ctypes.c_ssize_t, ctypes.c_int]),
    "f_i_n": ("i(n)", ctypes.c_int, [ctypes.c_ssize_t]),
    "f_v_n": ("v(n)", None, [ctypes.c_ssize_t]),
    "f_i_piip": ("i(p,i,i,p)", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
    "f_i_pppi": ("i(p,p,p,i)", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]),
}


@pytest.fixture(scope="module")
def module():
    """The extension as the compiled engine loads it (skips where no C compiler or no Python headers)."""
    mod, why = fastcalls._load(None)
    if mod is None:
        pytest.skip(f"the fast-call extension is not built here: {why}")
    return mod


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cc = cbuild.find_cc()
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("fastcalls")
    path = cbuild.build_cached(cc, {"f.c": SOURCE.encode()}, "f.c", "fastcalls_test", out, ("-O1", "-shared", "-fPIC"))
    lib = ctypes.CDLL(str(path))
    for name, (_, res, args) in SIGNATURES.items():
        getattr(lib, name).restype = res
        getattr(lib, name).argtypes = args
    lib.f_last.restype = ctypes.c_ssize_t
    return lib


def _fast(module, lib, name, release_gil=False):
    function = getattr(lib, name)
    return module.wrap(ctypes.cast(function, ctypes.c_void_p).value, SIGNATURES[name][0], name, release_gil)


@pytest.mark.parametrize("release_gil", [False, True])
def test_every_signature_gives_what_ctypes_gives(module, lib, release_gil) -> None:
    fast = {name: _fast(module, lib, name, release_gil) for name in SIGNATURES}
    for a, b in [(0, 0), (5, 1), (-7, -3), (2**40 + 9, 2**31 - 1), (-(2**62), -(2**31))]:
        assert fast["f_i_ni"](a, b) == lib.f_i_ni(a, b)
        assert fast["f_n_ni"](a // 4, b) == lib.f_n_ni(a // 4, b)
        assert fast["f_i_n"](a) == lib.f_i_n(a)
        assert fast["f_v_n"](a) is None and lib.f_last() == a
    out_fast, out_ct = ctypes.c_int64(), ctypes.c_int64()
    at_fast, at_ct = ctypes.addressof(out_fast), ctypes.addressof(out_ct)
    assert fast["f_i_piip"](1234, 7, 9, at_fast) == lib.f_i_piip(1234, 7, 9, at_ct) == -2
    assert out_fast.value == out_ct.value == 1241
    assert fast["f_i_piip"](None, 3, 1, at_fast) == 2 and out_fast.value == 3  # None is NULL, as in ctypes
    ids, states = (ctypes.c_int64 * 2)(), (ctypes.c_int32 * 2)()
    assert fast["f_i_pppi"](ctypes.addressof(ids), ctypes.addressof(states), 0, 11) == 11
    assert (ids[0], states[0]) == (11, -11)


def test_bad_arguments_raise_and_call_nothing(module, lib) -> None:
    f = _fast(module, lib, "f_i_ni")
    lib.f_v_n(-1)
    g = _fast(module, lib, "f_v_n")
    with pytest.raises(TypeError, match=r"f_i_ni takes 2 arguments \(1 given\)"):
        f(1)
    with pytest.raises(TypeError, match="keyword"):
        f(1, b=2)
    with pytest.raises(TypeError):
        f(ctypes.c_ssize_t(1), 2)  # ints only (the starts pass CompiledCall.handle)
    with pytest.raises(TypeError):
        g("1")
    with pytest.raises(OverflowError):
        f(1, 2**31)
    with pytest.raises(OverflowError):
        g(2**70)
    assert lib.f_last() == -1  # none of them reached C
    with pytest.raises(ValueError, match="unknown signature"):
        module.wrap(ctypes.cast(lib.f_i_n, ctypes.c_void_p).value, "d(d)", "f", False)
    with pytest.raises(ValueError, match="NULL"):
        module.wrap(0, "i(n)", "f", False)
    assert "f_i_ni i(n,i)" in repr(f)
    assert set(module.signatures()) == {sig for sig, _, _ in SIGNATURES.values()}


def test_off_missing_headers_and_bad_values(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ADAPTCOLL_FASTCALLS", "off")
    assert fastcalls._load(None) == (None, "ADAPTCOLL_FASTCALLS=off")
    monkeypatch.setenv("ADAPTCOLL_FASTCALLS", "fast")
    with pytest.raises(ValueError, match="ADAPTCOLL_FASTCALLS must be one of auto, off, got 'fast'"):
        fastcalls._load(None)
    monkeypatch.setenv("ADAPTCOLL_FASTCALLS", "auto")
    monkeypatch.setattr(fastcalls, "_includes", lambda: [str(tmp_path)])
    module, why = fastcalls._load(None)
    assert module is None and "Python's headers (Python.h) are not installed" in why


def test_wrap_is_ctypes_itself_where_the_extension_is_not_loaded(monkeypatch, lib) -> None:
    monkeypatch.setattr(fastcalls, "_loaded", (None, "ADAPTCOLL_FASTCALLS=off"))
    assert fastcalls.wrap(lib.f_i_ni, "i(n,i)", True) is lib.f_i_ni
    assert fastcalls.status() == ("ctypes", "ADAPTCOLL_FASTCALLS=off")


def test_the_fast_call_releases_the_gil_only_when_asked(module, lib, tmp_path) -> None:
    """A thread runs Python while another is inside a C call that sleeps: with release_gil it gets
    through, without it waits for the call (checked in a child, so a stuck GIL cannot hang the suite)."""
    cc = cbuild.find_cc()
    assert cc is not None
    path = cbuild.build_cached(
        cc,
        {"s.c": b"#include <unistd.h>\n#include <sys/types.h>\nint nap(ssize_t us) { usleep(us); return 1; }\n"},
        "s.c",
        "fastcalls_nap",
        tmp_path,
        ("-O1", "-shared", "-fPIC"),
    )
    program = textwrap.dedent(
        f"""
        import ctypes, threading, time
        from adaptcoll.runtime import fastcalls
        mod, why = fastcalls._load(None)
        lib = ctypes.CDLL({str(path)!r}); lib.nap.restype = ctypes.c_int; lib.nap.argtypes = [ctypes.c_ssize_t]
        for release in (True, False):
            nap = mod.wrap(ctypes.cast(lib.nap, ctypes.c_void_p).value, "i(n)", "nap", release)
            ticks = []
            def count():
                end = time.monotonic() + 0.3
                while time.monotonic() < end:
                    ticks.append(1)
                    time.sleep(0.001)
            t = threading.Thread(target=count)
            t.start(); time.sleep(0.02)
            n0 = len(ticks); nap(200000); n1 = len(ticks)
            t.join()
            print(release, n1 - n0)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = dict(line.split() for line in done.stdout.splitlines())
    assert int(got["True"]) >= 5, done.stdout  # the other thread ran during the 200 ms in C (>= 5: a busy machine)
    assert int(got["False"]) <= 3, done.stdout  # it could not: the GIL was held


def test_the_extension_builds_into_the_cache_once(module, tmp_path) -> None:
    cc = cbuild.find_cc()
    assert cc is not None
    first = fastcalls.build(cc, tmp_path)
    assert fastcalls.build(cc, tmp_path) == first and first.name.startswith("libadaptcoll_fastcalls-")
    assert Path(first).stat().st_size > 0


def test_unchanged_answers_what_the_caches_python_check_answers(module) -> None:
    """The decision cache's array check in C (fastcalls.UNCHANGED) against its Python twin, for every
    way an array held by a remembered call can change in place."""
    from adaptcoll.decision import cache

    class Sub(np.ndarray):
        pass

    base = np.arange(24, dtype="f8")
    arrays = {
        "1d": base,
        "2d": base.reshape(4, 6),
        "view": base[::2],
        "empty": np.zeros(0, "i4"),
        "0d": np.array(3.0),
        "readonly": np.frombuffer(b"12345678", np.uint8),
    }
    for name, a in arrays.items():
        sig = cache._signature(a)
        assert module.unchanged((a,), (sig,)) is cache._unchanged((a,), (sig,)) is True, name
        assert module.unchanged((a, None), (sig, None)) is True, name
    changed = []
    a = np.arange(24, dtype="f8")
    sig = cache._signature(a)
    b = a.view()
    b.shape = (6, 4)
    changed.append(b)
    c = a.view()
    c.dtype = np.int64  # same size, another dtype
    changed.append(c)
    d = a.view()
    d.flags.writeable = False
    changed.append(d)
    changed.append(np.lib.stride_tricks.as_strided(a, shape=(24,), strides=(0,)))
    changed.append(a[:12])  # another shape
    for x in changed:
        assert module.unchanged((x,), (sig,)) is cache._unchanged((x,), (sig,)) is False, (x.shape, x.strides)
    # Stricter than Python where Python cannot be wrong either (an entry holds its arrays, so the object
    # under a remembered id is the one it was made for): not the exact ndarray type, a malformed signature.
    assert module.unchanged((a.view(Sub),), (sig,)) is False
    assert module.unchanged((a,), (("not", "a", "signature"),)) is False
    assert module.unchanged((), ()) is True
    with pytest.raises(TypeError):
        module.unchanged([a], [sig])


def test_busy_marker_is_the_threads_check(module) -> None:
    """forms.threads' enter / leave in C: the same keys, nesting and error as the Python functions, on
    the same dict (a call entered by one and left by the other leaves nothing behind)."""
    import threading

    from adaptcoll.forms import threads

    class Comm:
        def __init__(self, handle: int) -> None:
            self.handle = handle

        def Get_name(self) -> str:
            return "test-comm"

    busy: dict = {}
    marker = module.busy_marker(busy, threads._conflict)
    a, b = Comm(0x1234), Comm(0x5678)
    assert marker.enter(a, "Bcast") == 0x1234 and busy == {0x1234: (threading.get_ident(), "Bcast")}
    assert marker.enter(a, "Reduce") is None  # nested in this thread's own call
    assert marker.enter(b, "Allreduce") == 0x5678
    marker.leave(0x5678)
    marker.leave(None)
    marker.leave(0x9999)  # (not busy: nothing to do, as dict.pop(key, None))
    assert list(busy) == [0x1234]
    errors: list[BaseException] = []

    def other() -> None:
        try:
            marker.enter(a, "Allreduce")
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other, name="second")
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], threads.ConcurrentCollectiveError), errors
    assert "Allreduce on communicator test-comm (handle 0x1234) was called in thread 'second'" in str(errors[0])
    assert "inside Bcast" in str(errors[0])
    marker.leave(0x1234)
    assert busy == {}
    with pytest.raises(TypeError):
        marker.enter(a)
    with pytest.raises(AttributeError):
        marker.enter(object(), "Bcast")  # no handle: raises, marks nothing
    assert busy == {}
    with pytest.raises(TypeError):
        module.busy_marker([], threads._conflict)


def test_native_gate_is_the_fast_paths_test_and_counter(module) -> None:
    """The native wrapper's test in C (forms.collectives: an exact ndarray below comm.<attr>[key] goes to
    MPI) gives the Python test's answer, counts only what it lets through, and reads and resets as the
    one-element counters of runtime.counters."""

    class Comm:
        pass

    comm = Comm()
    gate = module.native_gate("_adaptcoll_below", "bcast", 5)
    arrays = [
        np.zeros(100, "f8"),
        np.zeros(100, "f4"),
        np.zeros((10, 10), "i2"),
        np.zeros(1000, "u1")[::3],
        np.array(2.5),
        np.zeros(0),
        np.zeros((3, 0, 4)),
        np.zeros(4, "c16"),
    ]
    assert gate(comm, arrays[0]) is False and gate[0] == 5  # no thresholds yet (UNKNOWN): never below
    for limit in (0, 1, 8, 16, 200, 333, 334, 400, 800, 801, 10**6):
        comm._adaptcoll_below = {"bcast": limit, "reduce": 0}
        for a in arrays:
            before = gate[0]
            want = a.nbytes < limit
            assert gate(comm, a) is want, (a.dtype, a.shape, limit)
            assert gate[0] == before + want
    assert gate(comm, [1, 2]) is False  # not a specification
    # An ndarray subclass is not the exact-ndarray test's: it is sized as spec_size.host_nbytes sizes it
    # (its host DLPack tensor), so it goes native below the threshold as the Python path sends it.
    from adaptcoll.forms import spec_size

    module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    matrix = arrays[0].view(np.matrix)
    assert spec_size.host_nbytes(matrix) == matrix.nbytes and gate(comm, matrix) is True
    comm._adaptcoll_below = {"bcast": matrix.nbytes, "reduce": 0}
    assert gate(comm, matrix) is False
    assert gate(object(), arrays[0]) is False  # no __dict__: the Python path decides
    comm._adaptcoll_below = {"reduce": 10**6}
    assert gate(comm, arrays[0]) is False  # no entry for this collective
    comm._adaptcoll_below = None
    assert gate(comm, arrays[0]) is False
    gate[0] = 0
    assert gate[0] == 0 and len(gate) == 1
    with pytest.raises(IndexError):
        gate[1]
    with pytest.raises(TypeError):
        gate(comm)
    from adaptcoll.runtime import counters

    counters.below_counter("TestGate")[0] = 7
    counters.use_below_counter("TestGate", gate)
    assert gate[0] == 7 and counters.stats()["TestGate"]["native"] == 7
    counters.reset_stats()
    assert gate[0] == 0


class _DLPack:
    """A host DLPack producer (DLPack 1.x, as NumPy 2 and PyTorch answer `max_version`)."""

    def __init__(self, a: np.ndarray, device: object = None) -> None:
        self.a, self.device = a, device

    def __dlpack__(self, **kwargs: object) -> object:
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> object:
        return self.a.__dlpack_device__() if self.device is None else self.device


class _LegacyDLPack(_DLPack):
    """A DLPack 0.x producer: `__dlpack__` takes no arguments (TypeError for max_version)."""

    def __dlpack__(self) -> object:  # type: ignore[override]
        return self.a.__dlpack__()


class _OddDLPack(_DLPack):
    """A producer whose `__dlpack__` fails, or hands back something that is not a capsule."""

    def __dlpack__(self, **kwargs: object) -> object:
        if self.a.size == 0:
            raise RuntimeError("no tensor")
        return self.a


class _DLPackAndCAI(_DLPack):
    """Both protocols: the CUDA array interface decides (spec_size's order)."""

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (1,), "typestr": "<f8", "data": (0, False), "version": 3}


def _dlpack_producers() -> list:
    grid = np.zeros((3, 5), np.int16)
    made = [_DLPack(np.zeros(8)), _DLPack(grid), _DLPack(grid.T), _DLPack(np.zeros(())), _DLPack(np.zeros((0, 4)))]
    made += [_DLPack(np.zeros(4, np.complex64)), _DLPack(np.zeros(3, bool)), _LegacyDLPack(np.zeros(6))]
    made += [_LegacyDLPack(grid[:, ::2]), _DLPack(np.zeros(4), (2, 0)), _DLPack(np.zeros(4), (1,))]
    made += [_DLPack(np.zeros(4), [1, 0]), _DLPack(np.zeros(4), ()), _DLPack(np.zeros(4), "cpu")]
    made += [_OddDLPack(np.zeros(0)), _OddDLPack(np.zeros(3)), _DLPackAndCAI(np.zeros(4))]
    return made


def _specifications() -> list:
    """Buffer specifications of every form spec_size.host_nbytes knows, and some it refuses."""
    import array
    import mmap

    from mpi4py import MPI

    mapped = mmap.mmap(-1, 64)
    derived = MPI.DOUBLE.Create_contiguous(2).Commit()
    bufs = [bytearray(64), bytes(64), mapped, np.zeros(8), array.array("d", [0.0] * 8), memoryview(bytearray(64))]
    counts = [0, 1, 7, 64, -1, True, (4, 0), (4,), 2**70, 3.0, "4"]
    datatypes = [MPI.BYTE, MPI.INT, MPI.DOUBLE, MPI.C_DOUBLE_COMPLEX, MPI.LONG_DOUBLE, derived, MPI.DATATYPE_NULL]
    datatypes += ["d", None]
    specs: list = [*bufs, None, MPI.BOTTOM, [], (), [mapped], object()]
    producers = [_DLPack(np.zeros(8)), _LegacyDLPack(np.zeros(2)), _DLPack(np.zeros(8), (2, 0))]
    producers += [_DLPackAndCAI(np.zeros(1))]
    for buf in [*bufs, None, MPI.BOTTOM, object(), *producers]:
        for count in counts:
            for datatype in datatypes:
                specs += [[buf, count, datatype], (buf, count, datatype), [buf, count, 0, datatype]]
        specs += [(buf, 2, 0, MPI.BYTE, 1), [buf, (4, 0, 1), MPI.BYTE], [buf, [3, 1], MPI.INT]]
        specs += [[buf, (True, 0), MPI.INT]]
    closed = mmap.mmap(-1, 16)
    closed.close()
    released = memoryview(bytearray(8))
    released.release()
    grid = np.zeros((4, 6), dtype=np.float32)
    two_item_bufs = [*bufs, grid, grid[:, ::2], grid.T, np.float64(1.0), np.zeros(()), np.zeros((0, 3))]
    two_item_bufs += [memoryview(grid)[::2], memoryview(b"abc"), array.array("h"), np.zeros(3, np.float16)]
    two_item_bufs += [np.zeros(2, "U3"), closed, released, None, MPI.BOTTOM, object()]
    specs += [*two_item_bufs[:-3], *_dlpack_producers()]
    for buf in two_item_bufs:
        seconds = [MPI.DOUBLE, MPI.BYTE, MPI.INT, derived, MPI.DATATYPE_NULL, "d", None]
        for second in [*seconds, 0, 3, -1, True, 2**70, 2**62]:
            specs += [[buf, second], (buf, second)]
    return specs


def test_host_nbytes_in_c_is_spec_sizes_answer(module) -> None:
    """The extension's host_nbytes (the common specification forms sized in C, the rest by the Python
    function) answers spec_size.host_nbytes's answer for every form, in range or not, on host buffers and
    on anything else; the facts it is given are checked."""
    from adaptcoll.forms import spec_size

    module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    specs = _specifications()
    assert len(specs) > 1000

    def outcome(size, spec):
        try:
            return size(spec)
        except Exception as error:  # (a closed mmap, a released memoryview: the same error from both)
            return type(error), str(error)

    for spec in specs:
        assert outcome(module.host_nbytes, spec) == outcome(spec_size.host_nbytes, spec), spec
    with pytest.raises(TypeError):
        module.spec_facts([bytearray], spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    with pytest.raises(TypeError):
        module.spec_facts((bytearray, 1), spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    with pytest.raises(TypeError):
        module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, None)
    module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)


def test_a_dlpack_capsule_sized_in_c_is_released_unconsumed(module) -> None:
    """The C sizing of a host DLPack producer lets go of each capsule it asks for (the producer's deleter
    runs: the array's reference count comes back), on the 1.x and the 0.x protocol, and leaves no error."""
    from adaptcoll.forms import spec_size

    module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    a = np.zeros(16)
    producers = [_DLPack(a), _LegacyDLPack(a)]
    before = sys.getrefcount(a)
    for _ in range(1000):
        for producer in producers:
            assert module.host_nbytes(producer) == 128
    assert sys.getrefcount(a) == before


def test_native_gate_takes_the_specifications_c_sizes(module) -> None:
    """The native gate on a buffer specification: True (and counted) exactly when the form is one the C
    sizing knows (`[buf, count, datatype]`, `[buf, (count, displ), datatype]`, `[buf, count, displ,
    datatype]` with an int count >= 0, a predefined datatype and an exact host buffer type; `[buf,
    datatype]` and `[buf, count]` on such a buffer, open and not released; a bare buffer of such a type; a
    bare host DLPack producer without the CUDA array interface) and spec_size.host_nbytes sizes it below the
    threshold; every other form is left to the Python path."""
    from adaptcoll.forms import spec_size

    class Comm:
        pass

    def usable(buf) -> bool:
        try:
            len(buf)
        except ValueError:  # a closed mmap, a released memoryview
            return False
        except TypeError:  # (a 0-d memoryview has no length)
            pass
        return True

    def host_producer(buf) -> bool:  # without the CAI, and on device (1, ...)
        if not isinstance(buf, _DLPack) or isinstance(buf, _DLPackAndCAI):
            return False
        return buf.device is None or (type(buf.device) is tuple and buf.device[:1] == (1,))

    def sized_in_c(spec) -> bool:
        if type(spec) in (bytearray, bytes, np.ndarray):  # (an exact ndarray: the gate's own first test)
            return True
        if type(spec) in (memoryview, mmap.mmap, array.array):
            return usable(spec)
        if isinstance(spec, _DLPack):  # a host producer that hands over a capsule
            return type(spec) in (_DLPack, _LegacyDLPack) and host_producer(spec)
        if type(spec) not in (list, tuple) or len(spec) not in (2, 3, 4):
            return False
        if type(spec[0]) not in spec_size.HOST_TYPES and not (len(spec) > 2 and host_producer(spec[0])):
            return False
        buf, count = spec[0], spec[1]
        if isinstance(buf, (mmap.mmap, memoryview)) and not usable(buf):
            return False
        if len(spec) == 2 and type(count) is not int:
            return spec_size.PREDEFINED_SIZES.get(id(count), 0) > 0
        if len(spec) == 3 and type(count) in (list, tuple) and len(count) == 2:
            count = count[0]
        return (
            type(count) is int and 0 <= count < 2**63 and (len(spec) == 2 or id(spec[-1]) in spec_size.PREDEFINED_SIZES)
        )

    def python_size(spec) -> int:
        try:
            return spec_size.host_nbytes(spec)
        except ValueError:  # (a closed mmap, a released memoryview)
            return -1

    module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    comm = Comm()
    gate = module.native_gate("_adaptcoll_below", "allreduce", 0)
    specs = _specifications()
    let_through = left = 0
    for limit in (0, 1, 8, 64, 65, 10**6):
        comm._adaptcoll_below = {"allreduce": limit}
        for spec in specs:
            before = gate[0]
            want = sized_in_c(spec) and 0 <= python_size(spec) < limit
            assert gate(comm, spec) is want, (spec, limit)
            assert gate[0] == before + want
            let_through += want
            left += not sized_in_c(spec) and 0 <= python_size(spec) < limit
    assert let_through > 100 and left > 10  # both kinds were there


_MISSING = object()


class _HostCAI:
    """Host memory behind `__cuda_array_interface__` (as mpi4py's own tests make it), one entry of the dict
    changed (`_MISSING`: left out); `in_c` says whether the C sizing reads it without a CUDA driver (as a
    bare object, and as the buffer of a `[buf, count, datatype]` form)."""

    def __init__(self, a: np.ndarray, bare: bool = True, buf: bool = True, **changes: object) -> None:
        cai = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False), "version": 3}
        for key, value in changes.items():
            if value is _MISSING:
                del cai[key]
            else:
                cai[key] = value
        self.a, self.__cuda_array_interface__ = a, cai
        self.in_c = {"bare": bare, "buf": buf}


class _DictCAI(dict):
    pass


class _RaisingCAI:
    in_c = {"bare": False, "buf": False}

    @property
    def __cuda_array_interface__(self) -> dict:
        raise RuntimeError("not on a GPU")


class _NoneCAI(_DLPack):
    """A host DLPack producer whose `__cuda_array_interface__` is None (spec_size: the DLPack decides)."""

    __cuda_array_interface__ = None
    in_c = {"bare": False, "buf": False}


def _cai_objects() -> list:
    a, grid = np.zeros(8), np.zeros((3, 5), np.int16)
    made = [_HostCAI(a), _HostCAI(grid), _HostCAI(np.zeros(4, np.complex64)), _HostCAI(np.zeros(3, bool))]
    made += [_HostCAI(np.zeros(())), _HostCAI(np.zeros((0, 4))), _HostCAI(np.zeros(5, np.uint8)), _HostCAI(grid.T)]
    made += [_HostCAI(a, typestr=t) for t in ("|u1", ">i4", "=c16", "|f2", "<u8", "b1")]
    made += [_HostCAI(a, bare=False, typestr=t) for t in ("<M8", "V8", "<i3", "i", 5, _MISSING)]
    made += [_HostCAI(a, shape=[2, 3]), _HostCAI(a, data=[a.ctypes.data, False]), _HostCAI(a, data=(0, False))]
    made += [_HostCAI(a, data=(None, False)), _HostCAI(a, data=(True, False)), _HostCAI(a, strides=(16,))]
    made += [_HostCAI(a, bare=False, shape=s) for s in ((True,), (-1,), (np.int64(3),), (2**40, 2**40), 3, _MISSING)]
    made += [_HostCAI(a, bare=False, buf=False, data=d) for d in ((), "x", (np.int64(5), False), (1.5,), _MISSING)]
    odd = _HostCAI(a, bare=False, buf=False)
    odd.__cuda_array_interface__ = _DictCAI(odd.__cuda_array_interface__)
    return [*made, odd, _RaisingCAI(), _NoneCAI(a)]


def _cai_specifications() -> list:
    from mpi4py import MPI

    specs: list = []
    for obj in _cai_objects():
        specs += [obj, [obj, 4, MPI.BYTE], (obj, (4, 0), MPI.DOUBLE), [obj, 3, 0, MPI.INT], [obj, -1, MPI.BYTE]]
        specs += [[obj, 2, "d"], [obj, MPI.BYTE], [obj, 4]]
    return specs


@pytest.fixture
def no_cuda_driver(module):
    """This process without a CUDA driver for the test (every pointer is host memory), as on a CPU node."""
    from adaptcoll.device import driver as cuda_driver

    previous = cuda_driver.set_driver(cuda_driver.NoDriver("test"))
    module.host_cai(True)
    try:
        yield cuda_driver
    finally:
        cuda_driver.set_driver(previous)
        module.host_cai(isinstance(previous, cuda_driver.NoDriver))


def test_host_cai_objects_sized_in_c_without_a_cuda_driver(module, no_cuda_driver) -> None:
    """Without a CUDA driver every `__cuda_array_interface__` pointer is host memory: the C sizing reads
    the interface's dict where it is an exact dict with a readable pointer (bare: an unambiguous typestr
    and a shape of ints too) and answers spec_size.host_nbytes's answer, errors included, for every
    variant, with the flag on and off; the native gate lets exactly those through."""
    from adaptcoll.forms import spec_size

    module.spec_facts(spec_size.HOST_TYPES, spec_size.PREDEFINED_SIZES, spec_size.host_nbytes)
    specs = _cai_specifications() + _specifications()

    def outcome(size, spec):
        try:
            return size(spec)
        except Exception as error:
            return type(error), str(error)

    for on in (True, False):
        module.host_cai(on)
        for spec in specs:
            assert outcome(module.host_nbytes, spec) == outcome(spec_size.host_nbytes, spec), (on, spec)

    class Comm:
        pass

    comm, gate = Comm(), module.native_gate("_adaptcoll_below", "bcast", 0)
    comm._adaptcoll_below = {"bcast": 10**6}
    through = 0
    for on in (True, False):
        module.host_cai(on)
        for spec in _cai_specifications():
            bare = not isinstance(spec, (list, tuple))
            obj = spec if bare else spec[0]
            typed = bare or (len(spec) > 2 and id(spec[-1]) in spec_size.PREDEFINED_SIZES)  # (not a typecode)
            in_c = obj.in_c["bare" if bare else "buf"] and typed
            want = on and in_c and 0 <= outcome(spec_size.host_nbytes, spec) < 10**6
            assert gate(comm, spec) is want, (on, spec)
            through += want
    assert through > 100
    module.host_cai(True)


def test_a_cuda_driver_turns_the_c_reading_of_cai_objects_off(module, no_cuda_driver) -> None:
    """Whenever the driver changes, the extension hears of it (adaptcoll.device.driver.watch, registered
    where the extension loads): under a driver that calls every pointer device memory no CAI object is
    sized in C or by Python (neither reaches MPI), and without one again both size it."""
    from adaptcoll.device.driver import MemoryKind, NoDriver
    from adaptcoll.forms import collectives, spec_size  # noqa: F401 - (registers the watcher with the extension)

    if fastcalls.load()[0] is not module:
        pytest.skip("the fixture's module is not the one the forms use here")

    class DeviceDriver:
        name = "every pointer on a device (test)"

        def pointer_kind(self, pointer: int) -> MemoryKind:
            return MemoryKind.DEVICE

    obj = _HostCAI(np.zeros(8))
    assert module.host_nbytes(obj) == 64
    no_cuda_driver.set_driver(DeviceDriver())
    assert module.host_nbytes(obj) == -1 and spec_size.host_nbytes(obj) == -1
    no_cuda_driver.set_driver(NoDriver("test again"))
    assert module.host_nbytes(obj) == 64
