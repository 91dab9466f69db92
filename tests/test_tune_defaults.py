"""The shipped rule (no tuning table) as a function of communicator size and ranks per core, checked
against every measurement we have: wherever the rule serves a measured size, the configuration it
serves with was measured faster than native there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptcoll.runtime.settings import parse_size
from adaptcoll.tune import defaults
from adaptcoll.tune.defaults import (
    BINOMIAL_32K,
    BINOMIAL_64K,
    BINOMIAL_128K,
    BINOMIAL_512K,
    FINE,
    FOUR_TREES_16K,
    FOUR_TREES_32K,
    NODE_TREES_32K,
    NODE_TREES_64K,
    PIPELINE,
    SHIPPED,
    SIX_TREES_32K,
    SIXTEEN,
    TREE_128K,
    TWO_TREE,
    TWO_TREE_16K,
    TWO_TREE_32K,
    WHOLE_MESSAGE,
    default_bands,
)
from adaptcoll.tune.table import band_index

K, M = 1 << 10, 1 << 20
SIZES = (4 * K, 64 * K, 256 * K, M, 4 * M, 16 * M, 64 * M)

# (ranks, ranks per core, collective, config, {size: ratio native/adaptcoll}) -- measured medians:
# 2-core machine: bench/RESULTS.md (core_defaults, 5 launches: 4 ranks with native_below=0; 2 ranks) and
# the tuner's table (bench/results/tuning_dev.json: candidate binomial 512K x 4);
# 16-core node: /work/shared/measurements/16core-2026-11-23 (osu_dataset_n4/n8/n16 with MPICH,
# osu16_variants, peers16_ompi_tuned/adapt with Open MPI as the native collective).
MEASURED = [
    (4, 2.0, "bcast", SHIPPED, {4 * K: 0.09, 64 * K: 0.68, M: 0.80, 4 * M: 1.07, 16 * M: 1.62, 64 * M: 1.44}),
    (4, 2.0, "reduce", SHIPPED, {4 * K: 0.70, 64 * K: 0.90, M: 1.17, 4 * M: 1.11, 16 * M: 1.87, 64 * M: 3.38}),
    (4, 2.0, "allreduce", SHIPPED, {4 * K: 0.37, 64 * K: 0.53, M: 0.56, 4 * M: 1.18, 16 * M: 1.49, 64 * M: 2.65}),
    (2, 1.0, "bcast", SHIPPED, {M: 0.72, 4 * M: 0.85, 16 * M: 1.16, 64 * M: 0.92}),
    (2, 1.0, "reduce", SHIPPED, {M: 1.62, 4 * M: 1.24, 16 * M: 2.01, 64 * M: 7.21}),
    (2, 1.0, "allreduce", SHIPPED, {4 * M: 1.34, 16 * M: 1.65, 64 * M: 3.53}),
    # 2-core machine, python -m adaptcoll.tune (bench/results/tuning_dev.json): the shipped configuration
    (4, 2.0, "bcast", SHIPPED, {M: 0.83, 4 * M: 1.04, 16 * M: 1.38, 64 * M: 1.43}),
    (4, 2.0, "reduce", SHIPPED, {64 * K: 0.55, 256 * K: 0.89, M: 2.73, 4 * M: 2.53, 16 * M: 2.85, 64 * M: 3.01}),
    (4, 2.0, "allreduce", SHIPPED, {256 * K: 0.74, M: 0.68, 4 * M: 1.21, 16 * M: 1.50, 64 * M: 2.15}),
    (2, 1.0, "bcast", SHIPPED, {M: 0.53, 4 * M: 0.69, 16 * M: 0.92, 64 * M: 0.96}),
    (2, 1.0, "reduce", SHIPPED, {64 * K: 0.47, 256 * K: 1.21, M: 3.84, 4 * M: 3.52, 16 * M: 5.40, 64 * M: 6.17}),
    (2, 1.0, "allreduce", SHIPPED, {256 * K: 0.86, M: 0.79, 4 * M: 1.25, 16 * M: 1.94, 64 * M: 3.21}),
    # 2-core machine, `python -m adaptcoll.check --full` (issue 20: glibc malloc pinned, every implementation
    # on the same buffers; bench/results/check_full_2ranks_mpich.json). Launches of --only speed in fresh
    # processes saw Reduce 256K / 1M at 1.02-1.26 / 1.62-1.76: native's state decides, so the rule serves
    # Reduce only from 4M there (bench/RESULTS.md, issue 20)
    (2, 1.0, "reduce", SHIPPED, {256 * K: 0.61, M: 0.91, 4 * M: 1.48, 16 * M: 1.83, 64 * M: 5.44}),
    (2, 1.0, "allreduce", SHIPPED, {4 * M: 1.04, 16 * M: 1.50, 64 * M: 2.82}),
    (4, 1.0, "bcast", SHIPPED, {64 * K: 0.29, M: 0.81, 4 * M: 1.08, 16 * M: 1.37, 64 * M: 1.39}),
    (4, 1.0, "bcast", FINE, {64 * K: 0.30, M: 0.81, 4 * M: 1.04, 16 * M: 1.34, 64 * M: 1.43}),
    (4, 1.0, "reduce", SHIPPED, {64 * K: 0.50, M: 1.04, 4 * M: 0.99, 16 * M: 1.01, 64 * M: 2.43}),
    (4, 1.0, "reduce", PIPELINE, {64 * K: 0.38, M: 0.81, 4 * M: 1.10, 16 * M: 1.51, 64 * M: 3.85}),
    (4, 1.0, "allreduce", SHIPPED, {64 * K: 0.30, M: 0.79, 4 * M: 1.23, 16 * M: 1.54, 64 * M: 1.70}),
    (4, 1.0, "allreduce", PIPELINE, {64 * K: 0.28, M: 0.68, 4 * M: 1.15, 16 * M: 1.27, 64 * M: 1.52}),
    (8, 1.0, "bcast", SHIPPED, {64 * K: 0.58, M: 1.03, 4 * M: 1.34, 16 * M: 1.51, 64 * M: 1.41}),
    (8, 1.0, "bcast", FINE, {64 * K: 0.61, M: 1.12, 4 * M: 1.40, 16 * M: 1.50, 64 * M: 1.62}),
    (8, 1.0, "reduce", SHIPPED, {64 * K: 0.54, M: 0.76, 4 * M: 0.73, 16 * M: 0.79, 64 * M: 1.42}),
    (8, 1.0, "reduce", PIPELINE, {64 * K: 0.32, M: 0.49, 4 * M: 1.07, 16 * M: 1.69, 64 * M: 3.57}),
    (8, 1.0, "allreduce", SHIPPED, {64 * K: 0.23, M: 0.57, 4 * M: 1.00, 16 * M: 1.00, 64 * M: 1.28}),
    (8, 1.0, "allreduce", PIPELINE, {64 * K: 0.18, M: 0.36, 4 * M: 1.24, 16 * M: 1.43, 64 * M: 1.63}),
    (16, 1.0, "bcast", SHIPPED, {64 * K: 0.54, M: 0.91, 4 * M: 1.02, 16 * M: 1.30, 64 * M: 1.33}),
    (16, 1.0, "bcast", FINE, {64 * K: 0.55, M: 1.09, 4 * M: 1.28, 16 * M: 1.31, 64 * M: 1.41}),
    (16, 1.0, "bcast", PIPELINE, {64 * K: 0.20, M: 0.39, 4 * M: 0.84, 16 * M: 1.35, 64 * M: 1.52}),
    (16, 1.0, "reduce", SHIPPED, {64 * K: 0.60, M: 0.87, 4 * M: 0.90, 16 * M: 0.82, 64 * M: 1.20}),
    (16, 1.0, "reduce", PIPELINE, {64 * K: 0.22, M: 0.37, 4 * M: 1.02, 16 * M: 1.62, 64 * M: 3.76}),
    (16, 1.0, "allreduce", SHIPPED, {64 * K: 0.23, M: 0.49, 4 * M: 0.90, 16 * M: 1.01, 64 * M: 0.99}),
    (16, 1.0, "allreduce", PIPELINE, {64 * K: 0.09, M: 0.23, 4 * M: 0.86, 16 * M: 1.44, 64 * M: 1.41}),
    (16, 1.0, "bcast", SIXTEEN, {M: 0.80, 16 * M: 1.45}),  # osu16_variants
    (16, 1.0, "reduce", SIXTEEN, {M: 0.92, 16 * M: 1.43}),
    (16, 1.0, "allreduce", SIXTEEN, {M: 0.98, 16 * M: 1.45}),
    (16, 1.0, "bcast", SIXTEEN, {M: 0.50, 16 * M: 1.16, 64 * M: 1.33}),  # vs Open MPI tuned
    (16, 1.0, "reduce", SIXTEEN, {M: 0.86, 16 * M: 2.19, 64 * M: 1.69}),
    (16, 1.0, "allreduce", SIXTEEN, {M: 0.42, 16 * M: 1.31, 64 * M: 1.45}),
    (16, 1.0, "reduce", PIPELINE, {M: 0.25, 16 * M: 3.53, 64 * M: 4.63}),
    (16, 1.0, "bcast", SIXTEEN, {M: 1.20, 16 * M: 1.46, 64 * M: 1.48}),  # vs Open MPI coll/adapt
    (16, 1.0, "reduce", SIXTEEN, {M: 0.77, 16 * M: 0.89, 64 * M: 1.27}),
    (16, 1.0, "allreduce", SIXTEEN, {M: 0.41, 16 * M: 1.31, 64 * M: 1.41}),
    (16, 1.0, "reduce", PIPELINE, {M: 0.28, 16 * M: 1.48, 64 * M: 3.38}),
    # 16-core node again, 2026-11-25 (bench/results/device_2026-11-25/cpu, bench/RESULTS.md "8 and 16 ranks
    # on a 16-core node, re-measured"): the rule of that day (8 ranks: Bcast from 1M, Allreduce from 4M)
    (8, 1.0, "bcast", FINE, {M: 0.77, 4 * M: 1.15, 16 * M: 1.26, 64 * M: 1.68}),
    (8, 1.0, "bcast", FINE, {M: 0.88, 2 * M: 1.07, 4 * M: 1.16}),
    (8, 1.0, "allreduce", PIPELINE, {4 * M: 0.95, 16 * M: 1.29, 64 * M: 1.68}),
    (8, 1.0, "allreduce", PIPELINE, {4 * M: 1.02}),
    (8, 1.0, "allreduce", PIPELINE, {4 * M: 1.03, 8 * M: 1.24}),
    (8, 1.0, "reduce", PIPELINE, {4 * M: 1.08, 16 * M: 1.68, 64 * M: 3.83}),
    (8, 1.0, "reduce", PIPELINE, {4 * M: 1.03, 8 * M: 1.25}),
    (16, 1.0, "bcast", FINE, {4 * M: 1.19}),
    (16, 1.0, "bcast", FINE, {2 * M: 0.99, 4 * M: 1.16}),
    (16, 1.0, "bcast", SIXTEEN, {8 * M: 1.34, 16 * M: 1.47, 64 * M: 1.59}),
    (16, 1.0, "reduce", PIPELINE, {16 * M: 1.65, 64 * M: 4.01}),
    (16, 1.0, "allreduce", SIXTEEN, {16 * M: 1.47, 64 * M: 1.73}),
]

# The same under Open MPI 5.0.11 (native = `tuned`), 16 ranks, 2026-11-25: the rule's Open MPI case
OPEN_MPI = "Open MPI v5.0.11"
MEASURED_OPEN_MPI = [
    (16, 1.0, "bcast", FINE, {4 * M: 0.84}),
    (16, 1.0, "bcast", FINE, {4 * M: 0.81}),
    (16, 1.0, "bcast", SIXTEEN, {8 * M: 0.95, 16 * M: 1.13}),
    (16, 1.0, "bcast", SIXTEEN, {16 * M: 1.15, 64 * M: 1.26}),
    (16, 1.0, "bcast", SIXTEEN, {M: 0.50, 16 * M: 1.16, 64 * M: 1.33}),  # 2026-11-23, peers16_ompi_tuned
    (16, 1.0, "reduce", PIPELINE, {16 * M: 2.69, 64 * M: 4.69}),
    (16, 1.0, "reduce", PIPELINE, {M: 0.25, 16 * M: 3.53, 64 * M: 4.63}),
    (16, 1.0, "allreduce", SIXTEEN, {16 * M: 1.27, 64 * M: 1.56}),
    (16, 1.0, "allreduce", SIXTEEN, {M: 0.42, 16 * M: 1.31, 64 * M: 1.45}),
]


# The compiled progress path on every rank, 2026-11-27, the 16-core node (H200 node; MPICH 5.0.2 unless
# OPEN_MPI; bench/results/device_2026-11-27/compiled, bench/RESULTS.md "The compiled progress path"): the
# rule's configurations served at every size (`native_below=0`), the rule as shipped, and binomial 128K
# uncapped. (ranks, library, collective, config, {size: ratio}).
MEASURED_COMPILED = [
    # 2 ranks, the 2-core machine, three launches of bench/sweep.py with every size served (2026-11-27)
    (2, "", "reduce", SHIPPED, {64 * K: 1.39, 128 * K: 1.76, 256 * K: 1.31, 512 * K: 1.45, M: 1.23, 2 * M: 1.23}),
    (2, "", "reduce", SHIPPED, {64 * K: 1.85, 128 * K: 2.33, 256 * K: 1.96, 512 * K: 2.45, M: 2.53, 2 * M: 1.68}),
    (2, "", "reduce", SHIPPED, {64 * K: 1.89, 128 * K: 2.35, 256 * K: 2.01, 512 * K: 2.23, M: 2.37, 2 * M: 1.83}),
    (2, "", "reduce", SHIPPED, {4 * M: 1.66, 8 * M: 2.14, 16 * M: 2.08, 32 * M: 3.99, 64 * M: 6.31}),
    (2, "", "reduce", SHIPPED, {4 * M: 1.75, 8 * M: 2.18, 16 * M: 2.13, 32 * M: 4.28, 64 * M: 5.12}),
    (2, "", "reduce", SHIPPED, {4 * M: 1.69, 8 * M: 2.18, 16 * M: 2.16, 32 * M: 4.22, 64 * M: 5.74}),
    (2, "", "allreduce", SHIPPED, {64 * K: 0.85, 128 * K: 0.78, 256 * K: 1.01, 512 * K: 1.04, M: 1.63, 2 * M: 1.53}),
    (2, "", "allreduce", SHIPPED, {64 * K: 0.78, 128 * K: 0.85, 256 * K: 0.92, 512 * K: 0.9, M: 1.51, 2 * M: 1.5}),
    (2, "", "allreduce", SHIPPED, {64 * K: 0.86, 128 * K: 0.82, 256 * K: 0.95, 512 * K: 0.91, M: 1.65, 2 * M: 1.59}),
    (2, "", "allreduce", SHIPPED, {4 * M: 1.73, 8 * M: 2.09, 16 * M: 1.98, 32 * M: 1.86, 64 * M: 3.11}),
    (2, "", "allreduce", SHIPPED, {4 * M: 1.64, 8 * M: 1.83, 16 * M: 2.02, 32 * M: 1.84, 64 * M: 3.19}),
    (2, "", "allreduce", SHIPPED, {4 * M: 1.53, 8 * M: 1.84, 16 * M: 1.95, 32 * M: 1.72, 64 * M: 3.0}),
    # 2 ranks, 2026-11-28: Allreduce with binomial 128K uncapped and 512K x 4, three launches of bench/sweep.py
    # (bench/results/rule_2ranks_compiled_128k/)
    (
        2,
        "",
        "allreduce",
        BINOMIAL_128K,
        {64 * K: 0.99, 128 * K: 0.95, 256 * K: 2.50, 512 * K: 1.32, M: 1.18, 2 * M: 1.23},
    ),
    (2, "", "allreduce", BINOMIAL_128K, {4 * M: 1.39, 8 * M: 1.47, 16 * M: 1.63, 32 * M: 2.87, 64 * M: 2.98}),
    (
        2,
        "",
        "allreduce",
        BINOMIAL_128K,
        {64 * K: 1.30, 128 * K: 0.95, 256 * K: 2.48, 512 * K: 1.37, M: 1.32, 2 * M: 1.24},
    ),
    (2, "", "allreduce", BINOMIAL_128K, {4 * M: 1.37, 8 * M: 1.49, 16 * M: 1.56, 32 * M: 2.88, 64 * M: 2.89}),
    (
        2,
        "",
        "allreduce",
        BINOMIAL_128K,
        {64 * K: 1.33, 128 * K: 0.97, 256 * K: 2.78, 512 * K: 1.24, M: 1.23, 2 * M: 1.21},
    ),
    (2, "", "allreduce", BINOMIAL_128K, {4 * M: 1.31, 8 * M: 1.50, 16 * M: 1.52, 32 * M: 2.71, 64 * M: 2.64}),
    # 2 ranks, 2026-11-28, one buffer pair for all implementations: Reduce below 64K, three launches
    # (bench/results/rule_2ranks_shared/red_small.json)
    (2, "", "reduce", SHIPPED, {8 * K: 0.68, 16 * K: 1.29, 32 * K: 1.36, 64 * K: 1.59}),
    (2, "", "reduce", SHIPPED, {8 * K: 0.62, 16 * K: 1.16, 32 * K: 1.06, 64 * K: 1.16}),
    (2, "", "reduce", SHIPPED, {8 * K: 0.61, 16 * K: 1.18, 32 * K: 1.06, 64 * K: 1.14}),
    # 2 ranks, 2026-11-28, one buffer pair for all implementations: binomial 64K uncapped, three launches
    # (bench/results/rule_2ranks_shared/ar_small.json)
    (2, "", "allreduce", BINOMIAL_64K, {32 * K: 0.80, 64 * K: 1.54, 128 * K: 1.17, 256 * K: 2.21}),
    (2, "", "allreduce", BINOMIAL_64K, {32 * K: 0.80, 64 * K: 1.53, 128 * K: 1.19, 256 * K: 2.25}),
    (2, "", "allreduce", BINOMIAL_64K, {32 * K: 0.77, 64 * K: 1.48, 128 * K: 1.17, 256 * K: 2.17}),
    (2, "", "allreduce", BINOMIAL_32K, {32 * K: 0.81, 64 * K: 1.85, 128 * K: 1.05, 256 * K: 1.92}),
    (2, "", "allreduce", BINOMIAL_32K, {32 * K: 0.80, 64 * K: 1.86, 128 * K: 1.04, 256 * K: 1.93}),
    (2, "", "allreduce", BINOMIAL_32K, {32 * K: 0.79, 64 * K: 1.78, 128 * K: 1.03, 256 * K: 1.88}),
    (2, "", "allreduce", SHIPPED, {64 * K: 0.95, 128 * K: 0.87, 256 * K: 1.93, 512 * K: 0.97, M: 1.40, 2 * M: 1.43}),
    (2, "", "allreduce", SHIPPED, {4 * M: 1.58, 8 * M: 1.68, 16 * M: 1.75, 32 * M: 2.96, 64 * M: 2.83}),
    (2, "", "allreduce", SHIPPED, {64 * K: 1.25, 128 * K: 0.89, 256 * K: 1.74, 512 * K: 0.93, M: 1.45, 2 * M: 1.42}),
    (2, "", "allreduce", SHIPPED, {4 * M: 1.51, 8 * M: 1.68, 16 * M: 1.75, 32 * M: 3.08, 64 * M: 2.92}),
    (2, "", "allreduce", SHIPPED, {64 * K: 1.28, 128 * K: 0.93, 256 * K: 1.89, 512 * K: 0.95, M: 1.45, 2 * M: 1.37}),
    (2, "", "allreduce", SHIPPED, {4 * M: 1.55, 8 * M: 1.68, 16 * M: 1.71, 32 * M: 3.08, 64 * M: 3.26}),
    # 2 ranks, 2026-12-02: Reduce with binomial 512K uncapped, three launches of bench/sweep.py
    # (bench/results/rule_2ranks_uncapped_2026-12-02/; 512K x 4 in the same launches: 1.46-3.34 at 4M-64M)
    (
        2,
        "",
        "reduce",
        BINOMIAL_512K,
        {M: 1.72, 2 * M: 1.73, 4 * M: 1.78, 8 * M: 1.74, 16 * M: 4.09, 32 * M: 3.61, 64 * M: 3.39},
    ),
    (
        2,
        "",
        "reduce",
        BINOMIAL_512K,
        {M: 1.70, 2 * M: 1.71, 4 * M: 1.71, 8 * M: 1.70, 16 * M: 4.01, 32 * M: 3.67, 64 * M: 3.39},
    ),
    (
        2,
        "",
        "reduce",
        BINOMIAL_512K,
        {M: 1.73, 2 * M: 1.73, 4 * M: 1.72, 8 * M: 1.70, 16 * M: 4.43, 32 * M: 3.74, 64 * M: 3.36},
    ),
    (2, "", "reduce", SHIPPED, {4 * M: 1.61, 8 * M: 1.47, 16 * M: 3.04, 32 * M: 3.24, 64 * M: 3.10}),
    (2, "", "reduce", SHIPPED, {4 * M: 1.54, 8 * M: 1.46, 16 * M: 3.06, 32 * M: 3.30, 64 * M: 3.10}),
    (2, "", "reduce", SHIPPED, {4 * M: 1.54, 8 * M: 1.46, 16 * M: 3.34, 32 * M: 3.30, 64 * M: 3.10}),
    # 2 ranks, Open MPI 5.0.11 against tuned, three launches with every size served (2026-11-27)
    (2, OPEN_MPI, "allreduce", SHIPPED, {M: 1.31, 2 * M: 1.41, 4 * M: 1.51, 8 * M: 1.4, 16 * M: 1.52, 64 * M: 2.77}),
    (2, OPEN_MPI, "allreduce", SHIPPED, {M: 1.14, 2 * M: 1.04, 4 * M: 1.13, 8 * M: 1.26, 16 * M: 1.48, 64 * M: 2.63}),
    (2, OPEN_MPI, "allreduce", SHIPPED, {M: 1.14, 2 * M: 1.03, 4 * M: 1.11, 8 * M: 1.44, 16 * M: 1.44, 64 * M: 2.93}),
    (2, OPEN_MPI, "reduce", SHIPPED, {M: 0.84, 2 * M: 0.82, 4 * M: 0.87, 8 * M: 0.71, 16 * M: 1.09, 64 * M: 0.89}),
    (2, OPEN_MPI, "reduce", SHIPPED, {M: 0.88, 2 * M: 0.88, 4 * M: 0.81, 8 * M: 0.7, 16 * M: 1.0, 64 * M: 0.88}),
    (2, OPEN_MPI, "reduce", SHIPPED, {M: 0.82, 2 * M: 0.81, 4 * M: 0.87, 8 * M: 0.69, 16 * M: 1.03, 64 * M: 0.89}),
    # 16 ranks, launches 1 and 2 (MPICH), 1 (Open MPI): the rule of the Python engine then
    (16, "", "bcast", FINE, {4 * M: 1.45}),
    (16, "", "bcast", FINE, {4 * M: 1.49}),
    (16, "", "bcast", SIXTEEN, {16 * M: 1.71}),
    (16, "", "bcast", SIXTEEN, {16 * M: 1.64}),
    (16, "", "reduce", BINOMIAL_128K, {M: 0.68, 4 * M: 1.48, 16 * M: 1.96}),
    (16, "", "reduce", BINOMIAL_128K, {M: 0.67, 4 * M: 1.47, 16 * M: 2.10}),
    (16, "", "reduce", PIPELINE, {4 * M: 0.95, 16 * M: 1.69}),
    (16, "", "reduce", PIPELINE, {4 * M: 0.89, 16 * M: 1.79}),
    (16, "", "allreduce", BINOMIAL_128K, {M: 0.76, 4 * M: 1.31, 16 * M: 1.58}),
    (16, "", "allreduce", BINOMIAL_128K, {M: 0.79, 4 * M: 1.37, 16 * M: 1.57}),
    (16, "", "allreduce", SIXTEEN, {16 * M: 1.59}),
    (16, "", "allreduce", SIXTEEN, {16 * M: 1.59}),
    (16, OPEN_MPI, "reduce", BINOMIAL_128K, {M: 0.60, 4 * M: 1.39, 16 * M: 2.16}),
    (16, OPEN_MPI, "reduce", PIPELINE, {16 * M: 1.92}),
    (16, OPEN_MPI, "allreduce", BINOMIAL_128K, {M: 0.73, 4 * M: 1.23, 16 * M: 1.41}),
    (16, OPEN_MPI, "allreduce", SIXTEEN, {16 * M: 1.27}),
    (16, OPEN_MPI, "bcast", SIXTEEN, {16 * M: 1.20}),
    # 16 ranks, launch 3 (run4.sh): Reduce 4M with 128K tied (native's Reduce fast that launch)
    (16, "", "bcast", FINE, {2 * M: 1.15, 4 * M: 1.50}),
    (16, "", "bcast", SIXTEEN, {8 * M: 1.49}),
    (16, "", "reduce", BINOMIAL_128K, {2 * M: 0.69, 4 * M: 0.98, 8 * M: 1.64}),
    (16, "", "reduce", BINOMIAL_128K, {4 * M: 0.94}),  # as the rule served it then
    (16, "", "reduce", PIPELINE, {8 * M: 1.36}),
    (16, "", "allreduce", BINOMIAL_128K, {2 * M: 1.02, 4 * M: 1.42, 8 * M: 1.39}),
    (16, "", "allreduce", BINOMIAL_128K, {4 * M: 1.51}),
    (16, "", "allreduce", SIXTEEN, {8 * M: 1.53}),
    # 16 ranks, launches 4-6 (run5.sh): 4M only
    (16, "", "reduce", BINOMIAL_128K, {4 * M: 1.49}),
    (16, "", "reduce", BINOMIAL_128K, {4 * M: 1.58}),
    (16, "", "reduce", BINOMIAL_128K, {4 * M: 1.52}),
    (16, "", "allreduce", BINOMIAL_128K, {4 * M: 1.22}),  # as the rule serves it
    (16, "", "allreduce", BINOMIAL_128K, {4 * M: 1.25}),
    (16, "", "allreduce", BINOMIAL_128K, {4 * M: 1.28}),
    # 8 ranks, two launches (run4.sh)
    (8, "", "bcast", FINE, {M: 0.85, 2 * M: 1.23, 4 * M: 1.32, 8 * M: 1.62, 16 * M: 1.99}),
    (8, "", "bcast", FINE, {M: 1.08, 2 * M: 1.31, 4 * M: 1.40, 8 * M: 1.42, 16 * M: 1.74}),
    (8, "", "reduce", PIPELINE, {M: 0.55, 2 * M: 0.76, 4 * M: 1.25, 8 * M: 1.41, 16 * M: 1.36}),
    (8, "", "reduce", PIPELINE, {M: 0.54, 2 * M: 0.74, 4 * M: 1.18, 8 * M: 1.58, 16 * M: 1.43}),
    (8, "", "allreduce", PIPELINE, {M: 0.45, 2 * M: 0.77, 4 * M: 1.33, 8 * M: 1.60, 16 * M: 1.57}),
    (8, "", "allreduce", PIPELINE, {M: 0.35, 2 * M: 0.62, 4 * M: 1.16, 8 * M: 1.45, 16 * M: 1.47}),
    (8, "", "reduce", BINOMIAL_128K, {M: 0.90, 2 * M: 1.09, 4 * M: 1.20, 8 * M: 1.37, 16 * M: 1.46}),
    (8, "", "reduce", BINOMIAL_128K, {M: 0.70, 2 * M: 1.09, 4 * M: 1.57, 8 * M: 1.63, 16 * M: 1.32}),
    (8, "", "allreduce", BINOMIAL_128K, {M: 0.99, 2 * M: 1.08, 4 * M: 1.25, 8 * M: 1.54, 16 * M: 1.54}),
    (8, "", "allreduce", BINOMIAL_128K, {M: 0.85, 2 * M: 0.96, 4 * M: 1.05, 8 * M: 1.32, 16 * M: 1.35}),
    # 4 ranks, one launch (run4.sh): the pipeline's Reduce 4M tied or lost
    (4, "", "bcast", SHIPPED, {M: 0.66, 2 * M: 0.81, 4 * M: 1.08, 8 * M: 1.17, 16 * M: 1.44}),
    (4, "", "reduce", PIPELINE, {M: 0.71, 2 * M: 0.83, 4 * M: 0.99, 8 * M: 1.30, 16 * M: 1.21}),
    (4, "", "reduce", PIPELINE, {4 * M: 0.95, 8 * M: 1.07}),  # as the rule served it
    (4, "", "allreduce", SHIPPED, {M: 0.68, 2 * M: 1.08, 4 * M: 1.10, 8 * M: 1.50, 16 * M: 1.63}),
]


def _choice(
    collective: str,
    ranks: int,
    per_core: float,
    nbytes: int,
    library: str = "",
    per_node: int = 0,
    compiled: bool = False,
):
    """The rule's config at `nbytes` (None: native); `per_node` > 0: that many ranks per node, several nodes;
    `compiled`: every rank runs the compiled progress path."""
    nodes = -(-ranks // per_node) if per_node else 1
    bands = default_bands(collective, ranks, per_core, library, nodes, per_node or ranks, compiled)
    band = bands[band_index([b.start for b in bands], nbytes)]
    return band.config if band.serve else None


@pytest.mark.parametrize("ranks, per_core, collective, config, ratios", MEASURED)
def test_the_rule_serves_only_configurations_measured_faster(ranks, per_core, collective, config, ratios):
    for nbytes, ratio in ratios.items():
        if _choice(collective, ranks, per_core, nbytes) == config:
            assert ratio >= 1.0, (ranks, per_core, collective, nbytes, config, ratio)


@pytest.mark.parametrize("ranks, per_core, collective, config, ratios", MEASURED_OPEN_MPI)
def test_the_open_mpi_case_serves_only_configurations_measured_faster(ranks, per_core, collective, config, ratios):
    for nbytes, ratio in ratios.items():
        if _choice(collective, ranks, per_core, nbytes, OPEN_MPI) == config:
            assert ratio >= 1.0, (ranks, per_core, collective, nbytes, config, ratio)
    assert defaults.case(ranks, per_core, OPEN_MPI) == "9+ ranks, Open MPI"
    assert _choice("bcast", ranks, per_core, 8 * M, OPEN_MPI) is None  # MPICH's case serves it
    assert _choice("bcast", ranks, per_core, 8 * M) == SIXTEEN


@pytest.mark.parametrize("ranks, library, collective, config, ratios", MEASURED_COMPILED)
def test_the_compiled_rule_serves_only_configurations_measured_faster(ranks, library, collective, config, ratios):
    for nbytes, ratio in ratios.items():
        if _choice(collective, ranks, 1.0, nbytes, library, compiled=True) == config:
            assert ratio >= 1.0, (ranks, library, collective, nbytes, config, ratio)


def test_the_compiled_rule_serves_what_was_measured_with_the_compiled_engine():
    """Every size the compiled bands serve at 4, 8 and 16 ranks has a compiled-engine measurement of that
    configuration there; and what changed against the Python engine's rule."""
    for ranks, library in ((2, ""), (2, OPEN_MPI), (4, ""), (8, ""), (16, ""), (16, OPEN_MPI)):
        rows = [
            (c, cfg, n) for r, lib, c, cfg, ratios in MEASURED_COMPILED if (r, lib) == (ranks, library) for n in ratios
        ]
        for collective in ("bcast", "reduce", "allreduce"):
            sizes = {n for c, _, n in rows if c == collective}
            for nbytes in sorted(sizes):
                chosen = _choice(collective, ranks, 1.0, nbytes, library, compiled=True)
                if chosen is not None:
                    assert (collective, chosen, nbytes) in rows, (ranks, library, collective, nbytes, chosen)
    assert _choice("allreduce", 16, 1.0, 4 * M, compiled=True) == BINOMIAL_128K  # Python engine: from 8M
    assert _choice("allreduce", 16, 1.0, 4 * M) is None
    assert _choice("allreduce", 8, 1.0, 4 * M, compiled=True) == PIPELINE  # Python engine: from 8M
    assert _choice("reduce", 4, 1.0, 4 * M, compiled=True) is None  # Python engine: served from 4M
    assert _choice("reduce", 4, 1.0, 4 * M) == PIPELINE
    assert _choice("reduce", 16, 1.0, 4 * M, compiled=True) is None
    assert _choice("allreduce", 16, 1.0, M, compiled=True) is None
    assert _choice("bcast", 2, 1.0, 16 * M, compiled=True) == _choice("bcast", 2, 1.0, 16 * M)
    assert _choice("reduce", 2, 1.0, 64 * K, compiled=True) == SHIPPED  # Python engine: from 4M
    assert _choice("reduce", 2, 1.0, 16 * K, compiled=True) == SHIPPED  # 2026-11-28: from 16K
    assert _choice("reduce", 2, 1.0, 8 * K, compiled=True) is None
    assert _choice("reduce", 2, 1.0, 2 * M, compiled=True) == SHIPPED  # (the same four 512K segments)
    assert _choice("reduce", 2, 1.0, 4 * M, compiled=True) == BINOMIAL_512K  # 2026-12-02: uncapped from 4M
    assert _choice("reduce", 2, 1.0, 64 * M, compiled=True) == BINOMIAL_512K
    assert _choice("reduce", 2, 1.0, 64 * K) is None
    assert _choice("allreduce", 2, 1.0, M, compiled=True) == SHIPPED
    assert _choice("allreduce", 2, 1.0, 512 * K, compiled=True) == BINOMIAL_128K  # 2026-11-28: from 256K
    assert _choice("allreduce", 2, 1.0, 128 * K, compiled=True) == BINOMIAL_64K  # 2026-11-28: from 64K
    assert _choice("allreduce", 2, 1.0, 64 * K, compiled=True) == BINOMIAL_32K
    assert _choice("allreduce", 2, 1.0, 32 * K, compiled=True) is None
    assert "compiled engine" in defaults.describe(16, 1.0, compiled=True)


