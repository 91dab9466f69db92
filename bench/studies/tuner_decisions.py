"""Does the tuner's interleaved round decide afresh at every candidate call? Counts the Bcast decisions
made in 20 iterations of native and 4 candidates of 1 MiB (after a set-up round) and prints the median
time of each (native first; each iteration the max over ranks). bench/RESULTS.md, "check and
bench/osu.py time in a balanced order".

    mpiexec -n 2 python bench/studies/tuner_decisions.py
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

import adaptcoll.forms.collectives as forms
from adaptcoll import Intracomm
from adaptcoll.decision import decide
from adaptcoll.tune import measure
from adaptcoll.tune.candidates import candidates


def main() -> None:
    world = MPI.COMM_WORLD
    comm = Intracomm(world)
    comm.Bcast(np.zeros(1), 0)  # the tuning is set up by the first blocking call
    made = [0]
    real = decide.bcast

    def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return real(*args, **kwargs)

    for module in (decide, forms):
        for name in dir(module):
            if getattr(module, name) is real:
                setattr(module, name, counted)
    point = measure.Point("bcast", 1 << 20, candidates("bcast", world.Get_size()))
    runner = measure._Runner(world, comm, point, list(point.configs)[:4], "float64")
    runner.round(list(range(5)), 2)
    before = made[0]
    times = runner.round(list(range(5)), 20)
    if world.Get_rank() == 0:
        medians = (np.median(times, axis=1) * 1e6).round(1).tolist()
        print(f"decisions in 20 iterations x 4 candidates: {made[0] - before}; median us (native first): {medians}")


if __name__ == "__main__":
    main()
