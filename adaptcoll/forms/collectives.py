"""The buffer collectives as module functions (`adaptcoll.Intracomm`'s Bcast, Reduce and Allreduce are
these functions themselves; its other methods are one line each over them): a small-message fast path,
the decision (`adaptcoll.decision.decide`), then either adaptcoll's protocols or the native mpi4py method with
the same arguments, counted in `stats()` either way.

The fast path (blocking and nonblocking forms alike) comes first and costs a size check and one
counter update: a message below the
communicator's threshold for the collective (its tuning's, set once the tuning is known by its first
blocking call; 0 before, so the first calls take the full path; the nonblocking forms use the
provisional tuning's thresholds until then, which they decide with meanwhile) goes straight to mpi4py
(a program that reduces norms or flags makes such calls all the time). Its size is the NumPy array's `nbytes`, or for
the other host forms (`[buf, count, datatype]` and friends over bytearray, mmap, array.array, ...)
`spec_size.host_nbytes`, the signature's size from the count and datatype (the common forms sized,
tested and counted in C where the fast-call extension is built); everything else goes
through the decision, which reaches the same native call for small messages. A second fast path takes
exact `cupy.ndarray`s below the communicator's device threshold when MPI is not CUDA-aware
(`adaptcoll.device.small`): the blocking forms run the staged native call the decision would make,
the nonblocking ones start the decision's own StagedCall, neither asks the decision, and both are
counted as it counts them ("native (staged): below native_below"). Past the fast paths
each call marks its communicator busy (adaptcoll.forms.threads), so a
second thread calling a collective on the same communicator at the same time gets a clear error
instead of a hang.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ..decision import decide
from ..decision.cache import op_key
from ..decision.cache import remembered as _remembered
from ..device import driver as _cuda
from ..device import small as _small
from ..device.route import staged_reason
from ..device.staged import StagedCall
from ..protocols.operation import Operation
from ..runtime import counters, fastcalls
from ..runtime.engine import engine
from ..runtime.native import BELOW_THRESHOLD, Native
from ..state.comm_state import IDUP_OVERLAP_BREAKS, comm_state, settle_setup
from ..tune.choose import BELOW_ATTR, DEVICE_BELOW_ATTR, NB_BELOW_ATTR, NB_DEVICE_BELOW_ATTR, UNKNOWN
from . import threads as _threads
from .requests import NativeRequest, Request
from .spec_size import HOST_TYPES, PREDEFINED_SIZES, host_nbytes

__all__ = ["start", "wait", "bcast", "ibcast", "reduce", "ireduce", "allreduce", "iallreduce", "native_forms"]

_IN_PLACE = MPI.IN_PLACE
_SUM = MPI.SUM
_NDARRAY = np.ndarray
_MPI_BCAST = MPI.Intracomm.Bcast
_MPI_IBCAST = MPI.Intracomm.Ibcast
_MPI_REDUCE = MPI.Intracomm.Reduce
_MPI_IREDUCE = MPI.Intracomm.Ireduce
_MPI_ALLREDUCE = MPI.Intracomm.Allreduce
_MPI_IALLREDUCE = MPI.Intracomm.Iallreduce
_BELOW = counters.below
_BCAST = "Bcast"
_BCAST_BELOW = counters.below_counter("Bcast")
_REDUCE_BELOW = counters.below_counter("Reduce")
_ALLREDUCE_BELOW = counters.below_counter("Allreduce")
_BELOW_ATTR = BELOW_ATTR
_NB_BELOW_ATTR = NB_BELOW_ATTR
_DEVICE_BELOW_ATTR = DEVICE_BELOW_ATTR
_NB_DEVICE_BELOW_ATTR = NB_DEVICE_BELOW_ATTR
_DEVICE_ARRAY = _small.ARRAY_TYPE  # [cupy.ndarray] once a call has been staged with CuPy, else [None]
_STAGED_BELOW = staged_reason(BELOW_THRESHOLD)
_getattr = getattr
_record = counters.record
_host_nbytes = host_nbytes
_PREPARED = decide.Prepared
_FINISHED = Operation()
_FINISHED.complete()
_IDUP_BREAKS = IDUP_OVERLAP_BREAKS
_GATES: list[Any] = [None]
"""[(Bcast's, Reduce's, Allreduce's native gate)] once the fast-call extension is loaded, else [None]:
the fast path's test and count in C (adaptcoll.runtime.fastcalls, `native_gate`)."""
_NB_GATES: list[Any] = [None]
"""[(Ibcast's, Ireduce's, Iallreduce's native gate)] likewise, against the nonblocking thresholds."""


def _use_gates(module: Any) -> None:
    """The fast path's test and count in C from now on, for ndarrays and the specifications the
    extension sizes (the gates count where the lists did), and `host_nbytes`'s common forms sized there."""
    global _host_nbytes
    module.spec_facts(HOST_TYPES, PREDEFINED_SIZES, host_nbytes)
    _host_nbytes = module.host_nbytes
    # (without a CUDA driver every __cuda_array_interface__ pointer is host memory: sized in C then)
    _cuda.watch(lambda found: module.host_cai(isinstance(found, _cuda.NoDriver)))
    keys = ("bcast", "reduce", "allreduce")
    for found, attr, names in (
        (_GATES, _BELOW_ATTR, ("Bcast", "Reduce", "Allreduce")),
        (_NB_GATES, _NB_BELOW_ATTR, ("Ibcast", "Ireduce", "Iallreduce")),
    ):
        gates = []
        for name, key in zip(names, keys):
            gate = module.native_gate(attr, key, 0)
            counters.use_below_counter(name, gate)
            gates.append(gate)
        found[0] = tuple(gates)


fastcalls.when_loaded(_use_gates)


def native_forms(module: Any) -> dict[str, Any]:
    """{"Bcast": ..., "Reduce": ..., "Allreduce": ..., "Ibcast": ..., "Ireduce": ..., "Iallreduce": ...}: each
    routed collective with its native path in C (the extension's `native_iform`), to install as
    adaptcoll.Intracomm's methods once the extension is loaded (adaptcoll.comm). Each does this module's
    fast path (its gate; for an I-form `settle_setup` where IDUP_OVERLAP_BREAKS and the NativeRequest) and
    hands every other call, unchanged, to the Python form below."""
    gates, nb_gates = _GATES[0], _NB_GATES[0]
    if gates is None or nb_gates is None:  # (the gates come first: _use_gates is the extension's first listener here)
        return {}
    settle = settle_setup if _IDUP_BREAKS else None
    # (name, kind: 0 bcast / 1 reduce / 2 allreduce, mpi4py's method, the Python form, blocking)
    forms = (
        ("Bcast", 0, _MPI_BCAST, bcast, True),
        ("Reduce", 1, _MPI_REDUCE, reduce, True),
        ("Allreduce", 2, _MPI_ALLREDUCE, allreduce, True),
        ("Ibcast", 0, _MPI_IBCAST, ibcast, False),
        ("Ireduce", 1, _MPI_IREDUCE, ireduce, False),
        ("Iallreduce", 2, _MPI_IALLREDUCE, iallreduce, False),
    )
    made = {}
    for name, kind, native, python, blocking in forms:
        gate = (gates if blocking else nb_gates)[kind]
        made[name] = module.native_iform(kind, gate, native, python, None if blocking else settle, _IN_PLACE, blocking)
    return made


def start(name: str, decision: decide.Decision, comm: MPI.Intracomm, blocking: bool = False) -> Optional[Operation]:
    """Start a prepared call under the engine lock and count it; None (counted as native) for a Native.

    The start goes through the communicator's set-up queue (CommState.submit): before the set-up
    has completed it is queued, and the Operation returned completes with it. A Native carrying an
    error raises it instead. A prepared call with an error (a bad buffer on this rank) drains the
    others' data first, then raises it. `blocking`: the caller waits for the call at once, so a
    prepared call with a blocking form (`run`: device memory staged for native MPI) runs that, and a
    finished Operation comes back.
    """
    if isinstance(decision, Native):
        _record(name, decision.reason)
        if decision.note is not None:
            counters.note(name, decision.note)
        if decision.error is not None:
            raise decision.error
        return None
    if blocking and decision.run is not None:
        decision.run()
        _record(name, decision.native_reason)
        return _FINISHED
    st = decision.state
    if st is None:
        st = comm_state(comm)
    operation = st.submit(decision.start)  # takes the engine lock itself
    _count(name, decision)
    if decision.note is not None:
        counters.note(name, decision.note)
    if decision.error is not None:
        engine().wait_for(lambda: operation.done)
        raise decision.error
    return operation


def _run(name: str, decision: decide.Prepared) -> None:
    """A blocking served call's start and wait in one (Prepared.run_blocking), counted as `start` counts."""
    _count(name, decision)
    if decision.note is not None:
        counters.note(name, decision.note)
    run = decision.run_blocking
    assert run is not None
    run()


def _count(name: str, decision: decide.Prepared) -> None:
    """counters.record(name, native_reason, config label, engine) for a served call, through the
    decision's own counter for `name` (made at its first call: see Prepared.tallies)."""
    found = decision.tallies.get(name)
    if found is None:
        config = decision.config
        label = config.label if config is not None else None
        found = decision.tallies[name] = counters.tally(name, decision.native_reason, label, decision.engine)
    found[0] += 1


def _staged_request(name: str, comm: MPI.Intracomm, call: StagedCall) -> Request:
    """A nonblocking call on small CuPy arrays staged without a decision (adaptcoll.device.small), started
    as `start` starts the decision's staged call (the communicator's set-up queue) and counted alike."""
    with engine().lock:
        operation = comm_state(comm).submit(call.start)
    _record(name, _STAGED_BELOW)
    return Request(operation)


def wait(operation: Operation) -> None:
    """Progress until `operation` has completed on this rank; raises its error if it failed."""
    if not operation.done:
        engine().wait_for(lambda: operation.done)
    if operation.error is not None:
        raise operation.error


# -- broadcast ------------------------------------------------------------------------------------
def bcast(comm: MPI.Intracomm, buf: Any, root: Any = 0, name: str = "Bcast") -> None:
    """Broadcast `buf` from `root` (mpi4py's Bcast: signature and semantics); `name`: the counter.

    A small NumPy array goes to MPI in the fewest steps: this wrapper is what every small native call
    pays (0.22-0.30 us here with the test in C, bench/RESULTS.md), so its test comes first."""
    kind = type(buf)
    if kind is _NDARRAY:
        gates = _GATES[0]
        if gates is not None and name is _BCAST:
            if gates[0](comm, buf):  # (the test below and its count, in C)
                return _MPI_BCAST(comm, buf, root)
        elif buf.nbytes < _getattr(comm, _BELOW_ATTR, UNKNOWN)["bcast"]:
            if name is _BCAST:
                _BCAST_BELOW[0] += 1
            else:
                _BELOW[name] += 1
            return _MPI_BCAST(comm, buf, root)
    else:
        if kind is _DEVICE_ARRAY[0]:
            below = _getattr(comm, _DEVICE_BELOW_ATTR, UNKNOWN)["bcast"]
            if 0 < buf.nbytes < below and _small.bcast(comm, buf, root):
                _record(name, _STAGED_BELOW)
                return None
            nbytes = -1
        else:
            nbytes = _host_nbytes(buf)  # (sized once: in C where the extension is loaded)
        if 0 <= nbytes < _getattr(comm, _BELOW_ATTR, UNKNOWN)["bcast"]:
            _BELOW[name] += 1
            return _MPI_BCAST(comm, buf, root)
    key = _threads.enter(comm, name)
    try:
        decision = _bcast_decision(comm, buf, root, True)
        if type(decision) is _PREPARED and decision.run_blocking is not None and decision.error is None:
            return _run(name, decision)
        operation = start(name, decision, comm, blocking=True)
        if operation is None:
            return _MPI_BCAST(comm, buf, root)
        return wait(operation)
    finally:
        _threads.leave(key)


def ibcast(comm: MPI.Intracomm, buf: Any, root: Any = 0) -> Request:
    """comm.Ibcast(buf, root): an adaptcoll Request."""
    kind = type(buf)
    if kind is _DEVICE_ARRAY[0]:
        if 0 < buf.nbytes < _getattr(comm, _NB_DEVICE_BELOW_ATTR, UNKNOWN)["bcast"]:
            call = _small.staged("bcast", comm, (buf, root))
            if call is not None:
                return _staged_request("Ibcast", comm, call)
        nbytes = -1
    else:
        gates = _NB_GATES[0]
        if gates is not None and kind is _NDARRAY and gates[0](comm, buf):  # (the test below and its count, in C)
            if _IDUP_BREAKS:
                settle_setup(comm)
            return NativeRequest(_MPI_IBCAST(comm, buf, root), buf)
        nbytes = buf.nbytes if kind is _NDARRAY else _host_nbytes(buf)
    if 0 <= nbytes < _getattr(comm, _NB_BELOW_ATTR, UNKNOWN)["bcast"]:
        _BELOW["Ibcast"] += 1
        settle_setup(comm)
        return NativeRequest(_MPI_IBCAST(comm, buf, root), buf)
    key = _threads.enter(comm, "Ibcast")
    try:
        operation = start("Ibcast", _bcast_decision(comm, buf, root, False), comm)
        if operation is None:
            settle_setup(comm)
            return NativeRequest(_MPI_IBCAST(comm, buf, root), buf)
        return Request(operation)
    finally:
        _threads.leave(key)


# -- reduce ---------------------------------------------------------------------------------------
def reduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = _SUM, root: Any = 0) -> None:
    """Reduce to `root` (mpi4py's Reduce: signature and semantics; a non-root's recvbuf is ignored).
    A small NumPy array's test comes first, as in `bcast`."""
    kind = type(sendbuf)
    if kind is _NDARRAY and sendbuf is not recvbuf:
        gates = _GATES[0]
        if gates is not None:
            if gates[1](comm, sendbuf):
                return _MPI_REDUCE(comm, sendbuf, recvbuf, op, root)
        elif sendbuf.nbytes < _getattr(comm, _BELOW_ATTR, UNKNOWN)["reduce"]:
            _REDUCE_BELOW[0] += 1
            return _MPI_REDUCE(comm, sendbuf, recvbuf, op, root)
    else:
        data = recvbuf if sendbuf is _IN_PLACE else sendbuf
        kind = type(data)
        if kind is _NDARRAY:
            nbytes = data.nbytes
        elif kind is _DEVICE_ARRAY[0]:
            below = _getattr(comm, _DEVICE_BELOW_ATTR, UNKNOWN)["reduce"]
            if 0 < data.nbytes < below and _small.reduce(comm, sendbuf, recvbuf, op, root):
                _record("Reduce", _STAGED_BELOW)
                return None
            nbytes = -1
        else:
            nbytes = _host_nbytes(data)  # (sized once: in C where the extension is loaded)
        if 0 <= nbytes < _getattr(comm, _BELOW_ATTR, UNKNOWN)["reduce"]:
            _BELOW["Reduce"] += 1
            if sendbuf is recvbuf:
                sendbuf = decide.in_place_send_at_root(comm, sendbuf, recvbuf, root)
            return _MPI_REDUCE(comm, sendbuf, recvbuf, op, root)
    key = _threads.enter(comm, "Reduce")
    try:
        decision = _reduce_decision(comm, sendbuf, recvbuf, op, root, True)
        if type(decision) is _PREPARED and decision.run_blocking is not None and decision.error is None:
            return _run("Reduce", decision)
        operation = start("Reduce", decision, comm, blocking=True)
        if operation is None:
            native_send = decide.in_place_send_at_root(comm, sendbuf, recvbuf, root)
            return _MPI_REDUCE(comm, native_send, recvbuf, op, root)
        return wait(operation)
    finally:
        _threads.leave(key)


def ireduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = _SUM, root: Any = 0) -> Request:
    """comm.Ireduce(sendbuf, recvbuf, op, root): an adaptcoll Request (which keeps the buffers alive)."""
    data = recvbuf if sendbuf is _IN_PLACE else sendbuf
    kind = type(data)
    if kind is _DEVICE_ARRAY[0]:
        if 0 < data.nbytes < _getattr(comm, _NB_DEVICE_BELOW_ATTR, UNKNOWN)["reduce"]:
            call = _small.staged("reduce", comm, (sendbuf, recvbuf, op, root))
            if call is not None:
                return _staged_request("Ireduce", comm, call)
        nbytes = -1
    else:
        gates = _NB_GATES[0]
        if gates is not None and kind is _NDARRAY and gates[1](comm, data):  # (the test below and its count, in C)
            if _IDUP_BREAKS:
                settle_setup(comm)
            native_send = decide.in_place_send_at_root(comm, sendbuf, recvbuf, root) if sendbuf is recvbuf else sendbuf
            return NativeRequest(_MPI_IREDUCE(comm, native_send, recvbuf, op, root), (sendbuf, recvbuf))
        nbytes = data.nbytes if kind is _NDARRAY else _host_nbytes(data)
    if 0 <= nbytes < _getattr(comm, _NB_BELOW_ATTR, UNKNOWN)["reduce"]:
        _BELOW["Ireduce"] += 1
        settle_setup(comm)
        native_send = decide.in_place_send_at_root(comm, sendbuf, recvbuf, root)
        return NativeRequest(_MPI_IREDUCE(comm, native_send, recvbuf, op, root), (sendbuf, recvbuf))
    key = _threads.enter(comm, "Ireduce")
    try:
        operation = start("Ireduce", _reduce_decision(comm, sendbuf, recvbuf, op, root, False), comm)
        if operation is None:
            settle_setup(comm)
            native_send = decide.in_place_send_at_root(comm, sendbuf, recvbuf, root)
            return NativeRequest(_MPI_IREDUCE(comm, native_send, recvbuf, op, root), (sendbuf, recvbuf))
        return Request(operation)
    finally:
        _threads.leave(key)