def test_every_served_measured_size_has_a_measurement_of_the_chosen_configuration():
    measured = {(r, pc, c, cfg, n) for r, pc, c, cfg, ratios in MEASURED for n in ratios}
    for ranks, per_core in ((2, 1.0), (4, 1.0), (8, 1.0), (16, 1.0), (4, 2.0)):
        for collective in ("bcast", "reduce", "allreduce"):
            for nbytes in SIZES:
                chosen = _choice(collective, ranks, per_core, nbytes)
                sizes_measured = {n for r, pc, c, _, n in measured if (r, pc, c) == (ranks, per_core, collective)}
                if chosen is not None and nbytes in sizes_measured:
                    assert (ranks, per_core, collective, chosen, nbytes) in measured, (ranks, collective, nbytes)


@pytest.mark.parametrize(
    "ranks, per_core, expected",
    [
        # native below (bcast, reduce, allreduce); None = always native
        (4, 2.0, (4 * M, M, 4 * M)),  # ranks share cores (the 2-core machine at 4 ranks)
        (3, 1.5, (4 * M, M, 4 * M)),
        (2, 1.0, (None, 4 * M, 4 * M)),  # a core per rank, 2 ranks
        (1, 1.0, (None, 4 * M, 4 * M)),
        (3, 1.0, (4 * M, 4 * M, 4 * M)),
        (4, 0.25, (4 * M, 4 * M, 4 * M)),
        (8, 1.0, (2 * M, 4 * M, 8 * M)),
        (16, 1.0, (4 * M, 8 * M, 8 * M)),
        (32, 1.0, (4 * M, 8 * M, 8 * M)),
        (64, 1.0, (16 * M, 4 * M, 16 * M)),  # the simulated cases
        (511, 1.0, (16 * M, 4 * M, 16 * M)),
        (512, 1.0, (16 * M, 8 * M, 16 * M)),
        (1024, 2.0, (16 * M, 8 * M, 16 * M)),
        (4096, 1.0, (16 * M, 8 * M, 16 * M)),
        (8191, 1.0, (16 * M, 8 * M, 16 * M)),
        (8192, 1.0, (64 * M, 16 * M, None)),
        (1 << 16, 1.0, (64 * M, 16 * M, None)),
    ],
)
def test_thresholds_by_size_and_ranks_per_core(ranks, per_core, expected):
    for collective, want in zip(("bcast", "reduce", "allreduce"), expected):
        bands = default_bands(collective, ranks, per_core)
        served = [b.start for b in bands if b.serve]
        assert (served[0] if served else None) == want, (ranks, per_core, collective)
        assert bands[0].start == 0 and not bands[0].serve


