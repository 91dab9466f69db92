"""Simulate adaptcoll's real protocols at 10^3-10^6 ranks under noise (docs/simulate.md).

A discrete-event simulator in which every simulated rank runs the library's own protocol state
machines, trees and segment plans over a timed transport (LogGP network, one CPU per rank, noise from
`adaptcoll.noise` specs or measured traces), beside lock-step baselines as MPI libraries run them.
`python -m adaptcoll.simulate` is the command line; `calibrate` fits the parameters to this machine.

Modules: params (cost model), timelines (noise), noise_setup (--noise values), world (the event core),
network (per-node links), routes / pathlinks / maxmin (a described network: routes, links shared along
them, max-min fair rates), programs (adaptcoll set-up, protocol registry), nodelevel / region (the
shared-memory node level and its simulated slots), lockstep (baselines), run (runs and reports),
measured / calibrate (measurements, fitting, validation), sweep / plots (tables and figures), trace
(Perfetto output), cli.
"""

from .calibrate import calibrate, fit_params, validate
from .lockstep import BASELINES, baseline_names
from .noise_setup import NoiseSetup, parse_noise
from .params import DEFAULT_PARAMS, CostParams, load_params, save_params
from .programs import Job, RankJob, prepare, protocol_names, register_protocol
from .routes import Routes
from .run import compare, run_once
from .sweep import sweep
from .world import Deadlock, SimRank, World

__all__ = [
    "calibrate",
    "fit_params",
    "validate",
    "BASELINES",
    "baseline_names",
    "NoiseSetup",
    "parse_noise",
    "DEFAULT_PARAMS",
    "CostParams",
    "load_params",
    "save_params",
    "Job",
    "RankJob",
    "prepare",
    "protocol_names",
    "register_protocol",
    "Routes",
    "compare",
    "run_once",
    "sweep",
    "Deadlock",
    "SimRank",
    "World",
]
