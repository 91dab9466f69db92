"""Noise grid: the same 2.5% net detour noise in three shapes (SC08's 10 Hz x 2.5 ms, 100 Hz x 250 us,
1 kHz x 25 us) on every rank, arrival skew, and one noisy rank next to the root (rank 1: child of
root 0 and parent of rank 3 in the 4-rank binomial tree) vs at a leaf (rank 3). Native and adaptcoll
run interleaved under the same injector in each launch. Skew sleeps (mode=sleep): with 4 ranks on
2 cores a spinning delay would steal the core from the ranks it shares it with.
"""

SIZES = "4K,1M,16M"
BASE = [
    "-c",
    "bcast,reduce,allreduce",
    "--sizes",
    SIZES,
    "--budget",
    "1.0",
    "--min-iterations",
    "10",
    "--seed",
    "1",
    "--impl",
    "native",
    "--impl",
    "adaptcoll",
]
VARIANTS = {
    "quiet": [],
    "detours-10Hz-2.5ms": ["--noise", "10Hz x 2.5ms"],
    "detours-100Hz-250us": ["--noise", "100Hz x 250us"],
    "detours-1kHz-25us": ["--noise", "1kHz x 25us"],
    "skew-uniform-500us": ["--skew", "uniform:500us,mode=sleep"],
    # one noisy rank, 10% noise so that the few-second runs see it: next to the root vs at a leaf
    "one-noisy-rank1-near-root": ["--noise", "100Hz x 1ms", "--noise-ranks", "1"],
    "one-noisy-rank3-leaf": ["--noise", "100Hz x 1ms", "--noise-ranks", "3"],
}

EXPERIMENT = {
    "name": "noise",
    "description": "2.5% detour noise in three shapes, arrival skew, one noisy rank near the root vs at a leaf",
    "ranks": [4],
    "launches": 3,
    "timeout_s": 900,
    "runs": [{"name": name, "args": BASE + extra} for name, extra in VARIANTS.items()],
}