def test_sixteen_ranks_requirements_of_issue_11():
    # Reduce's threshold above 1 MiB; Allreduce native at 16 MiB unless a configuration measured faster
    # serves it (16 segments: 1.45 against MPICH, 1.31 against Open MPI's tuned and coll/adapt).
    assert _choice("reduce", 16, 1.0, M) is None and _choice("reduce", 16, 1.0, 4 * M) is None
    assert _choice("reduce", 16, 1.0, 16 * M) == PIPELINE and _choice("reduce", 16, 1.0, 64 * M) == PIPELINE
    assert _choice("allreduce", 16, 1.0, 16 * M) == SIXTEEN  # not the shipped 4-segment one (0.80-0.93)
    assert _choice("allreduce", 16, 1.0, 4 * M) is None


# (ranks, collective, config, {size: best lock-step time / adaptcoll time}) simulated with adaptcoll.simulate
# (built-in parameters, quiet; bench/RESULTS.md, "At scale: the rule against the lock-step algorithms"). The
# lock-step baselines: scatter + allgather (Bcast), MPICH's reduce-scatter + gather (Reduce), Rabenseifner
# (Allreduce): the fastest the simulator has at these points (binomial and ring ones are slower there).
SIMULATED = [
    (64, "bcast", TWO_TREE, {16 * M: 3.360 / 2.591}),
    (64, "reduce", TREE_128K, {4 * M: 2.127 / 1.817, 8 * M: 4.205 / 3.039}),
    (64, "reduce", TWO_TREE, {16 * M: 8.354 / 4.717}),
    (64, "allreduce", TWO_TREE, {16 * M: 8.357 / 6.987}),
    (64, "allreduce", TREE_128K, {4 * M: 2.129 / 2.366}),
    (256, "reduce", TREE_128K, {4 * M: 2.154 / 2.016}),
    (256, "allreduce", TWO_TREE, {16 * M: 8.441 / 7.389}),
    (512, "reduce", TREE_128K, {4 * M: 2.162 / 2.118}),
    (1024, "bcast", TWO_TREE, {4 * M: 0.911 / 1.217, 8 * M: 1.753 / 1.893, 16 * M: 3.434 / 3.053}),
    (1024, "reduce", TREE_128K, {4 * M: 2.168 / 2.210, 8 * M: 4.268 / 3.430}),
    (1024, "reduce", TWO_TREE, {16 * M: 8.464 / 5.417}),
    (1024, "allreduce", TREE_128K, {4 * M: 2.171 / 2.833}),
    (1024, "allreduce", TWO_TREE, {16 * M: 8.468 / 7.824}),
    (4096, "reduce", TREE_128K, {4 * M: 2.179 / 2.434}),
    (4096, "reduce", TWO_TREE, {16 * M: 8.479 / 5.808}),
    (4096, "bcast", TWO_TREE, {16 * M: 3.446 / 3.321, 64 * M: 13.519 / 9.206}),
    (16384, "bcast", TWO_TREE, {16 * M: 3.457 / 3.512}),
    (16384, "reduce", TWO_TREE, {16 * M: 8.490 / 6.183}),
]


