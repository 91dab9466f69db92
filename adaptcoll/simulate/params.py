"""The simulator's cost model: LogGP network parameters plus the CPU costs of folds and events.

One frozen value, `CostParams`, in SI units (seconds, seconds per byte, bytes). A parameters file is
JSON holding some of these fields (the others keep their defaults) plus free-form "source" and "fit"
records; `load_params` rejects a bad file with a ValueError that names the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from .network import LINK_POLICIES

__all__ = [
    "CostParams",
    "DEFAULT_PARAMS",
    "PARAM_DOCS",
    "TRANSFERS",
    "FORMAT",
    "load_params",
    "save_params",
    "params_from_dict",
    "NODE_LEVEL_FIELDS",
]

FORMAT = "adaptcoll.simulate.params/1"
"""The value of the "format" key of a parameters file."""


@dataclass(frozen=True)
class CostParams:
    """LogGP (L, o, g, G) with one CPU per rank; see PARAM_DOCS for each field.

    adaptcoll's protocols pay `o` per isend/irecv they post and `engine` per completion callback
    (Python: mpi4py call, Testsome, protocol code); lock-step baselines run inside the MPI library
    and pay `native_o` per message and nothing per completion. Folds cost `fold` per byte for both.
    """

    L: float = 2.0e-6
    o: float = 5.9e-6
    g: float = 0.0
    G: float = 1.0e-10
    fold: float = 1.5e-10
    engine: float = 3.1e-6
    native_o: float = 0.5e-6
    eager: int = 65536
    transfer: str = "nic"
    ranks_per_node: int = 1
    copy: float = 0.0
    links: str = "fair"
    shm_copy: float = 1.1e-10
    shm_flag: float = 1.0e-6
    node_bw: float = 0.0
    large_from: int = 0
    large_cost: float = 1.0
    fault: float = 0.0
    fault_from: int = 32 << 20
    copy_order: str = "ready"
    copy_contention: float = 0.0
    call: float = 0.0

    def __post_init__(self) -> None:
        if self.transfer not in TRANSFERS:
            raise ValueError(f"transfer must be one of {', '.join(TRANSFERS)}, got {self.transfer!r}")
        if self.copy_order not in COPY_ORDERS:
            raise ValueError(f"copy_order must be one of {', '.join(COPY_ORDERS)}, got {self.copy_order!r}")
        if self.links not in LINK_POLICIES:
            raise ValueError(f"links must be one of {', '.join(LINK_POLICIES)}, got {self.links!r}")
        if self.ranks_per_node < 1:
            raise ValueError(f"ranks_per_node must be >= 1, got {self.ranks_per_node!r}")
        if not self.copy_contention >= 0.0:
            raise ValueError(f"copy_contention must be >= 0 (an exponent), got {self.copy_contention!r}")
        if not self.call >= 0.0:
            raise ValueError(f"call must be >= 0 (seconds of CPU per call and rank), got {self.call!r}")
        if self.large_cost < 1.0:
            raise ValueError(f"large_cost must be >= 1 (a factor on copy and fold per byte), got {self.large_cost!r}")

    def to_dict(self, node_level: bool = True) -> dict[str, Union[float, int, str]]:
        """The fields as a plain dict (for JSON); `node_level=False` leaves out the shared-memory node
        level's fields (a report of a run without the node level, where they play no part)."""
        out = dataclasses.asdict(self)
        if not node_level:
            for name in NODE_LEVEL_FIELDS:
                del out[name]
        if not self.node_bw:  # unlimited, as before the field existed: reports and digests stay as they were
            del out["node_bw"]
        if not self.large_from:  # off, as before the fields existed
            del out["large_from"], out["large_cost"]
        if not self.fault:  # off, as before the fields existed
            del out["fault"], out["fault_from"]
        if self.copy_order == "ready":  # as before the field existed
            del out["copy_order"]
        if not self.copy_contention:  # off, as before the field existed
            del out["copy_contention"]
        if not self.call:  # none, as before the field existed
            del out["call"]
        return out


