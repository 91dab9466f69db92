# python bench/results/osu_demo_2026-12-02/summarize.py bench/results/osu_demo_2026-12-02: per size, adaptcoll - mpi4py (us) of each round (the median of its 5 launches), base | new
import json, sys, statistics as st, glob, collections
R = sys.argv[1]
for kind in ("stock", "long"):
    print(f"== {kind}: adaptcoll - mpi4py us (median of 5 launches each, per round), base | new")
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    for side in ("base", "new"):
        for f in sorted(glob.glob(f"{R}/{side}_{kind}_*.jsonl")):
            for line in open(f):
                r = json.loads(line)
                rows[r["size"]][side].append((r["diff_us"], r["ratio"], r["mpi4py_us"]))
    for size in sorted(rows):
        b, n = rows[size]["base"], rows[size]["new"]
        fmt = lambda xs: " ".join(f"{d:+.2f}" for d, _, _ in xs)
        print(f"{size:>8} mpi4py {st.median(x[2] for x in b+n):7.2f} | base {fmt(b)} | new {fmt(n)} | new ratio {max(x[1] for x in n):.3f}")
