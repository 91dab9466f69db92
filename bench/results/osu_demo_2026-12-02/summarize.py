"""Per size, adaptcoll - mpi4py (us) of each round (the median of its 5 launches), base | new, as quoted in
bench/RESULTS.md: python bench/results/osu_demo_2026-12-02/summarize.py bench/results/osu_demo_2026-12-02"""

import collections
import glob
import json
import statistics
import sys


def _diffs(rows: list) -> str:
    return " ".join(f"{d:+.2f}" for d, _, _ in rows)


def main() -> None:
    folder = sys.argv[1]
    for kind in ("stock", "long"):
        print(f"== {kind}: adaptcoll - mpi4py us (median of 5 launches each, per round), base | new")
        rows: dict = collections.defaultdict(lambda: collections.defaultdict(list))
        for side in ("base", "new"):
            for name in sorted(glob.glob(f"{folder}/{side}_{kind}_*.jsonl")):
                with open(name) as f:
                    for line in f:
                        r = json.loads(line)
                        rows[r["size"]][side].append((r["diff_us"], r["ratio"], r["mpi4py_us"]))
        for size in sorted(rows):
            base, new = rows[size]["base"], rows[size]["new"]
            plain = statistics.median(x[2] for x in base + new)
            worst = max(x[1] for x in new)
            print(f"{size:>8} mpi4py {plain:7.2f} | base {_diffs(base)} | new {_diffs(new)} | new ratio {worst:.3f}")


if __name__ == "__main__":
    main()