@pytest.mark.parametrize("ranks, collective, config, ratios", SIMULATED)
def test_the_scale_cases_serve_only_configurations_simulated_faster(ranks, collective, config, ratios):
    for nbytes, ratio in ratios.items():
        if _choice(collective, ranks, 1.0, nbytes) == config:
            assert ratio >= 1.0, (ranks, collective, nbytes, ratio)


# (ranks, ranks per node, collective, config, {size: best lock-step time / adaptcoll time}) simulated with
# bench/nodes_rule.py (built-in parameters with ranks_per_node, quiet; bench/RESULTS.md, "The rule on several
# nodes"): the cases for several nodes.
SIMULATED_NODES = [
    (4, 1, "reduce", TWO_TREE, {4 * M: 1.45, 8 * M: 1.62, 16 * M: 1.74, 64 * M: 1.84}),
    (32, 1, "reduce", TWO_TREE, {4 * M: 1.20, 8 * M: 1.46, 16 * M: 1.66, 64 * M: 1.83}),
    (32, 1, "bcast", TWO_TREE, {4 * M: 0.85, 16 * M: 0.89, 64 * M: 1.18}),
    (32, 1, "allreduce", TWO_TREE, {4 * M: 1.01, 16 * M: 1.21, 64 * M: 1.39}),
    (4, 1, "allreduce", TWO_TREE, {4 * M: 1.34, 16 * M: 1.74, 64 * M: 1.86}),
    (8, 4, "reduce", TWO_TREE, {4 * M: 1.10, 8 * M: 1.20, 16 * M: 1.25, 64 * M: 1.29}),
    (16, 8, "reduce", TWO_TREE, {4 * M: 1.02, 8 * M: 1.14, 16 * M: 1.21, 64 * M: 1.28}),
    (32, 8, "reduce", TWO_TREE, {4 * M: 1.03, 8 * M: 1.13, 16 * M: 1.23, 64 * M: 1.28}),
    (48, 16, "reduce", TWO_TREE, {4 * M: 1.05, 8 * M: 1.14, 16 * M: 1.25, 64 * M: 1.29}),
    (32, 8, "bcast", TWO_TREE, {4 * M: 0.85, 16 * M: 0.62, 64 * M: 0.72}),
    (48, 1, "bcast", TWO_TREE, {4 * M: 0.94, 16 * M: 1.16, 64 * M: 1.20}),
    (48, 1, "allreduce", TWO_TREE, {4 * M: 1.12, 16 * M: 1.23, 64 * M: 1.31}),
    (32, 8, "allreduce", TWO_TREE, {4 * M: 0.60, 16 * M: 0.81, 64 * M: 0.84}),
    (8, 4, "allreduce", TWO_TREE, {4 * M: 1.10, 16 * M: 1.17, 64 * M: 1.23}),
    (64, 8, "bcast", TWO_TREE, {4 * M: 0.80, 16 * M: 0.99, 64 * M: 0.75}),
    (64, 8, "reduce", TREE_128K, {4 * M: 1.18, 16 * M: 1.13}),
    (64, 8, "reduce", TWO_TREE, {16 * M: 1.25, 64 * M: 1.30}),
    (64, 8, "allreduce", TWO_TREE, {4 * M: 0.54, 16 * M: 0.74, 64 * M: 0.75}),
    (256, 8, "bcast", TWO_TREE, {4 * M: 1.04, 16 * M: 1.06, 64 * M: 1.06}),
    (256, 8, "reduce", TREE_128K, {4 * M: 1.27, 16 * M: 1.39}),
    (256, 8, "reduce", TWO_TREE, {16 * M: 1.50, 64 * M: 1.40}),
    (256, 8, "allreduce", TWO_TREE, {4 * M: 0.52, 16 * M: 0.73, 64 * M: 0.80}),
    (1024, 8, "bcast", TWO_TREE, {16 * M: 1.46, 64 * M: 1.15}),
    (1024, 8, "reduce", TREE_128K, {8 * M: 1.41}),
    (1024, 8, "reduce", TWO_TREE, {16 * M: 1.65}),
    (1024, 8, "allreduce", TWO_TREE, {16 * M: 0.83, 64 * M: 0.83}),
    (8192, 8, "bcast", TWO_TREE, {64 * M: 4.30}),
    (8192, 8, "reduce", TWO_TREE, {16 * M: 1.55}),
]