# -- allreduce ------------------------------------------------------------------------------------
def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = _SUM) -> None:
    """Allreduce (mpi4py's signature; `sendbuf is recvbuf` is treated as IN_PLACE). A small NumPy
    array's test comes first, as in `bcast`."""
    kind = type(sendbuf)
    if kind is _NDARRAY:
        gates = _GATES[0]
        if gates is not None:
            if gates[2](comm, sendbuf):
                return _MPI_ALLREDUCE(comm, _IN_PLACE if sendbuf is recvbuf else sendbuf, recvbuf, op)
        elif sendbuf.nbytes < _getattr(comm, _BELOW_ATTR, UNKNOWN)["allreduce"]:
            _ALLREDUCE_BELOW[0] += 1
            return _MPI_ALLREDUCE(comm, _IN_PLACE if sendbuf is recvbuf else sendbuf, recvbuf, op)
    else:
        data = recvbuf if sendbuf is _IN_PLACE else sendbuf
        kind = type(data)
        if kind is _NDARRAY:
            nbytes = data.nbytes
        elif kind is _DEVICE_ARRAY[0]:
            below = _getattr(comm, _DEVICE_BELOW_ATTR, UNKNOWN)["allreduce"]
            if 0 < data.nbytes < below and _small.allreduce(comm, sendbuf, recvbuf, op):
                _record("Allreduce", _STAGED_BELOW)
                return None
            nbytes = -1
        else:
            nbytes = _host_nbytes(data)  # (sized once: in C where the extension is loaded)
        if 0 <= nbytes < _getattr(comm, _BELOW_ATTR, UNKNOWN)["allreduce"]:
            _BELOW["Allreduce"] += 1
            return _MPI_ALLREDUCE(comm, _IN_PLACE if sendbuf is recvbuf else sendbuf, recvbuf, op)
    key = _threads.enter(comm, "Allreduce")
    try:
        decision = _allreduce_decision(comm, sendbuf, recvbuf, op, True)
        if type(decision) is _PREPARED and decision.run_blocking is not None and decision.error is None:
            return _run("Allreduce", decision)
        operation = start("Allreduce", decision, comm, blocking=True)
        if operation is None:
            return _MPI_ALLREDUCE(comm, decide.in_place_send(sendbuf, recvbuf), recvbuf, op)
        return wait(operation)
    finally:
        _threads.leave(key)


def iallreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = _SUM) -> Request:
    """comm.Iallreduce(sendbuf, recvbuf, op): an adaptcoll Request (which keeps the buffers alive)."""
    data = recvbuf if sendbuf is _IN_PLACE else sendbuf
    kind = type(data)
    if kind is _DEVICE_ARRAY[0]:
        if 0 < data.nbytes < _getattr(comm, _NB_DEVICE_BELOW_ATTR, UNKNOWN)["allreduce"]:
            call = _small.staged("allreduce", comm, (sendbuf, recvbuf, op))
            if call is not None:
                return _staged_request("Iallreduce", comm, call)
        nbytes = -1
    else:
        gates = _NB_GATES[0]
        if gates is not None and kind is _NDARRAY and gates[2](comm, data):  # (the test below and its count, in C)
            if _IDUP_BREAKS:
                settle_setup(comm)
            native_send = _IN_PLACE if sendbuf is recvbuf else sendbuf
            return NativeRequest(_MPI_IALLREDUCE(comm, native_send, recvbuf, op), (sendbuf, recvbuf))
        nbytes = data.nbytes if kind is _NDARRAY else _host_nbytes(data)
    if 0 <= nbytes < _getattr(comm, _NB_BELOW_ATTR, UNKNOWN)["allreduce"]:
        _BELOW["Iallreduce"] += 1
        settle_setup(comm)
        native_send = _IN_PLACE if sendbuf is recvbuf else sendbuf
        return NativeRequest(_MPI_IALLREDUCE(comm, native_send, recvbuf, op), (sendbuf, recvbuf))
    key = _threads.enter(comm, "Iallreduce")
    try:
        operation = start("Iallreduce", _allreduce_decision(comm, sendbuf, recvbuf, op, False), comm)
        if operation is None:
            settle_setup(comm)
            native_send = decide.in_place_send(sendbuf, recvbuf)
            return NativeRequest(_MPI_IALLREDUCE(comm, native_send, recvbuf, op), (sendbuf, recvbuf))
        return Request(operation)
    finally:
        _threads.leave(key)


