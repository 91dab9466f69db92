"""Run-time settings: read from ADAPTCOLL_* environment variables at import, changeable from Python.

Every setting must be the same on all ranks of a communicator (like an MPI collective's arguments):
the choice of algorithm and the segment plan decide which messages are exchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..plans import forests, topology, trees

__all__ = [
    "point_to_point_tree",
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
    "env_value",
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
    "multi_tree",
)
ALGORITHMS = TREE_KINDS + ("shm", "forest", "native")
"""`forest:PATH` runs the weighted forests of a schedule file (adaptcoll.plans.forests, docs/schedules.md)."""
ALLREDUCE_ONLY = ("ring", "rabenseifner")
"""Allreduce algorithms that are not trees (adaptcoll.protocols.algorithms): valid for allreduce only."""
BLOCK_COLLECTIVES = ("allgather", "reduce_scatter")
"""Allgather and Reduce_scatter(_block): served by the ring (adaptcoll.blocks), never by trees."""
BLOCK_COLLECTIVE_ALGORITHMS = ("ring", "native")
SYNC_MODES = ("first", "all", "none")
ENGINES = ("auto", "python", "compiled")
"""ADAPTCOLL_ENGINE: `auto` runs the compiled progress path where it builds and matches the MPI library
mpi4py loaded (else the Python engine, with one warning), `python` never builds it, `compiled` makes
its absence an error (adaptcoll.runtime.compiled)."""


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
    device_native_below: int = 4 << 20
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
    trace: str = ""  # a directory: record per-segment events there (adaptcoll.trace); "" is off
    watchdog: float = 300.0
    watchdog_abort: bool = False
    shm_bytes: int = 64 << 20
    shm_segment_size: int = 512 * 1024
    shm_slots: int = 4
    multi_pack_below: int = 128 << 10  # grouped Allreduce: arrays below this many bytes are packed together
    multi_bucket_size: int = 4 << 20  # grouped Allreduce: at most this many bytes per packed buffer (0: no cap)
    multi_device_pack_below: int = 16 << 20  # grouped Allreduce: device arrays below this many bytes are packed
    multi_device_bucket_size: int = 32 << 20  # grouped Allreduce: at most this many bytes per device bucket (0: no cap)
    tuning: str = ""
    allgather_algorithm: str = "ring"
    reduce_scatter_algorithm: str = "ring"
    allgather_native_below: int = -1
    reduce_scatter_native_below: int = -1
    engine: str = "auto"  # auto: the compiled progress path where it builds and matches MPI; python; compiled
    remember: bool = True  # remember decisions per communicator and call signature (adaptcoll.decision.cache)
    progress_thread: float = 0.0
    """Microseconds the compiled engine's progress thread pauses after a sweep that completed nothing; 0:
    no thread (nonblocking operations progress in the program's own adaptcoll calls). A thread drives
    the compiled operations while the program computes (adaptcoll.runtime.compiled, docs/dropin.md)."""
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

    def device_threshold(self, collective: str) -> int:
        """Device-memory messages below this many bytes go native (staged through host memory when MPI is
        not CUDA-aware): device_native_below, or the collective's host threshold when that is -1."""
        return self.threshold(collective) if self.device_native_below < 0 else self.device_native_below

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


_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off", "")


def _parse_bool(text: Any, name: str) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in _TRUE_WORDS:
        return True
    if value in _FALSE_WORDS:
        return False
    raise ValueError(f"{name}: expected 0/1, true/false, yes/no or on/off, got {text!r}")


def _parse_algorithm(text: Any, name: str, allreduce: bool = False) -> str:
    value = str(text).strip()
    kind, _, params = value.partition(":")
    if kind in ALLREDUCE_ONLY:
        if not allreduce:
            raise ValueError(f"{name}: {kind!r} is an allreduce algorithm (set it in ADAPTCOLL_ALLREDUCE_ALGORITHM)")
        block_algorithm(value, name)
        return value
    if kind not in ALGORITHMS:
        choices = ALGORITHMS + ALLREDUCE_ONLY if allreduce else ALGORITHMS
        raise ValueError(f"{name}: unknown algorithm {kind!r}; valid choices: {', '.join(choices)}")
    if kind == forests.KIND:  # forest:PATH, the path as written (it may hold ',' and '='): read it now
        try:
            forests.load(forests.path_of(value))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        return value
    if kind == "shm" and params:
        raise ValueError(f"{name}: shm takes no parameters (between nodes use topo:intra=shm,inner=...), got {value!r}")
    if params:
        for item in params.split(","):
            key, eq, val = item.partition("=")
            if not eq or not key.strip() or not val.strip():
                raise ValueError(f"{name}: tree parameters are written kind:key=value[,key=value], got {value!r}")
    return value


BLOCK_PARAMS = ("segment_size", "max_segments")
"""Parameters of the ring and recursive-halving allreduces, e.g. `ring:segment_size=1M,max_segments=2`."""


@functools.lru_cache(maxsize=64)
def block_algorithm(value: str, name: str = "allreduce_algorithm") -> tuple[str, dict[str, int]]:
    """('ring' or 'rabenseifner', {parameter: value}) from an allreduce algorithm setting such as
    'ring:segment_size=1M' (a segment size in bytes; at most max_segments segments per block, 0: no cap).
    Parameters left out take the algorithm's measured defaults (adaptcoll.protocols.algorithms).
    Cached (the decision layer asks on every call): do not modify the returned dict."""
    kind, _, text = value.strip().partition(":")
    params: dict[str, int] = {}
    for item in text.split(",") if text.strip() else []:
        key, eq, val = (x.strip() for x in item.partition("="))
        if not eq or key not in BLOCK_PARAMS or not val:
            raise ValueError(
                f"{name}: {kind} parameters are written {kind}:key=value[,key=value] with keys "
                f"{', '.join(BLOCK_PARAMS)}, got {value!r}"
            )
        if key == "segment_size":
            params[key] = parse_size(val, name)
            if params[key] < 1:
                raise ValueError(f"{name}: segment_size must be at least 1 byte, got {value!r}")
        else:
            params[key] = 0 if val in ("0", "none") else _parse_window(val, name)
    return kind, params


def _parse_seconds(text: Any, name: str) -> float:
    """A duration in seconds >= 0 (0: off)."""
    try:
        value = float(str(text).strip()) if not isinstance(text, bool) else -1.0
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name}: expected a number of seconds >= 0 (0: off), got {text!r}")
    return value