@pytest.mark.parametrize("ranks, per_node, collective, config, ratios", SIMULATED_NODES)
def test_the_cases_for_several_nodes_serve_only_configurations_simulated_faster(
    ranks, per_node, collective, config, ratios
):
    for nbytes, ratio in ratios.items():
        if _choice(collective, ranks, 1.0, nbytes, per_node=per_node) == config:
            assert ratio >= 1.0, (ranks, per_node, collective, nbytes, ratio)


def test_several_nodes_change_only_what_was_simulated_to_lose():
    # one node (what was measured) keeps its rule; 3-63 ranks on nodes of several ranks: native Bcast and
    # Allreduce, Reduce two_tree from 8M; one rank per node: two_tree from 4M / 16M / 64M (Reduce /
    # Allreduce / Bcast); 2 ranks are one link either way; from 64 ranks only nodes of several ranks
    # change (one rank per node is what the scale cases were simulated with)
    assert defaults.case(16, 1.0, nodes=1, ranks_per_node=16) == "9+ ranks"
    assert defaults.case(32, 1.0, "MPICH", nodes=4, ranks_per_node=8) == "3-63 ranks, several nodes"
    assert defaults.case(32, 1.0, "Open MPI v5.0.11", nodes=4, ranks_per_node=8) == "3-63 ranks, several nodes"
    assert defaults.case(8, 1.0, nodes=8, ranks_per_node=1) == "3-63 ranks, one per node"
    for ranks in (3, 8, 32, 63):
        assert _choice("bcast", ranks, 1.0, 16 * M, per_node=1) is None
        assert _choice("bcast", ranks, 1.0, 64 * M, per_node=1) == TWO_TREE
        assert _choice("reduce", ranks, 1.0, 4 * M, per_node=1) == TWO_TREE
        assert _choice("allreduce", ranks, 1.0, 4 * M, per_node=1) is None
        assert _choice("allreduce", ranks, 1.0, 16 * M, per_node=1) == TWO_TREE
    assert defaults.case(2, 1.0, nodes=2, ranks_per_node=1) == "2 ranks"
    assert defaults.case(64, 1.0, nodes=64, ranks_per_node=1) == "64+ ranks"
    assert defaults.case(64, 1.0, nodes=8, ranks_per_node=8) == "64+ ranks, several per node"
    assert defaults.case(1024, 1.0, nodes=128, ranks_per_node=8) == "512+ ranks, several per node"
    assert defaults.case(8192, 1.0, nodes=1024, ranks_per_node=8) == "8K+ ranks, several per node"
    for ranks, per_node in ((8, 4), (16, 8), (32, 8), (48, 16)):
        for nbytes in (M, 4 * M, 16 * M, 64 * M, 256 * M):
            assert _choice("bcast", ranks, 1.0, nbytes, per_node=per_node) is None
            assert _choice("allreduce", ranks, 1.0, nbytes, per_node=per_node) is None
        assert _choice("reduce", ranks, 1.0, 4 * M, per_node=per_node) is None
        assert _choice("reduce", ranks, 1.0, 8 * M, per_node=per_node) == TWO_TREE
    for ranks in (64, 256, 1024, 4096):
        assert _choice("allreduce", ranks, 1.0, 64 * M, per_node=8) is None
        assert _choice("allreduce", ranks, 1.0, 64 * M, per_node=1) == TWO_TREE
        assert _choice("reduce", ranks, 1.0, 16 * M, per_node=8) == _choice("reduce", ranks, 1.0, 16 * M, per_node=1)
    assert _choice("bcast", 64, 1.0, 64 * M, per_node=8) is None
    assert _choice("bcast", 1024, 1.0, 16 * M, per_node=8) == TWO_TREE


