"""Medians of bench/fixed_cost.py's JSON files per side, as quoted in bench/RESULTS.md.

python summarize.py DIR SIDE...   # reads DIR/SIDE_N.json for each SIDE
"""

import glob
import json
import statistics as st
import sys


def main() -> None:
    folder, sides = sys.argv[1], sys.argv[2:] or ["off", "auto"]
    rows: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for side in sides:
        for name in sorted(glob.glob(f"{folder}/{side}_*.json")):
            with open(name) as f:
                found = json.load(f)["rows"]
            for r in found:
                rows.setdefault(r["form"], {}).setdefault(side, []).append((r["native_us"], r["diff_us"]))
    print(f"{'form':28s}" + "".join(f"{side + ' native':>12s}{side + ' diff (range)':>24s}" for side in sides))
    for form, per in rows.items():
        line = f"{form:28s}"
        for side in sides:
            xs = per[side]
            native, diff = st.median(x[0] for x in xs), st.median(x[1] for x in xs)
            spread = f"({min(x[1] for x in xs):.1f}-{max(x[1] for x in xs):.1f})"
            line += f"{native:12.1f}" + f"{diff:10.1f} {spread}".rjust(24)
        print(line)


if __name__ == "__main__":
    main()
