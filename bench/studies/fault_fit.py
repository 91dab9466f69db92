"""What `fault` cost makes the simulator fit the 16-core node? A grid over the simulator's `fault` cost
(MPICH's large temporaries mapped afresh at each call) on the 16-core node's rows: median |error| of
native MPICH's and of the shipped rule's rows, and in how many adaptcoll/native pairs the simulator says
which is faster as measured.

    python bench/studies/fault_fit.py [--params bench/results/simulate/params_16core_large.json]
        [--faults 0,0.3,0.4,0.5,0.6,0.7,0.8] (ms per MiB) [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from adaptcoll.simulate import measured
from adaptcoll.simulate.calibrate import sign_agreement, validate
from adaptcoll.simulate.params import CostParams, load_params

DATA = Path(__file__).resolve().parents[1] / "results" / "simulate" / "measured_16core"
RULE = "adaptcoll:native_below=0"  # the shipped rule's rows (its configuration, everything served)


def rows_16core() -> dict[int, list[measured.Measurement]]:
    """The 16-core node's rows of 1-64 MiB, by rank count (4, 8, 16)."""
    return {
        n: [m for m in measured.read_measurements(DATA / f"osu_dataset_n{n}.json") if m.size >= 1 << 20]
        for n in (4, 8, 16)
    }


def score(params: CostParams, data: dict[int, list[measured.Measurement]]) -> dict[str, Any]:
    """How `params` fit `data` (rows_16core): per rank count the median |error| in % of native's rows
    ("native") and of the shipped rule's ("rule") and the adaptcoll/native pairs the simulator gets on the
    right side ("signs"); "wrong": every wrong pair (calibrate.sign_agreement's)."""
    nat, rule, signs, wrong = [], [], [], []
    for n in sorted(data):
        res = validate(data[n], params)
        nat.append(statistics.median(abs(r["error_pct"]) for r in res if r["model"] != "adaptcoll"))
        rule.append(statistics.median(abs(r["error_pct"]) for r in res if r["impl"] == RULE))
        s = sign_agreement(res)
        signs.append(s["right"])
        wrong += s["wrong"]
    return {"native": nat, "rule": rule, "signs": signs, "wrong": wrong}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", default="bench/results/simulate/params_16core_large.json")
    p.add_argument("--faults", default="0,0.3,0.4,0.5,0.6,0.7,0.8", help="ms per MiB")
    p.add_argument("--json", default="")
    args = p.parse_args()
    base = load_params(args.params)
    data = rows_16core()
    out = []
    print("| fault ms/MiB | native 4 / 8 / 16 | rule 4 / 8 / 16 | signs 4 / 8 / 16 | signs |")
    print("|---:|---|---|---|---:|")
    for ms in (float(x) for x in args.faults.split(",")):
        fit = score(dataclasses.replace(base, fault=ms * 1e-3 / (1 << 20)), data)
        print(
            f"| {ms:g} | {' / '.join(f'{x:.1f}' for x in fit['native'])} | "
            f"{' / '.join(f'{x:.1f}' for x in fit['rule'])} | {' / '.join(map(str, fit['signs']))} | "
            f"{sum(fit['signs'])} |",
            flush=True,
        )
        out.append({"fault_ms_per_mib": ms, **fit})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
