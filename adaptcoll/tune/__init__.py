"""Tuning: choose, per call, between native MPI and adaptcoll's configurations, from a tuning table
measured on the user's machine (`python -m adaptcoll.tune`) or from the shipped rule.

Modules (small, one job each; this package file imports none of them, so the low layers can import
`adaptcoll.tune.config`/`table`/`exchange` without pulling in the tuner itself):

- `config`: `ServeConfig` (what a table entry chooses) and `CallConfig` (what one call uses).
- `table`: the tuning table's JSON schema (versioned), parsing with errors naming file and field,
  writing, merging, and the lookup rules (nearest communicator size, nearest message size).
- `defaults`: the shipped rule used without a table (by communicator size and ranks per core).
- `files`: where a table is found (`ADAPTCOLL_TUNING`, the per-user cache directory).
- `exchange`: the communicator set-up step: load the bytes on rank 0, exchange them and the ranks'
  host facts, parse and validate, so every rank makes the same choice.
- `choose`: the per-communicator `CommTuning` and `choose()` (explicit settings win over the table),
  with the per-communicator thresholds the small-message fast path reads.
- `candidates`, `measure`, `cli`, `show`: the tuner (`python -m adaptcoll.tune`) and `show FILE`.
"""

from __future__ import annotations

__all__: list[str] = []
