"""Question: how many CPU instructions does one small call cost, adaptcoll's against mpi4py's own?
Answer: bench/RESULTS.md, "Small calls, in instructions (issue 36, 2026-12-01)".

Timings of a sub-microsecond wrapper swing 2x between launches on a shared VM; callgrind's instruction
counts do not (the same binary and inputs give the same count, whatever else runs). Each form runs
`--calls` times after a warm-up, once with 1000 calls and once with 10000, both under
`valgrind --tool=callgrind`; the difference over 9000 is the cost of one call, start-up excluded (and
the few thousand instructions by which two runs of the same process differ, spread thin).

Forms (one process, so no message moves: what is counted is the CPU path around MPI):
- `wrap-bcast`, `wrap-reduce`, `wrap-allreduce`: a 4 KiB call adaptcoll hands to MPI (below the
  threshold) on `adaptcoll.Intracomm(COMM_SELF)`; `mpi4py-bcast`, ... the same call of plain mpi4py.
- `wrap-bcast-spec`, `wrap-allreduce-spec`: the same with the buffers as `[mmap, 4096, MPI.BYTE]` (the
  form of mpi4py's demo/osu_bcast.py; Allreduce on `[mmap, 512, MPI.DOUBLE]`); `mpi4py-...-spec` plain.
- `wrap-bcast-typed`, `wrap-bcast-displ`: the 4 KiB Bcast on `[bytearray, MPI.BYTE]` and on
  `[mmap, (4096, 0), MPI.BYTE]` (the forms sized in C since 2026-12-03); `mpi4py-...` plain.
- `wrap-bcast-cai`: the 4 KiB Bcast on a host-memory object with `__cuda_array_interface__` (as
  mpi4py's own tests make one; sized in Python); `mpi4py-bcast-cai` plain.
- `wrap-ibcast`, `wrap-iallreduce`: the 4 KiB I-form + Wait adaptcoll hands to MPI; `mpi4py-...` plain.
- `bcast`, `allreduce`, `ibcast`, `iallreduce`, `persistent-bcast`: an 8-byte call served by adaptcoll
  (`native_below=0`) on a 1-rank duplicate of COMM_WORLD (blocking; I-form + Wait; Start + Wait);
  `mpi4py-persistent-bcast`: MPI's own persistent Bcast, Start + Wait.

    python bench/studies/call_instructions.py [--form FORM ...]   # counts each form under callgrind
    python bench/studies/call_instructions.py --run FORM --calls N [--stats]  # the loop itself

Needs valgrind. OPENBLAS_NUM_THREADS=1 is set for the runs (OpenBLAS's idle threads otherwise add a
varying count).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import re
import subprocess
import sys
from collections.abc import Callable

FORMS = (
    "wrap-bcast",
    "mpi4py-bcast",
    "wrap-reduce",
    "mpi4py-reduce",
    "wrap-allreduce",
    "mpi4py-allreduce",
    "wrap-bcast-spec",
    "mpi4py-bcast-spec",
    "wrap-allreduce-spec",
    "mpi4py-allreduce-spec",
    "wrap-bcast-typed",
    "mpi4py-bcast-typed",
    "wrap-bcast-displ",
    "mpi4py-bcast-displ",
    "wrap-bcast-cai",
    "mpi4py-bcast-cai",
    "wrap-ibcast",
    "mpi4py-ibcast",
    "wrap-iallreduce",
    "mpi4py-iallreduce",
    "bcast",
    "allreduce",
    "ibcast",
    "iallreduce",
    "persistent-bcast",
    "mpi4py-persistent-bcast",
)


class _HostCAI:
    """Host memory behind `__cuda_array_interface__` (bench/studies/native_forms.py's HostCAI)."""

    def __init__(self, array: object) -> None:
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape,  # type: ignore[attr-defined]
            "typestr": array.dtype.str,  # type: ignore[attr-defined]
            "data": (array.ctypes.data, False),  # type: ignore[attr-defined]
            "version": 3,
        }