def test_describe_names_the_case():
    assert defaults.case(16, 1.0) == "9+ ranks" and defaults.case(4, 2.0) == "shared cores"
    assert defaults.case(64, 1.0) == "64+ ranks" and defaults.case(16384, 1.0) == "8K+ ranks"
    text = defaults.describe(2, 1.0)
    assert "case '2 ranks'" in text and "always native" in text


@pytest.mark.parametrize("library", ["MPICH Version: 5.0.2", "Open MPI v5.0.11"])
@pytest.mark.parametrize("compiled", [False, True])
def test_two_ranks_bcast_served_by_an_explicit_threshold_is_one_message(library, compiled):
    """2 ranks' Bcast stays native under the rule; served anyway (native_below=0) it sends the message
    whole (one child forwards nothing; 512K x 4 measured 0.90-0.93 of native at 1M, whole 0.93-0.97), while
    Reduce keeps its segments (the fold of one overlaps the transfer of the next) and explicit segment
    settings still win."""
    from adaptcoll.runtime import settings
    from adaptcoll.tune.policy import CommFacts, resolve

    tuning = resolve(b"", "", CommFacts(2, 1, 2, 1.0, library, compiled), warn=False)
    assert _choice("bcast", 2, 1.0, 64 * M, library, compiled=compiled) is None
    assert default_bands("bcast", 2, 1.0, library, compiled=compiled)[0].config == WHOLE_MESSAGE
    assert default_bands("bcast", 4, 1.0, library, compiled=compiled)[0].config != WHOLE_MESSAGE
    with settings.configured(native_below=0):
        tuning.refresh(settings.current())
        call = tuning.choose("bcast", 64 * M)
        assert call.serve and (call.segment_size, call.max_segments) == (1 << 30, 0), call
        assert tuning.choose("reduce", 64 * M).segment_size < M
    with settings.configured(native_below=0, bcast_segment_size="64K"):
        tuning.refresh(settings.current())
        call = tuning.choose("bcast", 64 * M)
        assert (call.segment_size, call.max_segments) == (64 * K, 0), call
    tuning.refresh(settings.current())


