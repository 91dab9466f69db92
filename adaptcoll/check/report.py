"""What the check prints and writes (no MPI here): the human report, the one-line recommendation,
and the JSON document, all from the same plain dict."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ..measure import M_MMAP_MAX_THRESHOLD, PINNED_NO_MMAP, format_size

__all__ = ["recommendation", "format_report", "served_summary"]


def recommendation(doc: dict[str, Any]) -> str:
    """One line: what a user should do on this machine, from the correctness and speed parts."""
    ranks = doc["environment"]["ranks"]
    corr = doc.get("correctness")
    if corr is not None and not corr["passed"]:
        return (
            f"do not use adaptcoll here: {corr['failed']} check(s) gave results or errors that differ from native "
            "MPI; report them (the JSON report has every case)"
        )
    cells = doc.get("speed") or []
    if not cells:
        return "correct here; run without --only to see the speed"
    main = [c for c in cells if c["impl"] in ("adaptcoll", "adaptcoll (table)")]
    served = [c for c in main if not c["route"].startswith("native")]
    slower = [c for c in served if c["verdict"] == "slower"]
    faster = [c for c in served if c["verdict"] == "faster"]
    passed_on = [c for c in main if c["route"].startswith("native") and c["verdict"] == "slower"]
    table = doc["environment"]["tuning"].get("table")
    where = _cells(slower)
    if slower and not table:
        line = (
            f"adaptcoll's choice is slower than native MPI at {where}: run "
            f"`mpiexec -n {ranks} python -m adaptcoll.tune` here (it measures this machine and writes a table that "
            "adaptcoll then uses)"
        )
    elif slower:
        line = (
            f"slower than native at {where} even with the tuning table {table}: re-tune "
            f"(`mpiexec -n {ranks} python -m adaptcoll.tune`), or set ADAPTCOLL_TUNING=off to compare the shipped rule"
        )
    elif faster:
        run = f"mpiexec -n {ranks} python -m adaptcoll your_program.py"
        line = f"drop adaptcoll in (`{run}`): faster at {_cells(faster)}, never slower where it serves"
    else:
        line = "adaptcoll is as fast as native MPI here; use it for its noise tolerance, or tune it"
    if passed_on:
        extra = max(c["adaptcoll_us"] - c["reference_us"] for c in passed_on)
        line += (
            f". Calls it hands to native MPI cost up to {extra:.1f} us more ({_cells(passed_on)}): "
            "negligible unless a program makes little else than such calls"
        )
    return line


def _cells(cells: list[dict[str, Any]]) -> str:
    text = ", ".join(f"{c['collective']} {format_size(c['size'])}" for c in cells[:4])
    return text + (" ..." if len(cells) > 4 else "")


def served_summary(cases: list[dict[str, Any]]) -> list[str]:
    """Per collective: passed/total and how adaptcoll ran the calls (routes with counts)."""
    lines = []
    by_coll: dict[tuple[str, bool], list[dict[str, Any]]] = defaultdict(list)
    for c in cases:
        by_coll[(c["collective"], c["device"])].append(c)
    for (coll, device), rows in by_coll.items():
        ok = sum(1 for r in rows if r["passed"])
        routes = Counter(_short_route(r["route"]) for r in rows)
        forms = sorted({r["form"] for r in rows})
        asked = sorted({r["route_asked"] for r in rows})
        name = f"{coll}{' (device)' if device else ''}"
        lines.append(f"  {name:<20} {ok}/{len(rows)} passed; forms: {', '.join(forms)}")
        lines.append(f"  {'':<20} routes asked: {', '.join(asked)}")
        lines.append(f"  {'':<20} routes taken: {', '.join(f'{k} x{v}' for k, v in routes.most_common())}")
    return lines


def _short_route(route: str) -> str:
    return route if len(route) < 60 else route[:57] + "..."


def _env_lines(env: dict[str, Any]) -> list[str]:
    gpu = env["gpu"]
    if gpu.get("device"):
        gpu_text = (
            f"{gpu['device']} on {env['gpus_seen']} rank(s), CuPy {gpu['cupy']}, CUDA driver {gpu.get('cuda_driver')}"
        )
    elif gpu.get("cupy"):
        gpu_text = f"none (CuPy {gpu['cupy']}: {gpu.get('cupy_problem', 'no device')})"
    else:
        gpu_text = f"none (CuPy: {gpu.get('cupy_problem', 'not installed')}; {gpu['driver']})"
    tuning = env["tuning"]
    table = tuning.get("table")
    notes = "; ".join(tuning.get("notes") or [])
    rows = [
        ("MPI library", f"{env['mpi_library']} (MPI {env['mpi_version']})"),
        ("mpi4py", f"{env['mpi4py']}, thread level {env['thread_level']}"),
        ("adaptcoll", f"{env['adaptcoll']} (Python {env['python']}, NumPy {env['numpy']})"),
        ("ranks", f"{env['ranks']} on {env['nodes']} node(s): {'/'.join(map(str, env['ranks_per_node']))} per node"),
        (
            "cores",
            f"{'/'.join(map(str, env['cores_per_node']))} per node usable; {env['ranks_per_core']:g} rank(s) per core",
        ),
        ("CUDA-aware MPI", f"{'yes' if env['cuda_aware'] else 'no'} ({env['cuda_aware_why']})"),
        ("engine", _engine_row(env)),
        ("GPU", gpu_text),
        ("tuning", f"table {table}" if table else "no table: the shipped rule"),
    ]
    if notes:
        rows.append(("", notes))
    if env["adaptcoll_env"]:
        rows.append(("ADAPTCOLL_*", ", ".join(f"{k}={v}" for k, v in env["adaptcoll_env"].items())))
    return [f"  {k:<16} {v}" for k, v in rows]


def _speed_lines(cells: list[dict[str, Any]]) -> list[str]:
    width = max([len(c["impl"]) for c in cells] + [9]) + 2
    head = (
        f"  {'collective':<11}{'size':>6}  {'adaptcoll':<{width}}{'native us':>11}{'adaptcoll us':>14}"
        f"{'ratio':>8}  {'95% CI':<13} verdict   route"
    )
    lines = [head]
    for c in cells:
        coll = c["collective"] + (" (dev)" if c["device"] else "")
        lines.append(
            f"  {coll:<11}{format_size(c['size']):>6}  {c['impl']:<{width}}{c['reference_us']:>11.1f}"
            f"{c['adaptcoll_us']:>14.1f}{c['ratio']:>8.2f}  {c['ci_low']:.2f}-{c['ci_high']:<8.2f} "
            f"{c['verdict']:<9} {_short_route(c['route'])}"
        )
    return lines


def _refault_note(doc: dict[str, Any], cells: list[dict[str, Any]]) -> list[str]:
    """A note under the speed table when native rows of 32 MiB and more ran with glibc mapping the MPI
    library's message-sized temporaries afresh at every call (page faults no in-process pin avoids):
    MPICH's Reduce and Allreduce, Open MPI's Allreduce (measured with the PyPI wheels, 2 ranks); none
    when the environment or the check's pin turned glibc's mmap off (`malloc_env`, MALLOC_MMAP_MAX_=0;
    `pin_malloc`)."""
    library = doc["environment"].get("mpi_library", "")
    collectives: tuple[str, ...]
    if library.startswith("MPICH"):
        collectives, which = ("reduce", "allreduce", "ireduce", "iallreduce"), "MPICH's Reduce and Allreduce"
    elif library.startswith("Open MPI"):
        collectives, which = ("allreduce", "iallreduce"), "Open MPI's Allreduce"
    else:
        return []
    if doc.get("malloc_env", {}).get("MALLOC_MMAP_MAX_") == "0" or PINNED_NO_MMAP in str(doc.get("malloc", "")):
        return []
    big = [c for c in cells if c["collective"] in collectives and c["size"] >= M_MMAP_MAX_THRESHOLD and not c["device"]]
    if not big:
        return []
    return [
        f"  note: {which} of {format_size(M_MMAP_MAX_THRESHOLD)} and more: their message-sized temporaries are "
        "page-faulted in at every call (glibc maps them afresh);",
        "        native is up to 2-3x faster with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184 in the "
        'environment (bench/RESULTS.md, "MPICH\'s large temporaries")',
    ]


def format_report(doc: dict[str, Any]) -> str:
    """The human report (what rank 0 prints)."""
    env = doc["environment"]
    lines = [f"adaptcoll check ({doc['mode']}, {env['ranks']} ranks, {doc['elapsed_s']:.0f} s)", "", "Environment"]
    lines += _env_lines(env)
    corr = doc.get("correctness")
    if corr is not None:
        lines += ["", f"Correctness against native MPI: {corr['passed_cases']}/{corr['total']} passed"]
        lines += served_summary(corr["cases"])
        for m in corr["misuse"]:
            if m.get("skipped"):
                lines.append(f"  skip {m['name']}: {m['skipped']}")
                continue
            mark = "ok  " if m["passed"] else "FAIL"
            lines.append(f"  {mark} {m['name']}: expected {m['expected']}")
            if not m["passed"]:
                lines += [f"         rank {r}: {o}" for r, o in enumerate(m["outcomes"])]
        failures = [c for c in corr["cases"] if not c["passed"]]
        for c in failures[:20]:
            lines.append(f"  FAIL {c['case']} [{c['route']}]: {c['problem']}")
        if len(failures) > 20:
            lines.append(f"  ... {len(failures) - 20} more failures in the JSON report")
    cells = doc.get("speed")
    if cells:
        lines += [
            "",
            "Speed: ratio = native time / adaptcoll time (> 1: adaptcoll faster), median of per-iteration ratios,",
            "interleaved calls, each the max over ranks; verdict 'same' when the 95% CI includes 1 or |ratio-1| < 3%;",
            f"glibc malloc {doc.get('malloc', 'as-is')}",
        ]
        lines += _speed_lines(cells)
        lines += _refault_note(doc, cells)
    lines += ["", f"Recommendation: {doc['recommendation']}"]
    return "\n".join(lines)


def _engine_row(env: dict[str, Any]) -> str:
    """Which engine runs the protocols: compiled (its library) or python (why), per rank if they differ."""
    engine = env.get("engine", "?")
    if engine == "mixed":
        return "mixed: " + ", ".join(f"{n} rank(s) {name}" for name, n in env.get("engine_ranks", {}).items())
    row = f"{engine} ({env.get('engine_detail', '')})"
    pause = env.get("progress_thread_us", 0)
    if pause and engine == "compiled":
        row += f"; progress thread on (pauses {pause:g} us when idle)"
    if engine == "compiled" and env.get("c_calls") == "ctypes":
        row += f"; calls into C through ctypes ({env.get('c_calls_detail', '')})"
    elif engine == "compiled" and env.get("c_calls") == "extension":
        row += "; calls into C through the fast-call extension"
    return row
