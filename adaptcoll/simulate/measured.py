"""Reading measurements for calibration and validation: bench/osu.py JSON, bench/sweep.py summaries,
bench/engine_cost.py output, ping-pong JSON lines and bench/pair_order.py JSON.

Every collective timing becomes a `Measurement` (collective, ranks, bytes, implementation, the
adaptcoll settings it ran under, median time, the noise spec of its run). osu.py files record each
implementation's full settings; sweep summaries only its label, whose overrides are applied to the
shipped defaults (as osu.py applies them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..runtime import settings as settings_mod

__all__ = [
    "Measurement",
    "EngineCost",
    "read_measurements",
    "read_engine_cost",
    "read_pingpong",
    "read_pair_order",
    "impl_settings",
]

_COLLECTIVES = ("bcast", "reduce", "allreduce")


@dataclass(frozen=True)
class Measurement:
    """One measured (collective, ranks, size, implementation) median, with what it ran under."""

    collective: str
    ranks: int
    size: int
    impl: str
    kind: str  # "adaptcoll" or "native"
    settings: Optional[settings_mod.Settings]
    median_us: float
    noise: Optional[str]
    source: str


@dataclass(frozen=True)
class EngineCost:
    """bench/engine_cost.py --mpi: what adaptcoll adds per segment event and the bare loop's cost per message."""

    adds_us: float
    bare_us: float


def impl_settings(label: str, recorded: Optional[dict[str, Any]] = None) -> Optional[settings_mod.Settings]:
    """The adaptcoll Settings of an osu.py implementation label ('adaptcoll:k=v;k=v'), None for native."""
    kind, _, rest = label.partition(":")
    if kind != "adaptcoll":
        return None
    if recorded:
        known = {k: v for k, v in recorded.items() if k in settings_mod.ENV_VARS}
        return settings_mod.Settings(**known)
    env: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(";"))):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq:
            raise ValueError(f"implementation {label!r}: expected KEY=VALUE, got {item!r}")
        keys = [f"{c}_{key}" for c in _COLLECTIVES] if key in ("algorithm", "segment_size") else [key]
        for k in keys:
            if k not in settings_mod.ENV_VARS:
                raise ValueError(f"implementation {label!r}: unknown setting {k!r}")
            env[settings_mod.ENV_VARS[k]] = value
    return settings_mod.from_environ(env)


def _kind(label: str) -> str:
    return "adaptcoll" if label.split(":")[0] == "adaptcoll" else "native"


def read_measurements(path: Union[str, Path]) -> list[Measurement]:
    """Measurements from an osu.py JSON file or a sweep.py summary (blocking collectives only)."""
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"measurements {where!r}: cannot read it ({exc})") from None
    out: list[Measurement] = []
    if isinstance(doc, dict) and "results" in doc and "ranks" in doc:
        recorded = {i["label"]: i.get("settings") for i in doc.get("impls", [])}
        noise = (doc.get("options") or {}).get("noise")
        for row in doc["results"]:
            if row.get("collective") not in _COLLECTIVES or "median_us" not in row:
                continue
            label = row["impl"]
            out.append(
                Measurement(
                    row["collective"],
                    int(doc["ranks"]),
                    int(row["size"]),
                    label,
                    _kind(label),
                    impl_settings(label, recorded.get(label)),
                    float(row["median_us"]),
                    noise,
                    where,
                )
            )
        return out
    if isinstance(doc, dict) and "rows" in doc:
        for row in doc["rows"]:
            if row.get("collective") not in _COLLECTIVES or "median_us" not in row:
                continue
            label = row["impl"]
            out.append(
                Measurement(
                    row["collective"],
                    int(row["ranks"]),
                    int(row["size"]),
                    label,
                    _kind(label),
                    impl_settings(label),
                    float(row["median_us"]),
                    row.get("noise"),
                    where,
                )
            )
        return out
    raise ValueError(f"measurements {where!r}: neither a bench/osu.py JSON file nor a bench/sweep.py summary")


_ADDS = re.compile(r"adaptcoll adds\s+(.*?)per segment event")
_BARE = re.compile(r"bare (?:mpi4py|C) loop costs\s+(.*?)per message")
_US = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*us")


def read_engine_cost(path: Union[str, Path], engine: str = "python") -> EngineCost:
    """Parse bench/engine_cost.py --mpi output (the per-rank figures are averaged): the line of `engine`
    ("python engine: ...", "compiled engine: ...": adaptcoll's cost per segment event over the bare loop
    of that engine, mpi4py's or plain C), or, in older output without such lines, the one line there is."""
    where = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"engine cost {where!r}: cannot read it ({exc.strerror or exc})") from None
    tagged = [line for line in text.splitlines() if line.startswith(f"{engine} engine:")]
    if tagged:
        text = tagged[0]
    elif engine != "python" or any(line.startswith("python engine:") for line in text.splitlines()):
        raise ValueError(f"engine cost {where!r}: no '{engine} engine:' line")
    adds, bare = _ADDS.search(text), _BARE.search(text)
    if not adds or not bare:
        raise ValueError(
            f"engine cost {where!r}: no 'adaptcoll adds ... per segment event' and 'bare mpi4py loop costs ... per "
            "message' lines (run: mpiexec -n 2 python bench/engine_cost.py --mpi)"
        )
    a = [float(x) for x in _US.findall(adds.group(1))]
    b = [float(x) for x in _US.findall(bare.group(1))]
    if not a or not b:
        raise ValueError(f"engine cost {where!r}: no microsecond figures found")
    return EngineCost(sum(a) / len(a), sum(b) / len(b))


def read_pingpong(path: Union[str, Path]) -> list[tuple[int, int, float]]:
    """(ranks, bytes, one-way us) rows of a ping-pong JSON-lines file."""
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            rows.append((int(d["ranks"]), int(d["bytes"]), float(d["one_way_us"])))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"ping-pong {str(path)!r}, line {n}: expected ranks, bytes, one_way_us") from None
    return rows


def read_pair_order(path: Union[str, Path]) -> list[tuple[int, float, float]]:
    """(bytes, first s, second s) rows of a bench/pair_order.py JSON file: when the first and the second of
    two messages in flight between one pair completed."""
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text())
        rows = [(int(r["size"]), float(r["first"]), float(r["second"])) for r in doc["rows"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(
            f"pair order {where!r}: expected bench/pair_order.py --json output (rows of size, first, second)"
        ) from None
    if not rows or any(b < 1 or first <= 0 or second <= 0 for b, first, second in rows):
        raise ValueError(f"pair order {where!r}: no rows, or a row with a size < 1 or times that are not positive")
    return rows
