"""Grouped Allreduce: `Allreduce_multi` / `Iallreduce_multi` / `Allreduce_multi_init` over many arrays.

The arrays are laid out in units (`layout.plan_units`): an array of at least `multi_pack_below`
bytes is reduced alone, in its own memory (no copy), by an Allreduce decided like any other (served
by adaptcoll's protocols or native, by size, the rule and the tuning table); smaller host arrays of
one dtype are packed, in call order, into scratch buffers of at most `multi_bucket_size` bytes
(through an MPI datatype, in C), each reduced by one Allreduce decided the same way and unpacked
when it completes. Device arrays below `multi_device_pack_below` are packed likewise, on the device
(devpack.py), into device buckets of at most `multi_device_bucket_size` bytes, each reduced by one
Allreduce on device memory (served by the device pipeline from the device threshold up, staged
whole below it). Every unit is started at once, so the served ones progress together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ...decision import decide
from ...protocols.operation import Operation
from ...runtime import counters, settings
from ...runtime.engine import engine
from ...state.comm_state import settle_setup
from .. import collectives
from ..persistent import Prequest, _prequest
from ..requests import NativeRequest, Request
from ..threads import enter, leave
from . import cache, devpack, scratch
from .args import NAME, Group, parse_group
from .cache import Entry, Packer
from .devpack import DevicePacker
from .layout import Unit as LayoutUnit
from .layout import plan_units
from .packing import HostPacker
from .requests import MultiRequest, Unit

__all__ = ["NAME", "iallreduce_multi", "allreduce_multi", "allreduce_multi_init", "MultiPrequest"]

_IN_PLACE = MPI.IN_PLACE
_SUM = MPI.SUM
_MPI_IALLREDUCE = MPI.Intracomm.Iallreduce
_MPI_ALLREDUCE = MPI.Intracomm.Allreduce
_FINISHED = Operation()
_FINISHED.complete()
PACKED_NOTE = "packed unit"
DEVICE_PACKED_NOTE = "packed device unit"


def _settings_key() -> tuple[int, int, int, int]:
    """The settings a layout depends on (pack thresholds and bucket caps, host and device)."""
    s = settings.current()
    return s.multi_pack_below, s.multi_bucket_size, s.multi_device_pack_below, s.multi_device_bucket_size


def _layout(group: Group, key: Optional[tuple[int, int, int, int]] = None) -> list[LayoutUnit]:
    below, bucket, device_below, device_bucket = key or _settings_key()
    return plan_units(
        group.nbytes, group.kinds, below, bucket, group.packable, group.on_device, device_below, device_bucket
    )


def _start_one(
    comm: MPI.Intracomm,
    send: Any,
    recv: Any,
    op: MPI.Op,
    blocking: bool,
    later: Optional[list[Callable[[], None]]] = None,
) -> Request:
    """One Allreduce of a grouped call, decided like `Iallreduce` and counted under Allreduce_multi.
    `later` (the blocking form): a call that goes native is appended there, to run as a blocking
    native Allreduce once every unit has started (see `iallreduce_multi`), and a finished request
    stands for it."""
    operation = collectives.start(NAME, decide.allreduce(comm, send, recv, op, blocking=blocking), comm)
    if operation is None:
        native_send = decide.in_place_send(send, recv)
        if later is not None:
            later.append(lambda: _MPI_ALLREDUCE(comm, native_send, recv, op))
            return Request(_FINISHED)
        settle_setup(comm)
        return NativeRequest(_MPI_IALLREDUCE(comm, native_send, recv, op), (send, recv))
    return Request(operation)


def _run_later(calls: list[Callable[[], None]]) -> None:
    """The blocking form's native Allreduces, one after another in call order (the same on every rank),
    the engine swept once after each so the served units keep moving meanwhile. (Started all at once
    as Iallreduce, 37 arrays of 0.1-4 MiB took 0.68-0.75x the time of the same blocking calls in a loop
    on MPICH, issue 36; one after another they cost what the loop costs.)"""
    progress = engine().progress
    for call in calls:
        call()
        progress()


def _packers(group: Group, unit: LayoutUnit) -> Optional[tuple[Packer, Packer]]:
    """(source, destination) packers of a packed unit (one packer when it is all in place)."""
    if not unit.packed:
        return None
    kind: type[Packer] = DevicePacker if unit.device else HostPacker
    dst = kind([group.recvs[i] for i in unit.arrays])
    if all(group.in_place[i] for i in unit.arrays):
        return dst, dst
    return kind([group.sends[i] for i in unit.arrays]), dst


def _prepare(sendbufs: Any, recvbufs: Any, op: Any) -> tuple[Entry, Group]:
    """The layout and packers (held: release the entry once started) and the checked group: from the
    cache when the same arrays come again."""
    if not isinstance(op, MPI.Op):
        raise TypeError(f"Argument 'op' has incorrect type (expected mpi4py.MPI.Op, got {type(op).__name__})")
    sizes = _settings_key()
    key: Optional[tuple[Any, ...]] = None
    lists = (list, tuple)
    if isinstance(sendbufs, lists) and (recvbufs is None or isinstance(recvbufs, lists)):
        sends, recvs = sendbufs, sendbufs if recvbufs is None else recvbufs
        key = (tuple(map(id, sendbufs)), None if recvbufs is None else tuple(map(id, recvbufs)), sizes)
    elif sendbufs is _IN_PLACE and isinstance(recvbufs, lists):
        sends = recvs = recvbufs
        key = (None, tuple(map(id, recvbufs)), sizes)
    if key is not None and len(sends) == len(recvs):
        found = cache.lookup(key, sends, recvs)
        if found is not None:
            return found
    group = parse_group(sendbufs, recvbufs, op)
    units = _layout(group, sizes)
    entry = Entry(group, units, [_packers(group, u) for u in units])
    cache.store(key if group.error is None else None, entry)
    return entry, group


def _start_packed(
    comm: MPI.Intracomm,
    unit: LayoutUnit,
    pair: tuple[Packer, Packer],
    op: MPI.Op,
    blocking: bool,
    on_release: Optional[Callable[[], None]],
    later: Optional[list[Callable[[], None]]] = None,
) -> Unit:
    src, dst = pair
    if isinstance(src, DevicePacker) and isinstance(dst, DevicePacker):
        return _start_device_packed(comm, unit, src, dst, op, blocking, on_release)
    assert isinstance(src, HostPacker) and isinstance(dst, HostPacker)
    group_dtype, count = unit.dtype, unit.count
    buf = scratch.take(group_dtype, count)
    src.pack(buf)
    counters.note(NAME, PACKED_NOTE)
    req = _start_one(comm, _IN_PLACE, buf, op, blocking, later)

    def finish(ok: bool) -> None:
        if ok:
            dst.unpack(buf)
        scratch.give(buf)
        if on_release is not None:
            on_release()

    return Unit(req, finish)


def _start_device_packed(
    comm: MPI.Intracomm,
    unit: LayoutUnit,
    src: DevicePacker,
    dst: DevicePacker,
    op: MPI.Op,
    blocking: bool,
    on_release: Optional[Callable[[], None]],
) -> Unit:
    """A device bucket: its arrays copied into a fresh device buffer on CuPy's current stream (after
    the producers of arrays that are not CuPy's), one Allreduce on it, copied back on that stream."""
    stream = devpack.current_stream()
    src.wait_producers()
    if dst is not src:
        dst.wait_producers()
    buf = devpack.bucket_buffer(unit.dtype, unit.count)
    src.pack(buf, stream)
    counters.note(NAME, DEVICE_PACKED_NOTE)
    req = _start_one(comm, _IN_PLACE, buf, op, blocking)

    def finish(ok: bool) -> Any:
        landing = devpack.Landing(dst.unpack(buf, stream), (buf, dst.keep)) if ok else None
        if on_release is not None:
            on_release()
        return landing

    return Unit(req, finish)


