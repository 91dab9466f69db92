"""`mpiexec -n N python -m adaptcoll.check`: one command that tells whether adaptcoll is correct with
this MPI and faster than it on this machine (environment, correctness against native MPI, speed with
confidence intervals, a verdict per cell and a recommendation). See docs/check.md.

Modules: `cases` (what is checked, no MPI), `environment`, `correctness`, `misuse` (error paths),
`speed` (adaptcoll.measure's interleaved loop), `report` (text, recommendation), `plot` (PNG), `cli`."""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
