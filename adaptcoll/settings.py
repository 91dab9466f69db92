"""Run-time settings: read from ADAPTCOLL_* environment variables at import, changeable from Python.

Every setting must be the same on all ranks of a communicator (like an MPI collective's arguments):
the choice of algorithm and the segment plan decide which messages are exchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Settings",
    "COLLECTIVES",
    "ENV_VARS",
    "TUNED_FIELDS",
    "current",
    "configure",
    "configured",
    "use",
    "on_change",
    "parse_size",
    "from_environ",
]

COLLECTIVES = ("bcast", "reduce", "allreduce")

TREE_KINDS = (
    "binomial",
    "in_order_binomial",
    "binary",
    "pipeline",
    "chain",
    "linear",
    "knomial",
    "topo",
    "two_tree",
)
ALGORITHMS = TREE_KINDS + ("native",)
SYNC_MODES = ("first", "all", "none")


@dataclass(frozen=True)
class Settings:
    """One consistent set of tuning knobs (defaults measured on the 2-core dev machine, see bench/RESULTS.md)."""

    bcast_algorithm: str = "binomial"
    reduce_algorithm: str = "binomial"
    allreduce_algorithm: str = "binomial"
    bcast_segment_size: int = 512 * 1024
    reduce_segment_size: int = 512 * 1024
    allreduce_segment_size: int = 512 * 1024
    native_below: int = 1 << 20
    bcast_native_below: int = -1
    reduce_native_below: int = 256 * 1024
    allreduce_native_below: int = 2 << 20
    bcast_send_window: int = 2
    bcast_recv_window: int = 3
    reduce_send_window: int = 2
    reduce_recv_window: int = 3
    sync_sends: str = "first"
    reproducible: bool = False
    topology: str = ""
    tag_space: int = 0
    allreduce_roots: int = 0
    max_segments: int = 4
    tuning: str = ""
    explicit: tuple[str, ...] = ()
    """The fields set explicitly (ADAPTCOLL_* variable, configure(), python -m adaptcoll option): they win
    over the tuning table; the others are chosen per call by the table or the shipped rule (adaptcoll.tune)."""

    @property
    def thresholds(self) -> dict[str, int]:
        """Per collective, the threshold in force: its own setting, else native_below."""
        return {c: self.threshold(c) for c in COLLECTIVES}

    def threshold(self, collective: str) -> int:
        """Messages below this many bytes go native: the collective's own setting, else native_below."""
        own: int = getattr(self, f"{collective}_native_below")
        return self.native_below if own < 0 else own

    def algorithm(self, collective: str) -> str:
        """The algorithm setting (tree kind, optionally with ':k=v' params, or 'native') for a collective."""
        return getattr(self, f"{collective}_algorithm")

    def segment_size(self, collective: str) -> int:
        """The target segment size in bytes for a collective."""
        return getattr(self, f"{collective}_segment_size")

    def is_explicit(self, field: str) -> bool:
        """Whether `field` was set explicitly (then it wins over the tuning table)."""
        return field in self.explicit

    def threshold_explicit(self, collective: str) -> bool:
        """Whether the collective's native threshold was set explicitly (its own setting or native_below)."""
        if getattr(self, f"{collective}_native_below") >= 0:
            return self.is_explicit(f"{collective}_native_below")
        return self.is_explicit("native_below")

    def windows(self, collective: str) -> tuple[int, int]:
        """(send window, receive window) used by a collective (allreduce uses the reduce windows)."""
        key = "bcast" if collective == "bcast" else "reduce"
        return getattr(self, f"{key}_send_window"), getattr(self, f"{key}_recv_window")


ENV_VARS: dict[str, str] = {
    f.name: "ADAPTCOLL_" + f.name.upper() for f in dataclasses.fields(Settings) if f.name != "explicit"
}
"""Setting name -> environment variable that sets it at import."""