def _of_array(units: Sequence[LayoutUnit], n: int) -> list[int]:
    of = [0] * n
    for k, u in enumerate(units):
        for i in u.arrays:
            of[i] = k
    return of


def iallreduce_multi(
    comm: MPI.Intracomm, sendbufs: Any, recvbufs: Any = None, op: Any = _SUM, blocking: bool = False
) -> MultiRequest:
    """comm.Iallreduce_multi(sendbufs, recvbufs=None, op=SUM): a MultiRequest (`.requests`: one per array)."""
    key = enter(comm, NAME)
    later: Optional[list[Callable[[], None]]] = [] if blocking else None
    try:
        entry, group = _prepare(sendbufs, recvbufs, op)
        units = []
        try:
            for unit, pair in zip(entry.units, entry.packers):
                if pair is None:
                    i = unit.arrays[0]
                    send = _IN_PLACE if group.in_place[i] else group.sends[i]
                    units.append(Unit(_start_one(comm, send, group.recvs[i], op, blocking, later)))
                else:
                    entry.acquire()
                    units.append(_start_packed(comm, unit, pair, op, blocking, entry.release, later))
            if later:
                _run_later(later)
        finally:
            entry.release()
    finally:
        leave(key)
    req = MultiRequest(units, entry.of_array, keep=group)
    if group.error is not None:  # stand-ins took part for this rank's bad arrays: now report
        req.Wait()
        raise group.error
    return req


def allreduce_multi(comm: MPI.Intracomm, sendbufs: Any, recvbufs: Any = None, op: Any = _SUM) -> None:
    """comm.Allreduce_multi(sendbufs, recvbufs=None, op=SUM): every array reduced when it returns."""
    iallreduce_multi(comm, sendbufs, recvbufs, op, blocking=True).Wait()