# (ranks, per core, library, collective, config, {size: ratio}) measured against another MPI library:
# Open MPI 5.0.11 at 2 ranks on the 2-core machine, `python -m adaptcoll.check --full`
# (bench/results/check_full_2ranks_ompi.json).
MEASURED_BY_LIBRARY = [
    (2, 1.0, "Open MPI v5.0.11", "reduce", SHIPPED, {4 * M: 0.73, 16 * M: 0.88, 64 * M: 0.96}),
    (2, 1.0, "Open MPI v5.0.11", "allreduce", SHIPPED, {4 * M: 0.86, 16 * M: 1.47, 64 * M: 2.64}),
]


@pytest.mark.parametrize("ranks, per_core, library, collective, config, ratios", MEASURED_BY_LIBRARY)
def test_the_rule_for_another_library_serves_only_what_won_against_it(
    ranks, per_core, library, collective, config, ratios
):
    for nbytes, ratio in ratios.items():
        bands = default_bands(collective, ranks, per_core, library)
        band = bands[band_index([b.start for b in bands], nbytes)]
        if band.serve and band.config == config:
            assert ratio >= 1.0, (ranks, library, collective, nbytes, ratio)


def test_the_library_changes_the_two_rank_and_nine_plus_cases_only():
    assert defaults.case(2, 1.0, "Open MPI v5.0.11, package: Open MPI") == "2 ranks, Open MPI"
    assert defaults.case(2, 1.0, "MPICH Version: 5.0.2") == "2 ranks"
    assert defaults.case(16, 1.0, "Open MPI v5.0.11") == "9+ ranks, Open MPI"
    assert defaults.case(16, 1.0, "MPICH Version: 5.0.2") == "9+ ranks"
    for ranks in (4, 8, 64):
        assert defaults.case(ranks, 1.0, "Open MPI v5.0.11") == defaults.case(ranks, 1.0, "MPICH Version: 5.0.2")
    assert not any(b.serve for b in default_bands("reduce", 2, 1.0, "Open MPI v5.0.11"))


# The compiled engine's rule on several nodes and at scale: its evidence is the simulator's rows in
# bench/results/simulate/compiled_rule/*.json (bench/nodes_rule.py with ADAPTCOLL_ENGINE=compiled and
# bench/results/simulate/params_scale_compiled.json; bench/RESULTS.md, "The rule at scale with the compiled
# engine"): per point the best lock-step baseline's time and each candidate configuration's.
COMPILED_RULE = Path(__file__).resolve().parents[1] / "bench/results/simulate/compiled_rule"
SCALE_CASES = (
    "3-63 ranks, one per node",
    "3-63 ranks, several nodes",
    "64+ ranks",
    "64+ ranks, several per node",
    "512+ ranks",
    "512+ ranks, several per node",
    "8K+ ranks",
    "8K+ ranks, several per node",
)


def _simulated_compiled() -> list[dict]:
    rows = []
    for path in sorted(COMPILED_RULE.glob("*.json")):
        rows.extend(json.loads(path.read_text())["rows"])
    return rows


def _candidate(label: str) -> tuple[str, int, int]:
    """(algorithm, segment, roots) of a candidate label: 'ALGORITHM@SEGMENT[@ROOTS]' or 'ALGORITHM:SEGMENT'."""
    if "@" in label:
        algorithm, seg, *rest = label.split("@")
        return algorithm, parse_size(seg), int(rest[0]) if rest else 0
    algorithm, _, seg = label.partition(":")
    return algorithm, parse_size(seg), 0


def _runs(config, collective: str, label: str) -> bool:
    """Whether candidate `label` is `config` (uncapped; roots count for Allreduce only)."""
    algorithm, seg, roots = _candidate(label)
    same = (config.algorithm, config.segment_size, config.max_segments) == (algorithm, seg, 0)
    return same and (collective != "allreduce" or config.roots == roots)


def _compiled_points():
    for row in _simulated_compiled():
        per_node = row["per_node"] if row["per_node"] < row["ranks"] else 0
        chosen = _choice(row["collective"], row["ranks"], 1.0, row["size"], per_node=per_node or 1, compiled=True)
        yield row, chosen


def test_the_compiled_scale_rule_serves_only_configurations_simulated_faster():
    checked = 0
    for row, chosen in _compiled_points():
        if chosen is None:
            continue
        for label, seconds in row["candidates_s"].items():
            if _runs(chosen, row["collective"], label):
                ratio = row["best_s"] / seconds
                assert ratio >= 1.0, (row["collective"], row["size"], row["ranks"], row["per_node"], label, ratio)
                checked += 1
    assert checked >= 100