TUNED_FIELDS: tuple[str, ...] = tuple(
    f"{c}_{k}" for c in COLLECTIVES for k in ("algorithm", "segment_size", "native_below")
) + ("native_below", "max_segments", "allreduce_roots")
"""The fields a tuning table (or the shipped rule) chooses per call unless they are set explicitly."""

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*$")
_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str | int, name: str = "size") -> int:
    """Parse a byte count such as 65536, '64K', '1M' or '2MiB' (binary multiples); ValueError naming `name`."""
    if isinstance(text, bool):
        raise ValueError(f"{name}: expected a byte count, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise ValueError(f"{name}: expected a byte count such as 65536, 64K or 1M, got {text!r}")
        value = int(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {text!r}")
    return value


def _parse_bool(text: Any, name: str) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name}: expected 0/1, true/false, yes/no or on/off, got {text!r}")


def _parse_algorithm(text: Any, name: str) -> str:
    value = str(text).strip()
    kind, _, params = value.partition(":")
    if kind not in ALGORITHMS:
        raise ValueError(f"{name}: unknown algorithm {kind!r}; valid choices: {', '.join(ALGORITHMS)}")
    if params:
        for item in params.split(","):
            key, eq, val = item.partition("=")
            if not eq or not key.strip() or not val.strip():
                raise ValueError(f"{name}: tree parameters are written kind:key=value[,key=value], got {value!r}")
    return value


def _parse_window(text: Any, name: str) -> int:
    try:
        value = int(str(text).strip()) if not isinstance(text, int) or isinstance(text, bool) else text
    except ValueError:
        raise ValueError(f"{name}: expected a positive integer, got {text!r}") from None
    if isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {text!r}")
    return value


def _parse_field(field: str, value: Any, name: str) -> Any:
    if field.endswith("_algorithm"):
        return _parse_algorithm(value, name)
    if field.endswith("_segment_size"):
        size = parse_size(value, name)
        if size < 1:
            raise ValueError(f"{name}: segment size must be at least 1 byte, got {value!r}")
        return size
    if field == "native_below":
        return parse_size(value, name)
    if field.endswith("_native_below"):
        return -1 if str(value).strip() in ("-1", "") else parse_size(value, name)
    if field.endswith("_window"):
        return _parse_window(value, name)
    if field == "sync_sends":
        mode = str(value).strip().lower()
        if mode not in SYNC_MODES:
            raise ValueError(f"{name}: expected one of {', '.join(SYNC_MODES)}, got {value!r}")
        return mode
    if field == "reproducible":
        return _parse_bool(value, name)
    if field in ("topology", "tuning"):
        return str(value).strip()
    if field == "tag_space":
        return parse_size(value, name)
    if field in ("allreduce_roots", "max_segments"):
        if str(value).strip() in ("0", "auto", "none"):
            return 0
        return _parse_window(value, name)
    raise AssertionError(field)


def from_environ(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ADAPTCOLL_* variables (defaults for the unset ones); ValueError naming a bad variable."""
    env = os.environ if environ is None else environ
    values = {}
    for field, var in ENV_VARS.items():
        if var in env:
            values[field] = _parse_field(field, env[var], var)
    values = _follow_global_threshold(values)
    return Settings(**values, explicit=tuple(sorted(values)))


def _follow_global_threshold(values: dict[str, Any]) -> dict[str, Any]:
    """Setting native_below alone makes it apply to every collective (their own defaults step aside)."""
    if "native_below" in values:
        for collective in COLLECTIVES:
            values.setdefault(f"{collective}_native_below", -1)
    return values


_current: Settings = Settings()

THRESHOLDS: dict[str, int] = dict(_current.thresholds)
"""The native thresholds of the settings in force (explicit or not), updated in place whenever they
change. The small-message fast path now reads per-communicator thresholds (adaptcoll.tune.choose)."""

_listeners: list[Callable[[Settings], None]] = []


def _install(settings: Settings) -> None:
    global _current
    _current = settings
    THRESHOLDS.update(settings.thresholds)
    for listener in _listeners:
        listener(settings)


def on_change(listener: Callable[[Settings], None]) -> None:
    """Call `listener(new settings)` whenever the settings in force change (configure, configured, use)."""
    _listeners.append(listener)


def current() -> Settings:
    """The settings in force now."""
    return _current


def configure(**changes: Any) -> Settings:
    """Change settings at run time (same on all ranks!), e.g. configure(bcast_segment_size="64K").

    The settings changed become explicit (they win over the tuning table); a value of None makes a
    setting not explicit again (its default, chosen per call by the tuning table or the shipped rule).
    Returns the previous settings. Unknown names raise TypeError; bad values raise ValueError.
    """
    unknown = set(changes) - set(ENV_VARS)
    if unknown:
        raise TypeError(f"unknown adaptcoll setting(s): {', '.join(sorted(unknown))}; valid: {', '.join(ENV_VARS)}")
    unset = {k for k, v in changes.items() if v is None}
    parsed = _follow_global_threshold({k: _parse_field(k, v, k) for k, v in changes.items() if v is not None})
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Settings) if f.name in unset}
    explicit = (set(_current.explicit) - unset) | set(parsed)
    previous = _current
    _install(dataclasses.replace(_current, **defaults, **parsed, explicit=tuple(sorted(explicit))))
    return previous


def use(settings: Settings) -> Settings:
    """Put a Settings object in force as it is (its explicit fields included); returns the previous one."""
    previous = _current
    _install(settings)
    return previous


@contextlib.contextmanager
def configured(**changes: Any) -> Iterator[Settings]:
    """Context manager: settings changed inside the block, restored after it."""
    previous = configure(**changes)
    try:
        yield _current
    finally:
        _install(previous)


def load_environ() -> None:
    """(Re)read the environment into the current settings (done once at import)."""
    _install(from_environ())
