"""Per launch, each served configuration's median time against the shipped rule's ('adaptcoll'), as
quoted in bench/RESULTS.md: python per_launch.py DIR NAME (reads DIR/NAME-n2-l*.json)."""

import glob
import json
import sys

folder, name = sys.argv[1], sys.argv[2]
launches = []
for path in sorted(glob.glob(f"{folder}/{name}-n2-l*.json")):
    with open(path) as f:
        launches.append(json.load(f)["results"])
keys = sorted({(r["collective"], r["size"]) for r in launches[0]})
impls = [i for i in dict.fromkeys(r["impl"] for r in launches[0]) if i not in ("native", "adaptcoll")]
for impl in impls:
    print(f"# shipped time / {impl} time, per launch (> 1: the candidate is faster)")
    for coll, size in keys:
        ratios = []
        for rows in launches:
            t = {r["impl"]: r["median_us"] for r in rows if (r["collective"], r["size"]) == (coll, size)}
            ratios.append(t["adaptcoll"] / t[impl])
        print(f"{coll:10s} {size >> 10:>6}K " + " / ".join(f"{x:.2f}" for x in ratios))