def test_every_point_the_compiled_scale_rule_serves_was_simulated_with_its_configuration():
    """Wherever a simulated point (in any of the files) falls in a compiled band of these cases, that band's
    configuration is among the point's candidates (below 32M; from 32M the Python engine's configurations,
    simulated with its higher CPU costs); and the cases do have compiled bands."""
    labels: dict[tuple, list[str]] = {}
    chosen_at: dict[tuple, object] = {}
    for row, chosen in _compiled_points():
        point = (row["collective"], row["size"], row["ranks"], row["per_node"])
        labels.setdefault(point, []).extend(row["candidates_s"])
        chosen_at[point] = chosen
    for point, chosen in chosen_at.items():
        if chosen is None or point[1] >= 32 * M:
            continue
        assert any(_runs(chosen, point[0], label) for label in labels[point]), (point, chosen)
    for name in SCALE_CASES:
        assert name in defaults.COMPILED_CASES
    assert _choice("bcast", 1024, 1.0, 16 * M, per_node=32, compiled=True) == NODE_TREES_64K
    assert _choice("allreduce", 1024, 1.0, 4 * M, per_node=32, compiled=True) == TWO_TREE_32K
    assert _choice("allreduce", 1024, 1.0, 4 * M, per_node=32) is None  # the Python engine's rule: native
    for ranks in (16384, 65536):  # 8K+ ranks, one per node: served with the compiled engine, native without
        assert _choice("bcast", ranks, 1.0, M, compiled=True) == TWO_TREE_16K
        assert _choice("reduce", ranks, 1.0, 4 * M, compiled=True) == TWO_TREE_32K
        assert _choice("allreduce", ranks, 1.0, 4 * M, compiled=True) == TWO_TREE_32K
        assert _choice("allreduce", ranks, 1.0, M, compiled=True) is None
        assert _choice("allreduce", ranks, 1.0, 4 * M) is None and _choice("bcast", ranks, 1.0, M) is None
    # 8K+ ranks on nodes of several ranks (simulated at 16K x 32): served with the compiled engine from 16M /
    # 4M / 4M; the Python engine's rule keeps Bcast native below 64M and Allreduce native
    assert _choice("bcast", 16384, 1.0, 16 * M, per_node=32, compiled=True) == NODE_TREES_64K
    assert _choice("reduce", 16384, 1.0, 4 * M, per_node=32, compiled=True) == TWO_TREE_32K
    assert _choice("allreduce", 16384, 1.0, 4 * M, per_node=32, compiled=True) == TWO_TREE_32K
    assert _choice("bcast", 16384, 1.0, M, per_node=32, compiled=True) is None  # not simulated there
    assert _choice("bcast", 16384, 1.0, 16 * M, per_node=32) is None
    assert _choice("allreduce", 16384, 1.0, 4 * M, per_node=32) is None


def _worse_of_two(seconds: float, noisy: float, row: dict) -> float:
    """The worse of a configuration's quiet and noisy ratios to the best lock-step baseline."""
    return max(seconds / row["best_s"], noisy / row["best_noisy_s"])


def test_the_noisy_column_picks_the_trees_where_one_rank_per_node_from_64_ranks():
    """From 64 to 8191 ranks with one rank per node the compiled bands that serve multi_tree were chosen on
    both columns (bench/worse_of_two.py): over the points of a band in trees*.json (each simulated quiet and
    under noise with the chosen configuration and with the two trees the rule served before, its `rule`
    then), the choice's worst ratio to the best lock-step, quiet or noisy, is no higher than the two trees'."""
    worst: dict[tuple, list[float]] = {}
    for path in sorted(COMPILED_RULE.glob("trees*.json")):
        for row in json.loads(path.read_text())["rows"]:
            assert row["per_node"] == 1 and row.get("noisy_s") is not None
            bands = default_bands(row["collective"], row["ranks"], 1.0, "", row["ranks"], 1, True)
            band = bands[band_index([b.start for b in bands], row["size"])]
            if not band.serve or not band.config.algorithm.startswith("multi_tree"):
                continue
            mine = [lbl for lbl in row["candidates_s"] if _runs(band.config, row["collective"], lbl)]
            if not mine or not row["rule"].startswith("two_tree"):
                continue
            key = (defaults.case(row["ranks"], 1.0, "", row["ranks"], 1), row["collective"], band.start)
            ours = _worse_of_two(row["candidates_s"][mine[0]], row["noisy_s"][mine[0]], row)
            before = _worse_of_two(row["rule_s"], row["rule_noisy_s"], row)
            pair = worst.setdefault(key, [0.0, 0.0])
            pair[0], pair[1] = max(pair[0], ours), max(pair[1], before)
    assert len(worst) >= 7, worst
    for key, (ours, before) in worst.items():
        assert ours <= before, (key, ours, before)
    for ranks in (64, 256, 1024, 4096):
        assert _choice("bcast", ranks, 1.0, M, compiled=True) == FOUR_TREES_16K
        assert _choice("bcast", ranks, 1.0, 16 * M, compiled=True) == SIX_TREES_32K
        assert _choice("allreduce", ranks, 1.0, 4 * M, compiled=True) == FOUR_TREES_32K
        assert _choice("reduce", ranks, 1.0, 4 * M, compiled=True) == (FOUR_TREES_32K if ranks < 512 else SIX_TREES_32K)
        assert _choice("bcast", ranks, 1.0, 16 * M, per_node=8, compiled=True) == NODE_TREES_64K  # several per node
    assert _choice("bcast", 16384, 1.0, 16 * M, compiled=True).algorithm == "two_tree"  # 8K+: not simulated


def test_nodes_whose_ranks_are_not_consecutive_keep_only_the_trees_that_follow_the_nodes():
    """The several-per-node cases were simulated with each node's ranks consecutive; with another placement
    (the tuning exchange sees the hosts in rank order) only the topo pair's bands stay, the flat trees' go
    native; one rank per node and one node do not depend on it."""
    import numpy as np

    from adaptcoll.tune.exchange import facts_from

    def records(hosts: list[int]) -> np.ndarray:
        return np.array([[h, 16, 0, 1] for h in hosts], dtype=np.int64)

    assert facts_from(records([7, 7, 9, 9, 3, 3]), "MPICH").in_rank_order
    assert not facts_from(records([7, 9, 7, 9]), "MPICH").in_rank_order
    assert facts_from(records([7, 8, 9]), "MPICH").in_rank_order  # one rank per node
    assert facts_from(records([7, 7, 7, 7]), "MPICH").in_rank_order
    for ranks, per_node in ((32, 8), (256, 32), (1024, 32), (16384, 32)):
        nodes = ranks // per_node
        for compiled in (False, True):
            for coll in ("reduce", "allreduce"):
                bands = default_bands(coll, ranks, 1.0, "", nodes, per_node, compiled, in_rank_order=False)
                assert not any(b.serve for b in bands), (ranks, per_node, compiled, coll)
        bcast = default_bands("bcast", ranks, 1.0, "", nodes, per_node, True, in_rank_order=False)
        topo_pair = [NODE_TREES_32K, NODE_TREES_64K] if ranks < 8192 else [NODE_TREES_64K]
        assert [b.config for b in bcast if b.serve] == topo_pair
        assert default_bands("reduce", ranks, 1.0, "", nodes, per_node, True)[1].serve  # in rank order: served
    for ranks, nodes, per_node in ((64, 64, 1), (16, 1, 16), (1024, 1024, 1)):
        assert default_bands("reduce", ranks, 1.0, "", nodes, per_node, True, False) == default_bands(
            "reduce", ranks, 1.0, "", nodes, per_node, True
        )
    assert "not consecutive" in defaults.describe(32, 1.0, "", 4, 8, True, in_rank_order=False)