# -- decisions, remembered per call signature (adaptcoll.decision.cache) -----------------------------
def _bcast_decision(comm: MPI.Intracomm, buf: Any, root: Any, blocking: bool) -> decide.Decision:
    if type(buf) is not _NDARRAY or type(root) is not int:
        return decide.bcast(comm, buf, root, blocking=blocking)
    key = ("bcast", blocking, root, id(buf))
    return _remembered(comm, key, (buf,), decide.bcast, (comm, buf, root), blocking)


def _reduce_decision(
    comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, root: Any, blocking: bool
) -> decide.Decision:
    ok = op_key(op)
    if ok is None or type(root) is not int or type(recvbuf if sendbuf is _IN_PLACE else sendbuf) is not _NDARRAY:
        return decide.reduce(comm, sendbuf, recvbuf, op, root, blocking=blocking)
    key = ("reduce", blocking, root, ok, id(sendbuf), id(recvbuf))
    return _remembered(comm, key, (sendbuf, recvbuf), decide.reduce, (comm, sendbuf, recvbuf, op, root), blocking)


def _allreduce_decision(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, blocking: bool) -> decide.Decision:
    ok = op_key(op)
    if ok is None or type(recvbuf) is not _NDARRAY:
        return decide.allreduce(comm, sendbuf, recvbuf, op, blocking=blocking)
    key = ("allreduce", blocking, ok, id(sendbuf), id(recvbuf))
    return _remembered(comm, key, (sendbuf, recvbuf), decide.allreduce, (comm, sendbuf, recvbuf, op), blocking)


def _label(decision: Any) -> Optional[str]:
    """The configuration label stats() counts a served call under."""
    return decision.config.label if decision.config is not None else None
