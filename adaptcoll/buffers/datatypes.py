"""MPI datatypes reduced to what MPI requires to match across ranks: the type signature.

Ranks may describe the same message with different legal forms (`[b, 1000, MPI.DOUBLE]` on one rank,
`[b, 1, MPI.DOUBLE.Create_contiguous(1000)]` on another): only the sequence of basic types (the type
signature) must match. `signature(datatype)` reduces a datatype to that: its one predefined basic type
(or None when the signature mixes types, or its basic type has no NumPy equivalent), how many basic
elements one item holds, and whether those elements lie in memory back to back in signature order
(`dense`: then the message is a plain 1-D view of the buffer; otherwise it is packed into, or unpacked
from, a contiguous scratch array through MPI itself, see `mpi_copy`). Every rank passing a matching
signature reaches the same `base` and element count, whatever form it used, so decisions taken from
the signature are the same on every rank. Results for derived datatypes are cached as an MPI attribute
of the datatype (dropped by MPI when the datatype is freed).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

__all__ = ["Signature", "signature", "numpy_dtype", "mpi_copy"]


@dataclass(frozen=True)
class Signature:
    """`base`: the single predefined type of the type map (None: mixed or not a NumPy type);
    `per_item`: basic elements per item; `dense`: the elements of one item are consecutive in memory,
    in signature order, starting at the true lower bound."""

    base: Optional[MPI.Datatype]
    per_item: int
    dense: bool


_DTYPE_BY_HANDLE: dict[int, np.dtype] = {}
_MIXED = Signature(None, 0, False)


def numpy_dtype(datatype: MPI.Datatype) -> Optional[np.dtype]:
    """The NumPy dtype of a predefined MPI datatype (None for derived or unmappable ones)."""
    handle = datatype.handle
    found = _DTYPE_BY_HANDLE.get(handle)
    if found is None:
        if not datatype.is_predefined:
            return None
        try:
            found = np.dtype(datatype.tocode())
        except (KeyError, ValueError, TypeError):
            return None
        if found.itemsize != datatype.Get_size() or found.itemsize == 0:
            return None
        _DTYPE_BY_HANDLE[handle] = found
    return found


_KEYVAL = MPI.Datatype.Create_keyval()


def signature(datatype: MPI.Datatype) -> Signature:
    """The Signature of `datatype` (predefined or derived, committed or not)."""
    if datatype.is_predefined:
        return Signature(datatype, 1, True) if numpy_dtype(datatype) is not None else _MIXED
    cached = datatype.Get_attr(_KEYVAL)
    if isinstance(cached, Signature):
        return cached
    found = _walk(datatype)
    datatype.Set_attr(_KEYVAL, found)
    return found


def _walk(datatype: MPI.Datatype) -> Signature:
    """Decode one derived datatype (recursively) into its Signature."""
    oldtype, combiner, params = datatype.decode()
    children = list(params["datatypes"]) if combiner == "STRUCT" else [oldtype]
    try:
        sigs = [signature(c) for c in children]
        bases = {s.base.handle for s in sigs if s.base is not None}
        if any(s.base is None and c.Get_size() > 0 for s, c in zip(sigs, children)) or len(bases) > 1:
            return _MIXED
        if not bases:  # nothing but empty types: no basic element at all
            return _MIXED
        base = next(s.base for s in sigs if s.base is not None)
        assert base is not None
        size = datatype.Get_size()
        per_item = size // base.Get_size()
        return Signature(base, per_item, _dense(combiner, params, children, sigs))
    finally:
        for child in children:
            if not child.is_predefined:
                child.Free()


def _dense(combiner: str, params: dict[str, Any], children: Sequence[MPI.Datatype], sigs: Sequence[Signature]) -> bool:
    """Whether the elements of one item are consecutive in signature order (see Signature)."""
    if combiner in ("DUP", "RESIZED"):
        return sigs[0].dense
    child = children[0]
    extent = child.Get_extent()[1]
    if combiner == "CONTIGUOUS":
        return _blocks([(0, params["count"])], child, sigs[0])
    if combiner in ("VECTOR", "HVECTOR"):
        count, length, stride = params["count"], params["blocklength"], params["stride"]
        step = stride * extent if combiner == "VECTOR" else stride
        if count <= 1 or length == 0:
            return _blocks([(0, length * count)], child, sigs[0]) if count == 1 or length == 0 else True
        return _blocks([(0, length), (step, length)], child, sigs[0])  # the rest repeat this step
    if combiner in ("INDEXED", "HINDEXED", "INDEXED_BLOCK", "HINDEXED_BLOCK"):
        displs = params["displacements"]
        lengths = params.get("blocklengths") or [params.get("blocklength", 0)] * len(displs)
        scale = extent if combiner in ("INDEXED", "INDEXED_BLOCK") else 1
        return _blocks([(d * scale, n) for d, n in zip(displs, lengths)], child, sigs[0])
    if combiner == "STRUCT":
        start = None
        for disp, n, sub, sig in zip(params["displacements"], params["blocklengths"], children, sigs):
            if n == 0 or sub.Get_size() == 0:
                continue
            if not sig.dense or (n > 1 and sub.Get_extent()[1] != sub.Get_size()):
                return False
            here = disp + sub.Get_true_extent()[0]
            if start is not None and here != start:
                return False
            start = here + n * sub.Get_size()
        return True
    return False  # SUBARRAY, DARRAY, ...: packed through MPI


def _blocks(blocks: Sequence[tuple[int, int]], child: MPI.Datatype, sig: Signature) -> bool:
    """Whether blocks of (byte displacement, item count) of `child` are back to back, in order."""
    size = child.Get_size()
    if size == 0:
        return True
    if not sig.dense:
        return False
    true_lb = child.Get_true_extent()[0]
    abut = child.Get_extent()[1] == size
    start = None
    for disp, n in blocks:
        if n == 0:
            continue
        if n > 1 and not abut:
            return False
        here = disp + true_lb
        if start is not None and here != start:
            return False
        start = here + n * size
    return True


_self_lock = threading.Lock()
_self_comm: Optional[MPI.Intracomm] = None
_tags = itertools.count()


def _private_self() -> MPI.Intracomm:
    """A private duplicate of COMM_SELF for local copies (never matches a user message)."""
    global _self_comm
    if _self_comm is None:
        with _self_lock:
            if _self_comm is None:
                _self_comm = MPI.Intracomm(MPI.COMM_SELF).Dup()
    return _self_comm


def mpi_copy(source: Any, target: Any) -> None:
    """Copy message `source` into message `target` (any mpi4py buffer specifications with matching
    signatures) through MPI on this process, so derived datatypes and BOTTOM addressing are read and
    written exactly as MPI would (MPI_Pack/Unpack semantics without a packed format to assume)."""
    comm = _private_self()
    tag = next(_tags) % 32768
    send = comm.Isend(source, 0, tag)
    try:
        recv = comm.Irecv(target, 0, tag)
    except BaseException:
        send.Cancel()
        send.Wait()
        raise
    MPI.Request.Waitall([send, recv])
