"""The environment part of the check: which MPI, whether it reads device memory (and how that was
decided), the GPU stack, ranks per node and per core, the thread level, and the tuning in force."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import numpy as np

__all__ = ["gather_environment", "THREAD_LEVELS"]

THREAD_LEVELS = ("THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED", "THREAD_MULTIPLE")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


def _gpu(cupy_wanted: bool) -> dict[str, Any]:
    """CuPy and the CUDA driver as this rank sees them (never raises)."""
    from ..device.driver import driver

    out: dict[str, Any] = {"driver": getattr(driver(), "name", type(driver()).__name__)}
    try:
        import cupy
    except Exception as exc:
        out["cupy"] = None
        out["cupy_problem"] = f"{type(exc).__name__}: {exc}"
        return out
    out["cupy"] = cupy.__version__
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
        out["devices"] = count
        if count:
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            name = props.get("name", b"?")
            out["device"] = name.decode() if isinstance(name, bytes) else str(name)
            out["cuda_driver"] = int(cupy.cuda.runtime.driverGetVersion())
            out["cuda_runtime"] = int(cupy.cuda.runtime.runtimeGetVersion())
    except Exception as exc:
        out["devices"] = 0
        out["cupy_problem"] = f"{type(exc).__name__}: {exc}"
    return out


def _tuning(
    adaptcoll: Any,
    world: Any,
    MPI: Any,
    ranks_per_core: float,
    nodes: int = 1,
    ranks_per_node: int = 1,
    compiled: bool = False,
) -> dict[str, Any]:
    """Whether a tuning table is in use: one tiny adaptcoll call on a duplicate resolves the tuning of
    that communicator, and adaptcoll says how (table, nearest measured size, shipped rule)."""
    from ..runtime.counters import tuning_notes
    from ..tune.defaults import describe
    from ..tune.files import library_name, locate

    comm = adaptcoll.Intracomm(world.Dup())
    try:
        one = np.zeros(1)
        comm.Allreduce(MPI.IN_PLACE, one, MPI.SUM)
    finally:
        comm.Free()
    setting = adaptcoll.current_settings().tuning
    library = library_name(MPI.Get_library_version())
    path = locate(setting, library)
    return {
        "setting": setting or "(ADAPTCOLL_TUNING unset)",
        "table": str(path) if path is not None else None,
        "notes": tuning_notes(),
        "shipped_rule": describe(
            world.Get_size(), ranks_per_core, library, nodes, ranks_per_node, compiled
        ).splitlines(),
    }


def gather_environment(world: Any, MPI: Any, adaptcoll: Any, cupy_wanted: bool) -> dict[str, Any]:
    """Facts of this job, the same dict on every rank (collective: every rank must call it)."""
    import mpi4py

    from ..device import mpi_cuda_aware
    from ..runtime import compiled, fastcalls, settings

    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    leader = node.bcast(world.Get_rank(), 0)
    node_size = node.Get_size()
    cpus: set[int] = set().union(*node.allgather(_affinity()))  # the cores the node's ranks may run on
    node.Free()
    per_rank = world.allgather((leader, node_size, len(cpus) or _cores(), platform.node()))
    nodes: dict[int, tuple[int, int, str]] = {}
    for lead, size, cores, host in per_rank:
        nodes[lead] = (size, cores, host)
    sizes = sorted({s for s, _, _ in nodes.values()})
    aware, why = mpi_cuda_aware(world)
    gpu = _gpu(cupy_wanted)
    gpus = world.allgather(gpu.get("device"))
    env = {
        "ranks": world.Get_size(),
        "nodes": len(nodes),
        "ranks_per_node": sizes,
        "hosts": sorted({h for _, _, h in nodes.values()}),
        "cores_per_node": sorted({c for _, c, _ in nodes.values()}),
        "ranks_per_core": max(s / max(1, c) for s, c, _ in nodes.values()),
        "mpi_library": MPI.Get_library_version().strip().splitlines()[0].strip(),
        "mpi_version": ".".join(map(str, MPI.Get_version())),
        "mpi4py": mpi4py.__version__,
        "thread_level": THREAD_LEVELS[MPI.Query_thread()] if 0 <= MPI.Query_thread() < 4 else str(MPI.Query_thread()),
        "adaptcoll": adaptcoll.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cuda_aware": aware,
        "cuda_aware_why": why,
        "gpu": gpu,
        "gpus_seen": sum(1 for g in gpus if g),
        "adaptcoll_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("ADAPTCOLL_")},
        "executable": sys.executable,
    }
    engines = world.allgather(compiled.status())
    env["engine"] = engines[0][0] if len({e[0] for e in engines}) == 1 else "mixed"
    env["engine_detail"] = engines[0][1]
    env["engine_ranks"] = {name: sum(1 for e in engines if e[0] == name) for name in sorted({e[0] for e in engines})}
    env["progress_thread_us"] = settings.current().progress_thread  # (the compiled engine's; 0: none)
    env["c_calls"], env["c_calls_detail"] = fastcalls.status()  # (compiled.status loaded it: extension / ctypes)
    everywhere = env["engine"] == "compiled"
    per_node = max(sizes) if sizes else 1
    env["tuning"] = _tuning(adaptcoll, world, MPI, float(env["ranks_per_core"]), len(nodes), per_node, everywhere)
    return env
