"""K trees of fanout K under noise: does a shallower forest give a fast Bcast pipeline slack? (issue 37)

Runs the tree kind `multi_tree:fanout=K` (adaptcoll.plans.trees: K trees of fanout K from the root, no
rank forwarding more than the whole message over all of them, so bandwidth-optimal as two_tree is for
K = 2, at depth about log_K(n); before 2026-11-28 K was the count nearest the fanout for which each rank
could be interior in one tree at most). Each one's quiet time and median under
noise (same seed, so the same detours for every shape) is printed next to two_tree's and a lock-step
baseline's, with the compiled engine's CPU costs:

    ADAPTCOLL_ENGINE=compiled python bench/studies/k_trees.py --ranks 256 --k 3,5,15 --segment 32K --samples 9
"""

from __future__ import annotations

import argparse
import statistics

from adaptcoll.plans.trees import multi_tree_count
from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import load_params
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.run import run_once


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--size", default="16M")
    p.add_argument("--segment", default="32K")
    p.add_argument("--k", default="3,5,15", help="tree counts to try")
    p.add_argument("--noise", default="100Hz x 250us")
    p.add_argument("--samples", type=int, default=9)
    p.add_argument("--baseline", default="scatter_allgather")
    p.add_argument("--params", default="bench/results/simulate/params_scale_compiled.json")
    args = p.parse_args()
    params = load_params(args.params)
    noise = parse_noise([args.noise])
    size, seg = parse_size(args.size), parse_size(args.segment)
    cfg = settings.Settings(max_segments=0)

    def times(job: Job, impl: str = "adaptcoll") -> tuple[float, float]:
        quiet = run_once(job, params, impl)[0].time_s
        noisy = statistics.median(run_once(job, params, impl, noise, 1, s)[0].time_s for s in range(args.samples))
        return quiet, noisy

    base_q, base_n = times(Job("bcast", args.ranks, size, seg, "", cfg), args.baseline)
    print(f"{args.ranks} ranks, Bcast {args.size}, {args.segment} segments, {args.noise} (median of {args.samples})")
    print(f"{'shape':<22}{'quiet ms':>9}{'noisy ms':>9}{'slowdown':>9}{'quiet / base':>13}{'noisy / base':>13}")

    def show(name: str, q: float, n: float) -> None:
        print(f"{name:<22}{q * 1e3:>9.3f}{n * 1e3:>9.3f}{n / q:>9.3f}{q / base_q:>13.3f}{n / base_n:>13.3f}")

    show(f"lock-step {args.baseline}", base_q, base_n)
    show("two_tree", *times(Job("bcast", args.ranks, size, seg, "two_tree", cfg)))
    for k in (int(t) for t in args.k.split(",")):
        label = f"{multi_tree_count(args.ranks, k)} trees (fanout={k})"
        show(label, *times(Job("bcast", args.ranks, size, seg, f"multi_tree:fanout={k}", cfg)))


if __name__ == "__main__":
    main()
