"""Tests for jobscripts/: syntax, shellcheck, dry-run commands for Slurm and PBS, and the smoke check itself."""

from __future__ import annotations

import os
import py_compile
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "jobscripts"
SCRIPTS = sorted(JOBS.glob("*.slurm")) + sorted(JOBS.glob("*.pbs"))
SCHEDULER_VARS = (
    "SLURM_JOB_ID",
    "SLURM_NTASKS",
    "PBS_NODEFILE",
    "PBS_JOBID",
    "LAUNCHER",
    "NP",
    "MPIEXEC",
    "DRY_RUN",
    "RESULTS",
    "GRID",
    "COLLS",
    "IMPLS",
    "NOISE_MODE",
    "PYTHON",
)


def dry_run(script: str, *args: str, **env: str) -> list[list[str]]:
    """Run `script --dry-run args` with a clean scheduler environment; return its commands as word lists."""
    clean = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARS}
    clean.update(env)
    out = subprocess.run(
        ["bash", str(JOBS / script), "--dry-run", *args], capture_output=True, text=True, env=clean, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return [shlex.split(line) for line in out.stdout.splitlines() if line.strip()]


def test_scripts_exist_for_both_schedulers():
    names = {p.name for p in SCRIPTS}
    assert names == {f"{job}.{s}" for job in ("smoke", "osu", "noise") for s in ("slurm", "pbs")}
    for path in SCRIPTS:
        head = path.read_text()
        assert head.startswith("#!/bin/bash\n")
        assert ("#SBATCH --nodes" in head) if path.suffix == ".slurm" else ("#PBS -l select" in head)


@pytest.mark.parametrize("path", SCRIPTS + [JOBS / "common.sh"], ids=lambda p: p.name)
def test_bash_syntax(path):
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    out = subprocess.run(
        ["shellcheck", "-x", *map(str, SCRIPTS), str(JOBS / "common.sh")], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_smoke_dry_run_mpiexec_and_srun():
    (cmd,) = dry_run("smoke.pbs", "NP=6", "RESULTS=r")
    assert cmd[:5] == ["mpiexec", "-n", "6", "--bind-to", "core"]
    assert cmd[5:] == ["python3", "-m", "mpi4py", str(JOBS / "smoke_check.py"), ">", "r/smoke.txt"]
    (cmd,) = dry_run("smoke.slurm", "RESULTS=r", SLURM_JOB_ID="77", SLURM_NTASKS="16")
    assert cmd[:4] == ["srun", "-n", "16", "--cpu-bind=cores"]
    cmds = dry_run("smoke.slurm", "SMOKE_PYTEST=1", "MPIEXEC=timeout 60 mpiexec", "MPIEXEC_BIND=-bind-to socket")
    assert cmds[0][:6] == ["timeout", "60", "mpiexec", "-n", "2", "-bind-to"]
    assert cmds[1][:5] == ["python3", "-m", "pytest", str(ROOT / "tests"), "-k"] and "mpi" in cmds[1]


def test_pbs_node_file_gives_rank_count(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn2\nn2\nn3\n")
    (cmd,) = dry_run("smoke.pbs", PBS_NODEFILE=str(nodefile))
    assert cmd[:3] == ["mpiexec", "-n", "5"]


def test_osu_dry_run():
    cmds = dry_run("osu.slurm", "NP=8", "SIZES=4:64K", "ITERS=50", "WARMUP=5", "RESULTS=out", SLURM_JOB_ID="1")
    assert [c[c.index("-c") + 1] for c in cmds] == ["bcast", "reduce", "allreduce"]
    for cmd in cmds:
        assert cmd[:4] == ["srun", "-n", "8", "--cpu-bind=cores"]
        assert cmd[4:6] == ["python3", str(ROOT / "bench" / "osu.py")]
        flags = cmd[6:]
        for pair in (["-m", "4:64K"], ["-i", "50"], ["-x", "5"], ["--impl", "native"], ["--impl", "adaptcoll"]):
            assert any(flags[i : i + 2] == pair for i in range(len(flags))), pair
        assert "-f" in flags and "--json" in flags
    (one,) = dry_run("osu.pbs", "COLLS=allreduce", "FULL=0", "IMPLS=adaptcoll")
    assert "-f" not in one and one.count("--impl") == 1 and one[0] == "mpiexec"


def test_noise_grid_dry_run_flag_mode():
    cmds = dry_run("noise.pbs", "NP=4", "COLLS=bcast allreduce", "RESULTS=g", "SEED=3")
    assert len(cmds) == 8
    specs = [c[c.index("--noise") + 1] if "--noise" in c else "off" for c in cmds[:4]]
    assert specs == [
        "off",
        "10Hz x 2.5ms, poisson, seed=3",
        "100Hz x 250us, poisson, seed=3",
        "1kHz x 25us, poisson, seed=3",
    ]
    from adaptcoll.noise import parse_spec

    for spec in specs[1:]:
        assert abs(parse_spec(spec).noise_fraction - 0.025) < 1e-12  # the 2.5% patterns
    assert all(c[:5] == ["mpiexec", "-n", "4", "--bind-to", "core"] for c in cmds)
    outputs = [c[-1] for c in cmds]
    assert len(set(outputs)) == 8 and all(o.startswith("g/noise-") for o in outputs)


def test_noise_grid_dry_run_wrap_mode_uses_the_mpi_free_wrapper():
    from adaptcoll.noise.__main__ import SAFE_PYTHON_C

    cmds = dry_run(
        "noise.slurm",
        "NOISE_MODE=wrap",
        "COLLS=reduce",
        "GRID=1kHz x 25us; 10Hz x 2.5ms",
        "PATTERN=periodic",
        SLURM_JOB_ID="9",
        SLURM_NTASKS="32",
    )
    assert len(cmds) == 2
    for cmd, spec in zip(cmds, ["1kHz x 25us, periodic, seed=0", "10Hz x 2.5ms, periodic, seed=0"]):
        assert cmd[:4] == ["srun", "-n", "32", "--cpu-bind=cores"]
        assert cmd[4:8] == ["python3", "-c", SAFE_PYTHON_C, "run"]
        assert cmd[8:11] == ["--spec", spec, "--"]
        assert cmd[11:13] == ["python3", str(ROOT / "bench" / "osu.py")] and "--noise" not in cmd


def test_bad_argument_and_help():
    out = subprocess.run(["bash", str(JOBS / "osu.slurm"), "--dry-run", "bogus"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown argument" in out.stderr
    out = subprocess.run(["bash", str(JOBS / "noise.pbs"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "GRID" in out.stdout and "--dry-run" in out.stdout


def test_smoke_check_runs_against_native():
    py_compile.compile(str(JOBS / "smoke_check.py"), doraise=True)
    out = subprocess.run(
        ["timeout", "120", "mpiexec", "-n", "2", sys.executable, "-m", "mpi4py", str(JOBS / "smoke_check.py")],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "smoke check on 2 ranks: PASS" in out.stdout
    assert out.stdout.count("ok   ") > 100


def test_smoke_check_fails_when_adaptcoll_does_not_serve():
    """The smoke check runs adaptcoll's own protocols at every size and fails a case native MPI served."""
    out = subprocess.run(
        ["timeout", "120", "mpiexec", "-n", "2", sys.executable, "-m", "mpi4py", str(JOBS / "smoke_check.py")],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=ROOT,
        env={**os.environ, "ADAPTCOLL_BCAST_ALGORITHM": "native"},
    )
    assert out.returncode != 0, out.stdout[-2000:]
    assert "FAIL Bcast float64 n=7 root=0 (went native: algorithm=native)" in out.stdout
    assert "ok   Allreduce SUM float64 n=7" in out.stdout
