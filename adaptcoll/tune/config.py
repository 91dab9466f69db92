"""What one call of a collective uses: native MPI or one adaptcoll configuration (no MPI here).

`ServeConfig` is what a tuning-table entry or the shipped rule chooses when adaptcoll serves a size
(algorithm, segment size, segment cap, Allreduce roots). `CallConfig` is the complete per-call
configuration the decision layer uses, after explicit settings have been applied over the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..runtime import settings
from ..runtime.native import Native

__all__ = ["ServeConfig", "CallConfig", "format_bytes"]


def format_bytes(n: int) -> str:
    """65536 -> '64K', 1048576 -> '1M', 1000 -> '1000' (exact binary multiples only)."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


@dataclass(frozen=True)
class ServeConfig:
    """An adaptcoll configuration for one collective: `algorithm` is an algorithm setting (a tree kind
    with optional ':k=v' parameters, or any algorithm adaptcoll knows), `roots` is Allreduce's number of
    roots (0: one per rank; ignored by Bcast and Reduce)."""

    algorithm: str = "binomial"
    segment_size: int = 512 * 1024
    max_segments: int = 4
    roots: int = 0

    def label(self, collective: str = "") -> str:
        """A short readable name, e.g. 'pipeline seg=512K max_segments=0'."""
        text = f"{self.algorithm} seg={format_bytes(self.segment_size)} max_segments={self.max_segments}"
        if collective == "allreduce":
            text += f" roots={self.roots or 'all'}"
        return text

    def to_json(self) -> dict[str, Any]:
        """The table's JSON form."""
        return {
            "algorithm": self.algorithm,
            "segment_size": self.segment_size,
            "max_segments": self.max_segments,
            "roots": self.roots,
        }

    def overrides(self, collective: str) -> dict[str, Any]:
        """The explicit settings (configure() keywords) that make `collective` use exactly this config
        (Allgather / Reduce-scatter: the ring's parameters in the algorithm setting)."""
        if collective in settings.BLOCK_COLLECTIVES:
            params = f"segment_size={self.segment_size},max_segments={self.max_segments}"
            return {f"{collective}_algorithm": f"{self.algorithm}:{params}"}
        out: dict[str, Any] = {
            f"{collective}_algorithm": self.algorithm,
            f"{collective}_segment_size": self.segment_size,
            "max_segments": self.max_segments,
        }
        if collective == "allreduce":
            out["allreduce_roots"] = self.roots
        return out


@dataclass(frozen=True)
class CallConfig:
    """The configuration one call uses, chosen once per (communicator, collective, size band).

    `serve`: adaptcoll serves the call (else `native` says why it goes native). `source` says where the
    tuned fields came from ('table', 'table~4' = the nearest measured communicator size, 4 ranks,
    'defaults', with '+settings' when explicit settings replaced some, or 'settings' alone).
    """

    serve: bool
    algorithm: str
    segment_size: int
    max_segments: int
    roots: int
    send_window: int
    recv_window: int
    sync_sends: str
    reproducible: bool
    source: str
    native: Optional[Native] = None
    label: str = ""
