"""Network noise: pairs of ranks exchange large messages in a background thread (like netgauge's collvsnoise).

Runs on a private duplicate of the communicator, so its messages never match the application's.
start() and stop() are collective over the communicator. Each round both partners send their stop
flag in the first byte of the message, so both leave after the same round and stop() cannot hang.
mpi4py is imported only in start(), so `import adaptcoll.noise` stays MPI-free.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NetworkNoise", "NetworkNoiseStats", "default_pairs"]

_TAG = 0x4E4F  # "NO"


def default_pairs(size: int) -> list[tuple[int, int]]:
    """Pair rank i with rank i + size // 2 (crosses nodes when ranks are placed in blocks)."""
    half = size // 2
    return [(i, i + half) for i in range(half)]


@dataclass(frozen=True)
class NetworkNoiseStats:
    """What this rank's noise thread did between start() and stop()."""

    partner: int | None
    rounds: int
    bytes_sent: int
    bytes_received: int
    elapsed_s: float
    payload_errors: int

    @property
    def bandwidth_Bps(self) -> float:
        """Bytes sent plus received per second."""
        return (self.bytes_sent + self.bytes_received) / self.elapsed_s if self.elapsed_s > 0 else 0.0


class NetworkNoise:
    """Background exchanges of `nbytes` between `pairs` of ranks of `comm` (a rank is in at most one pair).

    pairs: a list of (a, b) rank pairs, an int k for the first k default pairs, or None for all
    default pairs. poll_interval_s: 0 polls with Testall + sched_yield; > 0 sleeps that long between
    polls (less CPU and GIL pressure on the rank, slower exchanges). Ranks outside every pair only
    take part in the collective start/stop.
    """

    def __init__(
        self,
        comm: Any,
        pairs: Sequence[tuple[int, int]] | int | None = None,
        nbytes: int = 10 << 20,
        poll_interval_s: float = 0.0,
    ) -> None:
        size, rank = comm.Get_size(), comm.Get_rank()
        if pairs is None:
            pairs = default_pairs(size)
        elif isinstance(pairs, int):
            pairs = default_pairs(size)[:pairs]
        self.pairs = self._validated(pairs, size)
        if nbytes < 1:
            raise ValueError(f"nbytes must be >= 1, got {nbytes}")
        self.comm = comm
        self.rank = rank
        self.nbytes = int(nbytes)
        self.poll_interval_s = float(poll_interval_s)
        self.partner = next((b if a == rank else a for a, b in self.pairs if rank in (a, b)), None)
        self.stats: NetworkNoiseStats | None = None
        self._dup: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._counts = [0, 0, 0, 0]  # rounds, bytes sent, bytes received, payload errors
        self._started_at = 0.0

    @staticmethod
    def _validated(pairs: Iterable[tuple[int, int]], size: int) -> list[tuple[int, int]]:
        seen: set[int] = set()
        out = []
        for pair in pairs:
            a, b = (int(r) for r in pair)
            if not (0 <= a < size and 0 <= b < size) or a == b:
                raise ValueError(f"bad pair {pair!r} for a communicator of size {size}")
            if a in seen or b in seen:
                raise ValueError(f"rank in more than one pair: {pair!r}")
            seen.update((a, b))
            out.append((a, b))
        return out

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._dup is not None

    def start(self) -> NetworkNoise:
        """Collective: duplicate the communicator and start this rank's exchange thread (if paired)."""
        from mpi4py import MPI  # here, not at the top: importing adaptcoll.noise must not initialize MPI

        if self._dup is not None:
            raise RuntimeError("NetworkNoise already started")
        if self.partner is not None and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise RuntimeError("NetworkNoise needs MPI_THREAD_MULTIPLE (mpi4py's default thread level)")
        self._dup = self.comm.Dup()
        self._stop.clear()
        self._error = None
        self._counts = [0, 0, 0, 0]
        self._started_at = time.perf_counter()
        if self.partner is not None:
            self._thread = threading.Thread(target=self._run, args=(MPI,), name="adaptcoll-network-noise", daemon=True)
            self._thread.start()
        return self

    def _run(self, MPI: Any) -> None:
        try:
            self._exchange_loop(MPI)
        except BaseException as exc:  # surfaced by stop()
            self._error = exc

    def _exchange_loop(self, MPI: Any) -> None:
        partner, n = self.partner, self.nbytes
        assert partner is not None  # only paired ranks run the exchange thread
        send = bytearray([self.rank & 0xFF]) * n
        recv = bytearray(n)
        expected = partner & 0xFF
        counts = self._counts
        while True:
            stopping = self._stop.is_set()
            send[0] = 1 if stopping else 0
            send[-1] = (counts[0] + 7 * self.rank) & 0xFF if n > 1 else send[-1]
            reqs = [self._dup.Irecv(recv, partner, _TAG), self._dup.Isend(send, partner, _TAG)]
            while not MPI.Request.Testall(reqs):
                if self.poll_interval_s > 0:
                    time.sleep(self.poll_interval_s)
                else:
                    os.sched_yield()
            if (n > 1 and recv[-1] != (counts[0] + 7 * partner) & 0xFF) or (n > 2 and recv[n // 2] != expected):
                counts[3] += 1
            counts[0] += 1
            counts[1] += n
            counts[2] += n
            if stopping or recv[0]:
                return

    def stop(self) -> NetworkNoiseStats:
        """Collective: finish the current round with the partner, join the thread, free the duplicate."""
        if self._dup is None:
            if self.stats is None:
                raise RuntimeError("NetworkNoise was never started")
            return self.stats
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        elapsed = time.perf_counter() - self._started_at
        dup, self._dup = self._dup, None
        dup.Free()
        rounds, sent, received, errors = self._counts
        self.stats = NetworkNoiseStats(self.partner, rounds, sent, received, elapsed, errors)
        if self._error is not None:
            raise RuntimeError("network noise thread failed") from self._error
        return self.stats

    def __enter__(self) -> NetworkNoise:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