def _loop(form: str, calls: int, stats: bool = False) -> None:
    import numpy as np
    from mpi4py import MPI

    import adaptcoll

    serve = {"native_below": 0, "bcast_native_below": 0, "reduce_native_below": 0, "allreduce_native_below": 0}
    small, out = np.zeros(512), np.zeros(512)
    one, one_out = np.ones(1), np.zeros(1)
    mapped, mapped_out = mmap.mmap(-1, 4096), mmap.mmap(-1, 4096)
    spec, spec_in, spec_out = [mapped, 4096, MPI.BYTE], [mapped, 512, MPI.DOUBLE], [mapped_out, 512, MPI.DOUBLE]
    typed, displ = [bytearray(4096), MPI.BYTE], [mapped, (4096, 0), MPI.BYTE]
    cai = _HostCAI(np.zeros(4096, np.uint8))
    plain_self = MPI.COMM_SELF
    ours_self = adaptcoll.Intracomm(MPI.COMM_SELF)
    for _ in range(3):  # the first calls learn the thresholds
        ours_self.Bcast(small, 0)
    served_form = not form.startswith(("wrap-", "mpi4py-"))  # (the wrap- forms under the shipped thresholds)
    with adaptcoll.configured(**serve) if served_form else contextlib.nullcontext():
        served = adaptcoll.Intracomm(MPI.COMM_WORLD.Dup())
        served.Bcast(one, 0)
        pb = served.Bcast_init(one, 0)
        pn = MPI.COMM_WORLD.Bcast_init(one, 0)

        def persistent(req: MPI.Prequest) -> Callable[[], object]:
            def run() -> None:
                req.Start()
                req.Wait()

            return run

        run: Callable[[], object] = {
            "wrap-bcast": lambda: ours_self.Bcast(small, 0),
            "mpi4py-bcast": lambda: plain_self.Bcast(small, 0),
            "wrap-reduce": lambda: ours_self.Reduce(small, out, MPI.SUM, 0),
            "mpi4py-reduce": lambda: plain_self.Reduce(small, out, MPI.SUM, 0),
            "wrap-allreduce": lambda: ours_self.Allreduce(small, out, MPI.SUM),
            "mpi4py-allreduce": lambda: plain_self.Allreduce(small, out, MPI.SUM),
            "wrap-bcast-spec": lambda: ours_self.Bcast(spec, 0),
            "mpi4py-bcast-spec": lambda: plain_self.Bcast(spec, 0),
            "wrap-allreduce-spec": lambda: ours_self.Allreduce(spec_in, spec_out, MPI.SUM),
            "mpi4py-allreduce-spec": lambda: plain_self.Allreduce(spec_in, spec_out, MPI.SUM),
            "wrap-bcast-typed": lambda: ours_self.Bcast(typed, 0),
            "mpi4py-bcast-typed": lambda: plain_self.Bcast(typed, 0),
            "wrap-bcast-displ": lambda: ours_self.Bcast(displ, 0),
            "mpi4py-bcast-displ": lambda: plain_self.Bcast(displ, 0),
            "wrap-bcast-cai": lambda: ours_self.Bcast(cai, 0),
            "mpi4py-bcast-cai": lambda: plain_self.Bcast(cai, 0),
            "wrap-ibcast": lambda: ours_self.Ibcast(small, 0).Wait(),
            "mpi4py-ibcast": lambda: plain_self.Ibcast(small, 0).Wait(),
            "wrap-iallreduce": lambda: ours_self.Iallreduce(small, out, MPI.SUM).Wait(),
            "mpi4py-iallreduce": lambda: plain_self.Iallreduce(small, out, MPI.SUM).Wait(),
            "bcast": lambda: served.Bcast(one, 0),
            "allreduce": lambda: served.Allreduce(one, one_out, MPI.SUM),
            "ibcast": lambda: served.Ibcast(one, 0).Wait(),
            "iallreduce": lambda: served.Iallreduce(one, one_out, MPI.SUM).Wait(),
            "persistent-bcast": persistent(pb),
            "mpi4py-persistent-bcast": persistent(pn),
        }[form]
        for _ in range(50):
            run()
        for _ in range(calls):
            run()
        pb.Free()
        pn.Free()
    if stats:  # what the loop called, as adaptcoll counted it (tests/test_bench.py)
        print(json.dumps(adaptcoll.stats()))


def _instructions(form: str, calls: int) -> int:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__]
    done = subprocess.run(command + ["--run", form, "--calls", str(calls)], env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{form}: callgrind run failed\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", action="append", choices=FORMS, help="forms to count (default: all)")
    parser.add_argument("--run", choices=FORMS, help="run the loop of one form (what callgrind counts)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--stats", action="store_true", help="with --run: print adaptcoll.stats() as JSON after it")
    args = parser.parse_args()
    if args.run:
        _loop(args.run, args.calls, args.stats)
        return
    for form in args.form or FORMS:
        few, many = _instructions(form, 1000), _instructions(form, 10000)
        print(f"{form:<26}{(many - few) / 9000:>10.0f} instructions per call", flush=True)


if __name__ == "__main__":
    main()
