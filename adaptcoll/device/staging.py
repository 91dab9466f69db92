"""Host staging for device segments when MPI cannot read device memory (not CUDA-aware).

`StagingTransport` wraps another transport: a device segment is copied into a pinned host buffer
(asynchronously, polled by the engine) before its send is posted, and a received host buffer is copied
into the device segment before the protocol hears of the arrival. Protocols are unchanged: they see a
transport whose completions simply take a little longer. Copies of different segments overlap with
each other and with MPI transfers.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..runtime.transport import Callback, Poll, Transport

__all__ = ["Stager", "StagingTransport"]


class Stager(Protocol):
    """Pinned buffers and asynchronous copies (adaptcoll.backends.cupy_backend.HostStaging is one)."""

    def acquire(self, count: int, dtype: Any) -> Any: ...

    def release(self, host: Any) -> None: ...

    def to_host(self, device_array: Any, host: Any = None) -> tuple[Any, Poll]: ...

    def to_device(self, host: Any, device_array: Any) -> Poll: ...


class StagingTransport:
    """A Transport for device segments over a transport that moves host memory only."""

    def __init__(self, inner: Transport, stager: Stager) -> None:
        self._inner = inner
        self._stager = stager
        self.rank = inner.rank
        self.size = inner.size

    def isend(self, buf: Any, dest: int, tag: int, on_done: Callback, synchronous: bool = False) -> None:
        stager, inner = self._stager, self._inner
        host, copied = stager.to_host(buf, stager.acquire(buf.size, buf.dtype))

        def sent() -> None:
            stager.release(host)
            on_done()

        inner.watch(copied, lambda: inner.isend(host, dest, tag, sent, synchronous))

    def irecv(self, buf: Any, source: int, tag: int, on_done: Callback) -> None:
        stager, inner = self._stager, self._inner
        host = stager.acquire(buf.size, buf.dtype)

        def landed() -> None:
            stager.release(host)
            on_done()

        def arrived() -> None:
            inner.watch(stager.to_device(host, buf), landed)

        inner.irecv(host, source, tag, arrived)

    def watch(self, poll: Poll, on_done: Callback) -> None:
        self._inner.watch(poll, on_done)
