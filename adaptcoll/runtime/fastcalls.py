"""Calls into the compiled progress path without ctypes: a small CPython extension (`fastcalls.c`).

A served call's path crosses into C once or twice (ac_call_run; ac_call_start and ac_op_wait), and each
ctypes call costs about 4,200 instructions, a tenth to a fifth of the whole call. The extension wraps
each hot function's address (taken from ctypes) in an object Python calls with a vectorcall: about 550
instructions, 950 where the GIL is released. It also does two Python steps of every served call in C,
the decision cache's check of a remembered call's arrays (`UNCHANGED`, for adaptcoll.decision.cache)
and the concurrent-collective check (adaptcoll.forms.threads), the test and count of every call
that goes native below the threshold (adaptcoll.forms.collectives), and the routed I-forms' whole native
path with their request's common Wait (forms.collectives.native_forms, forms.requests); the forms take
theirs through `when_loaded`. It is loaded by the compiled engine and by a communicator's first blocking call (when
its thresholds become known, adaptcoll.tune.choose), whichever comes first.
It needs Python's and NumPy's headers and a C compiler (`CC`, else cc / gcc / clang, else the MPI
library's `mpicc`), nothing of MPI, and is built at first use into the user's cache like the compiled
engine (keyed by the source, the compiler, this Python and NumPy). Where it cannot be built or loaded,
ctypes calls the same functions and the Python steps run, with no warning: the results are the same.

`ADAPTCOLL_FASTCALLS=auto|off` (default auto): `off` keeps ctypes and the Python steps (to compare, or to
rule the extension out); anything else is a ValueError.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .cbuild import build_cached, cache_dir, find_cc, find_mpicc

__all__ = ["CHOICES", "UNCHANGED", "choice", "load", "status", "when_loaded", "wrap"]

CHOICES = ("auto", "off")
MODULE = "adaptcoll_fastcalls"
"""The extension's module name (its init function is PyInit_adaptcoll_fastcalls)."""
FLAGS = ("-O2", "-shared", "-fPIC")

UNCHANGED: list[Optional[Callable[[tuple[Any, ...], tuple[Any, ...]], bool]]] = [None]
"""[the extension's `unchanged(arrays, signatures)`] once it is loaded, else [None]: the decision cache's
check of a remembered call's arrays (adaptcoll.decision.cache._unchanged) in C."""

_listeners: list[Callable[[Any], None]] = []
_lock = threading.Lock()
_loaded: Optional[tuple[Any, str]] = None  # (the module or None, how it was built / why it is not there)


def choice() -> str:
    """ADAPTCOLL_FASTCALLS (default auto); ValueError for anything but auto or off."""
    value = os.environ.get("ADAPTCOLL_FASTCALLS", "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"ADAPTCOLL_FASTCALLS must be one of {', '.join(CHOICES)}, got {value!r}")
    return value


def _includes() -> list[str]:
    paths = sysconfig.get_paths()
    out: list[str] = []
    for key in ("include", "platinclude"):
        path = paths.get(key)
        if path and path not in out:
            out.append(path)
    return out


def build(cc: str, out_dir: Optional[Path] = None) -> Path:
    """Compile fastcalls.c with `cc` against this Python's headers into the cache (once per source,
    compiler and Python); RuntimeError with the compiler's output if it fails."""
    includes = _includes()
    if not any((Path(p) / "Python.h").exists() for p in includes):
        raise RuntimeError(f"Python's headers (Python.h) are not installed (looked in {', '.join(includes)})")
    includes.append(np.get_include())  # (NumPy's wheels ship their headers)
    abi = f"{sys.version} {sysconfig.get_config_var('EXT_SUFFIX')} {sys.abiflags} numpy {np.__version__}".encode()
    return build_cached(
        cc,
        {"fastcalls.c": resources.files(__package__).joinpath("fastcalls.c").read_bytes()},
        "fastcalls.c",
        "adaptcoll_fastcalls",
        out_dir or cache_dir("compiled"),
        (*FLAGS, *(f"-I{p}" for p in includes)),
        key_parts=(abi,),
    )


def _import(path: Path) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load(fallback_cc: Optional[str] = None) -> tuple[Any, str]:
    """(the extension module, how it was built) or (None, why not): built and imported once per process.
    `fallback_cc`: a compiler to use where there is no plain one (the MPI library's mpicc)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load(fallback_cc)
            if _loaded[0] is not None:
                UNCHANGED[0] = _loaded[0].unchanged
                for listener in _listeners:
                    listener(_loaded[0])
    return _loaded


def when_loaded(listener: Callable[[Any], None]) -> None:
    """Call `listener(module)` once the extension is loaded (now, if it is): how a higher layer takes a C
    version of its own step (adaptcoll.forms.threads) without this module knowing it."""
    with _lock:
        if _loaded is None:
            _listeners.append(listener)
            return
        module = _loaded[0]
    if module is not None:
        listener(module)


def _load(fallback_cc: Optional[str]) -> tuple[Any, str]:
    if choice() == "off":
        return None, "ADAPTCOLL_FASTCALLS=off"
    cc = find_cc() or fallback_cc or find_mpicc()  # (mpicc: a wrapper of some C compiler)
    if cc is None:
        return None, "no C compiler found (set CC)"
    try:
        path = build(cc)
        module = _import(path)
    except (RuntimeError, OSError, ImportError) as exc:
        return None, f"not built: {exc}"
    return module, f"{path} (built with {cc})"


def status() -> tuple[str, str]:
    """("extension", its path) or ("ctypes", why the extension is not used) once the compiled engine has
    loaded (`load`); ("none", ...) before that (the Python engine makes no calls into C)."""
    if _loaded is None:
        return "none", "the compiled progress path is not loaded"
    module, text = _loaded
    return ("extension", text) if module is not None else ("ctypes", text)


def wrap(function: Any, signature: str, release_gil: bool) -> Callable[..., Any]:
    """`function` (a ctypes function of the compiled library, its argtypes declared) as the extension's
    fast call of `signature` ("i(n,i)": int f(Py_ssize_t, int); see fastcalls.c), or the ctypes function
    itself where the extension is not loaded. The fast call takes Python ints only (no ctypes objects):
    `release_gil` for calls that may sweep for a while (ctypes always releases it)."""
    module = _loaded[0] if _loaded is not None else None
    if module is None:
        return function
    address = ctypes.cast(function, ctypes.c_void_p).value
    return module.wrap(address, signature, function.__name__, release_gil)
