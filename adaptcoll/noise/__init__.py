"""Noise injection for experiments with adaptcoll and native MPI collectives alike.

Detours (a co-located CPU-stealing process), arrival Skew, NetworkNoise (background exchanges) and an
FWQ calibration. Importing this package never imports MPI; NetworkNoise imports mpi4py when started.
"""

from .calibrate import CalibrationResult, calibrate, fwq, merge_stats
from .detours import PATTERNS, Detours, DetourStats
from .network import NetworkNoise, NetworkNoiseStats, default_pairs
from .skew import DISTRIBUTIONS, Skew, unit_random
from .spec import ENV_VAR, NoiseSpec, from_env, from_spec, parse_spec, rank_from_env

__all__ = [
    "CalibrationResult",
    "calibrate",
    "fwq",
    "merge_stats",
    "PATTERNS",
    "DetourStats",
    "Detours",
    "NetworkNoise",
    "NetworkNoiseStats",
    "default_pairs",
    "DISTRIBUTIONS",
    "Skew",
    "unit_random",
    "ENV_VAR",
    "NoiseSpec",
    "from_env",
    "from_spec",
    "parse_spec",
    "rank_from_env",
]