class _Packed:
    """A persistent packed unit: its own scratch buffer (device memory for a device bucket) and packers."""

    __slots__ = ("buf", "src", "dst", "stream")

    def __init__(self, group: Group, unit: LayoutUnit) -> None:
        pair = _packers(group, unit)
        assert pair is not None
        self.src, self.dst = pair
        self.buf = devpack.bucket_buffer(unit.dtype, unit.count) if unit.device else np.empty(unit.count, unit.dtype)
        self.stream: Any = None

    def pack(self) -> None:
        src, dst = self.src, self.dst
        if isinstance(src, DevicePacker):
            self.stream = devpack.current_stream()
            src.wait_producers()
            if dst is not src:
                assert isinstance(dst, DevicePacker)
                dst.wait_producers()
            src.pack(self.buf, self.stream)
        else:
            src.pack(self.buf)

    def finish(self, ok: bool) -> Any:
        if not ok:
            return None
        if isinstance(self.dst, DevicePacker):
            return self.dst.unpack(self.buf, self.stream)
        self.dst.unpack(self.buf)
        return None

    def free(self) -> None:
        if self.src is not self.dst:
            self.src.free()
        self.dst.free()


class _Part:
    """A unit of a persistent grouped call: its persistent request and, if packed, its packers."""

    __slots__ = ("preq", "packed")

    def __init__(self, preq: Request, packed: Optional[_Packed]) -> None:
        self.preq = preq
        self.packed = packed

    def start(self) -> Unit:
        finish: Optional[Callable[[bool], Any]] = None
        if self.packed is not None:
            self.packed.pack()
            finish = self.packed.finish
        assert isinstance(self.preq, Prequest)
        self.preq.Start()
        return Unit(self.preq, finish)


class MultiPrequest(MultiRequest):
    """A persistent grouped Allreduce (`Allreduce_multi_init`): the layout, the datatypes that pack
    and unpack, the scratch buffers and every unit's persistent request are made once; each Start()
    packs and starts. Start(), Wait()/Test() any number of times, Free() when done."""

    __slots__ = ("_parts", "_comm", "_error")

    def __init__(
        self,
        comm: MPI.Intracomm,
        parts: Sequence[_Part],
        of_array: Sequence[int],
        error: Optional[BaseException],
        keep: Any = None,
    ) -> None:
        super().__init__((), of_array, keep)
        self._parts: Optional[tuple[_Part, ...]] = tuple(parts)
        self._comm = comm
        self._error = error
        self._reported = True  # inactive until started

    def Start(self) -> None:
        """Begin one more run (the previous one must have completed)."""
        if self._parts is None:
            raise ValueError("Start() on a freed persistent request")
        if not self._finished():
            raise RuntimeError("Start() on an active persistent request (Wait for it first)")
        key = enter(self._comm, "Start")  # the concurrent-collective check, as Prequest.Start
        try:
            self._units = tuple(p.start() for p in self._parts)
        finally:
            leave(key)
        self._requests = None
        self._reported = False
        if self._error is not None:  # stand-ins took part for this rank's bad arrays: now report
            self.Wait()
            raise self._error

    def Free(self) -> None:
        """Release the request (waits for an active run to finish first)."""
        if self._parts is None:
            return
        if not self._finished():
            self.Wait()
        for p in self._parts:
            p.preq.Free()
            if p.packed is not None:
                p.packed.free()
        self._parts = None
        self._units = ()
        self._keep = None

    @classmethod
    def Startall(cls, requests: Sequence[Any]) -> None:
        """Start every request in the list."""
        for r in requests:
            r.Start()


def _init_part(comm: MPI.Intracomm, group: Group, unit: LayoutUnit, op: MPI.Op) -> _Part:
    name = NAME + "_init"
    if not unit.packed:
        i = unit.arrays[0]
        send, recv = (_IN_PLACE if group.in_place[i] else group.sends[i]), group.recvs[i]
        packed = None
    else:
        packed = _Packed(group, unit)
        send, recv = _IN_PLACE, packed.buf
        counters.note(name, DEVICE_PACKED_NOTE if unit.device else PACKED_NOTE)
    preq = _prequest(
        name,
        comm,
        lambda: decide.allreduce(comm, send, recv, op),
        (send, recv),
        lambda: MPI.Intracomm.Allreduce_init(comm, decide.in_place_send(send, recv), recv, op),
    )
    return _Part(preq, packed)


def allreduce_multi_init(comm: MPI.Intracomm, sendbufs: Any, recvbufs: Any = None, op: Any = _SUM) -> MultiPrequest:
    """comm.Allreduce_multi_init(sendbufs, recvbufs=None, op=SUM): a persistent grouped Allreduce."""
    group = parse_group(sendbufs, recvbufs, op)
    plan = _layout(group)
    parts = [_init_part(comm, group, u, op) for u in plan]
    return MultiPrequest(comm, parts, _of_array(plan, len(group)), group.error, keep=group)