def _parse_window(text: Any, name: str) -> int:
    try:
        value = int(str(text).strip()) if not isinstance(text, int) or isinstance(text, bool) else text
    except ValueError:
        raise ValueError(f"{name}: expected a positive integer, got {text!r}") from None
    if isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {text!r}")
    return value


PROGRESS_PAUSE_US = 50.0
"""The progress thread's pause when ADAPTCOLL_PROGRESS_THREAD is `on`: Linux's default timer slack
(50 us) makes a shorter nanosleep last about as long anyway."""


def _parse_progress_thread(text: Any, name: str) -> float:
    """on/off (on: PROGRESS_PAUSE_US), or the pause in microseconds (0: off; `1` is one microsecond)."""
    if isinstance(text, bool):
        return PROGRESS_PAUSE_US if text else 0.0
    word = str(text).strip().lower()
    try:
        value = float(word)
    except ValueError:  # on/off words ("1" and "0" are numbers above: 1 us, off)
        value = PROGRESS_PAUSE_US if word in _TRUE_WORDS else 0.0 if word in _FALSE_WORDS else -1.0
    if not 0 <= value <= 1e6:
        raise ValueError(
            f"{name}: expected on, off, or the progress thread's pause in microseconds "
            f"(0-1000000, 0: off), got {text!r}"
        )
    return value


def _parse_trace(text: Any, name: str) -> str:
    value = os.path.expanduser(str(text).strip())
    if value.lower() in ("", "0", "off", "no", "false", "none"):
        return ""
    if os.path.exists(value) and not os.path.isdir(value):
        raise ValueError(f"{name}: {text!r} exists and is not a directory (expected a directory for the trace files)")
    return value


def point_to_point_tree(algorithm: str) -> str:
    """The point-to-point tree setting used instead of a shm one (when the node level cannot serve a
    call): `shm` -> binomial, topo's `intra=shm` -> `intra=binomial`; other settings unchanged."""
    kind, _, params = algorithm.partition(":")
    if kind.strip() == "shm":
        return "binomial"
    if not params:
        return algorithm
    items = ["intra=binomial" if p.replace(" ", "") == "intra=shm" else p for p in params.split(",")]
    return f"{kind}:{','.join(items)}"