PARAM_DOCS: dict[str, str] = {
    "L": "network latency per message (s)",
    "o": "CPU overhead of posting one send or receive from adaptcoll (mpi4py call + MPI) (s)",
    "g": "minimum gap between two messages leaving one rank (s)",
    "G": "time per byte on a rank's link, out and in (s/byte); 1/G is the bandwidth",
    "fold": "CPU time per byte of one reduction fold (s/byte)",
    "engine": "CPU time adaptcoll's engine and protocol add per completion event (s)",
    "native_o": "CPU overhead per message inside the MPI library, for lock-step baselines (s)",
    "eager": "messages up to this many bytes go eagerly; larger ones (and synchronous sends) rendezvous",
    "transfer": "'nic': links move rendezvous data (RDMA; the receiver's CPU only starts it) or 'cpu': the "
    "receiver's CPU copies it (shared memory)",
    "ranks_per_node": "ranks sharing one node: they share its link (NIC), and the receiver's CPU copies messages "
    "between them (shared memory)",
    "copy": "CPU time per byte of a shared-memory copy (s/byte); 0 means G",
    "links": "'fair': messages on one link share it equally (RDMA NICs interleave transfers), 'fifo': one at a "
    "time, first ready first served, or 'pair': fair between sender-receiver pairs, one pair's messages in order "
    "(one RDMA queue pair per pair); 'fair' or 'pair' on a described network",
    "shm_copy": "shared-memory node level (shm, topo:intra=shm): CPU time per byte of a copy into or out of a "
    "slot (s/byte); its folds cost `fold`",
    "shm_flag": "shared-memory node level: time until a slot flag stored by one rank is acted on by the others of "
    "its node (cache-line transfer and the wait for their next engine sweep) (s)",
    "node_bw": "memory bandwidth one node's concurrent shared-memory copies share (bytes/s): a copy that starts "
    "while k-1 others run on its node moves at most node_bw/k; 0: unlimited (each copy at 1/copy)",
    "copy_contention": "how much a node's concurrent shared-memory copies slow one another beyond node_bw's equal "
    "share: a copy that starts while k-1 others run on its node costs k**copy_contention times its own time "
    "(memory and cache contention: two copies at once each run slower than one alone, long before the node's "
    "bandwidth is used up); 0: off",
    "large_from": "a shared-memory copy or a fold of more than this many bytes at once streams through memory, out "
    "of the caches: it costs `large_cost` times `copy` (or `fold`) per byte (bytes; 0: off)",
    "large_cost": "the factor (>= 1) on a large copy's or fold's cost per byte (see large_from)",
    "fault": "MPICH's lock-step baselines: CPU time per byte of a temporary buffer of at least `fault_from` bytes "
    "that MPICH allocates for one call and touches: glibc maps such a block afresh at each call and the kernel "
    "faults in and zeroes its pages on first touch (s/byte; 0: off)",
    "fault_from": "see fault: the smallest temporary that pays it (bytes; default 32 MiB, glibc's largest "
    "dynamic mmap threshold on 64-bit Linux: every larger malloc is a fresh mmap)",
    "call": "CPU time each rank's part of one adaptcoll call costs before its protocol starts (the served call's "
    "fixed cost: decision, plan, protocol set-up, the wait's return; about 40-75 us on the Python engine of "
    "2026-11-23, 2-4 us on the compiled one, at 2 ranks); lock-step baselines pay none (s; 0: none)",
    "copy_order": "when a receiver's CPU makes a shared-memory copy (transfer 'cpu', ranks of one node): 'ready': "
    "as soon as the message is ready, booked after whatever its CPU does, ahead of completions that come "
    "meanwhile; 'poll': only once the CPU is free and no completion waits for it (its engine runs the callbacks "
    "of finished receives, e.g. forwards a segment, before its next poll makes the next copy)",
}

NODE_LEVEL_FIELDS = ("shm_copy", "shm_flag")
"""Fields only the shared-memory node level uses (reports of other runs leave them out)."""

TRANSFERS = ("nic", "cpu")

COPY_ORDERS = ("ready", "poll")

DEFAULT_PARAMS = CostParams()
"""Built-in defaults, a cluster node as seen by one rank: the CPU costs (o, engine, fold) of the 16-core
node's calibration, rounded; a 10 GB/s RDMA link per rank with 2 us latency; the shared-memory node level's
slot copies at 9 GB/s and flags seen 1 us after their store (docs/simulate.md)."""

_FIELDS = {f.name: f for f in dataclasses.fields(CostParams)}
_META_KEYS = ("format", "source", "fit", "units", "comment")


def _field_value(name: str, value: Any, where: str) -> Union[float, int, str]:
    """One field checked: a finite number >= 0 (eager, ranks_per_node: whole numbers; transfer, links: a name)."""
    if name in ("transfer", "links", "copy_order"):
        allowed = {"transfer": TRANSFERS, "links": LINK_POLICIES, "copy_order": COPY_ORDERS}[name]
        if value not in allowed:
            choices = " or ".join(map(repr, allowed))
            raise ValueError(f"{where}: field {name!r} must be {choices}, got {value!r}")
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: field {name!r} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: field {name!r} must be a finite number >= 0, got {value!r}")
    if name in ("eager", "ranks_per_node", "large_from", "fault_from"):
        if value != int(value) or (name == "ranks_per_node" and value < 1):
            raise ValueError(f"{where}: field {name!r} must be a whole number (ranks_per_node >= 1), got {value!r}")
        return int(value)
    return float(value)


def params_from_dict(raw: Any, where: str = "parameters", base: CostParams = DEFAULT_PARAMS) -> CostParams:
    """CostParams from a dict (unknown or bad fields raise ValueError naming `where` and the field)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a JSON object with fields {', '.join(_FIELDS)}, got {type(raw).__name__}")
    fmt = raw.get("format", FORMAT)
    if fmt != FORMAT:
        raise ValueError(f"{where}: field 'format' must be {FORMAT!r}, got {fmt!r}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _META_KEYS:
            continue
        if key not in _FIELDS:
            raise ValueError(f"{where}: unknown field {key!r}; valid fields: {', '.join(_FIELDS)}")
        values[key] = _field_value(key, value, where)
    return dataclasses.replace(base, **values)


def load_params(path: Union[str, Path]) -> CostParams:
    """Read a parameters file (JSON); ValueError naming the file and the bad field."""
    where = f"parameters file {str(path)!r}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return params_from_dict(raw, where)


def save_params(path: Union[str, Path], params: CostParams, source: Any = None, fit: Any = None) -> None:
    """Write a parameters file: the fields, the units, and where the values came from."""
    doc: dict[str, Any] = {"format": FORMAT, **params.to_dict()}
    doc["units"] = "seconds; G, copy and fold in seconds per byte; eager in bytes"
    if source is not None:
        doc["source"] = source
    if fit is not None:
        doc["fit"] = fit
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