def _check_tree(value: str, name: str) -> str:
    """A tree algorithm's kind and parameters checked now, not at the first served call (non-tree
    algorithms such as 'native' pass through; `intra=shm` is checked as the tree used without it)."""
    if value.partition(":")[0].strip() not in trees.KINDS:
        return value
    try:
        trees.check_params(*trees.parse_algorithm(point_to_point_tree(value)))
    except ValueError as exc:
        raise ValueError(f"{name}={value!r}: {exc}") from None
    return value


def _parse_topology(value: Any, name: str) -> str:
    text = str(value).strip()
    if text:
        try:
            topology.check_spec(text)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return text


def _parse_field(field: str, value: Any, name: str) -> Any:
    if field == "shm_bytes":
        return parse_size(value, name)
    if field == "shm_segment_size":
        size = parse_size(value, name)
        if size < 64:
            raise ValueError(f"{name}: a shared-memory slot holds at least 64 bytes, got {value!r}")
        return size
    if field == "shm_slots":
        return _parse_window(value, name)
    if field in ("multi_pack_below", "multi_bucket_size", "multi_device_pack_below", "multi_device_bucket_size"):
        return parse_size(value, name)
    if field in ("allgather_algorithm", "reduce_scatter_algorithm"):
        kind = str(value).strip().partition(":")[0]
        if kind not in BLOCK_COLLECTIVE_ALGORITHMS:
            raise ValueError(
                f"{name}: unknown algorithm {kind!r}; valid choices: {', '.join(BLOCK_COLLECTIVE_ALGORITHMS)}"
            )
        if kind == "native":
            return kind
        block_algorithm(str(value), name)
        return str(value).strip()
    if field.endswith("_algorithm"):
        return _check_tree(_parse_algorithm(value, name, allreduce=field == "allreduce_algorithm"), name)
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
    if field == "engine":
        choice = str(value).strip().lower()
        if choice not in ENGINES:
            raise ValueError(f"{name}: expected one of {', '.join(ENGINES)}, got {value!r}")
        return choice
    if field == "sync_sends":
        mode = str(value).strip().lower()
        if mode not in SYNC_MODES:
            raise ValueError(f"{name}: expected one of {', '.join(SYNC_MODES)}, got {value!r}")
        return mode
    if field in ("reproducible", "watchdog_abort", "remember"):
        return _parse_bool(value, name)
    if field == "watchdog":
        return _parse_seconds(value, name)
    if field == "progress_thread":
        return _parse_progress_thread(value, name)
    if field == "topology":
        return _parse_topology(value, name)
    if field == "tuning":
        return str(value).strip()
    if field == "tag_space":
        return parse_size(value, name)
    if field == "trace":
        return _parse_trace(value, name)
    if field in ("allreduce_roots", "max_segments"):
        if str(value).strip() in ("0", "auto", "none"):
            return 0
        return _parse_window(value, name)
    raise AssertionError(field)


def env_value(var: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of environment variable `var`, or None when it is unset or empty (blank): job scripts
    and shells often export `VAR=` for "not set", so an empty value means the default."""
    value = (os.environ if environ is None else environ).get(var)
    return None if value is None or not value.strip() else value


def from_environ(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ADAPTCOLL_* variables (defaults for the unset and empty ones); ValueError naming a
    bad variable."""
    env = os.environ if environ is None else environ
    values = {}
    for field, var in ENV_VARS.items():
        raw = env_value(var, env)
        if raw is not None:
            values[field] = _parse_field(field, raw, var)
    values = _follow_global_threshold(values)
    return Settings(**values, explicit=tuple(sorted(values)))


def _follow_global_threshold(values: dict[str, Any]) -> dict[str, Any]:
    """Setting native_below alone makes it apply to every collective and to device memory (their own
    defaults step aside)."""
    if "native_below" in values:
        for collective in COLLECTIVES:
            values.setdefault(f"{collective}_native_below", -1)
        values.setdefault("device_native_below", -1)
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


OTHER_SIZE_VARS = ("ADAPTCOLL_PICKLE_INLINE_BELOW",)
"""Byte-count variables read by other modules (adaptcoll.forms.pickled), checked here at import too."""


def load_environ() -> None:
    """(Re)read the environment into the current settings (done once at import); every ADAPTCOLL_*
    setting is checked now, so a bad value fails at `import adaptcoll` naming its variable."""
    for var in OTHER_SIZE_VARS:
        raw = env_value(var)
        if raw is not None:
            parse_size(raw, var)
    _install(from_environ())
