"""Tests for jobscripts/: syntax, shellcheck, dry-run commands for Slurm and PBS, and short real runs of the smoke
job (python -m adaptcoll.check) and the tune job (python -m adaptcoll.tune) at 2 ranks."""

from __future__ import annotations

import json
import os
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
    "SLURM_CLUSTER_NAME",
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
    "CHECK_MODE",
    "CHECK_EXTRA",
    "SMOKE_PYTEST",
    "TUNING_OUT",
    "TUNING_NAME",
    "TUNE_SIZES",
    "TUNE_COLLS",
    "TUNE_BUDGET",
    "TUNE_EXTRA",
    "XDG_CACHE_HOME",
    "ADAPTCOLL_TUNING",
)


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without scheduler and job parameters, plus `env`."""
    clean = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARS}
    clean.update(env)
    return clean


def dry_run(script: str, *args: str, cwd: Path | None = None, **env: str) -> list[list[str]]:
    """Run `script --dry-run args` with a clean scheduler environment; return its commands as word lists."""
    out = subprocess.run(
        ["bash", str(JOBS / script), "--dry-run", *args],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=30,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    return [shlex.split(line) for line in out.stdout.splitlines() if line.strip()]


def run_job(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run `script args` for real at 2 ranks under mpiexec (no scheduler), with this Python."""
    return subprocess.run(
        ["bash", str(JOBS / script), "NP=2", f"PYTHON={sys.executable}", "MPIEXEC=timeout 120 mpiexec", *args],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=150,
        cwd=ROOT,
    )


def test_scripts_exist_for_both_schedulers():
    names = {p.name for p in SCRIPTS}
    assert names == {f"{job}.{s}" for job in ("smoke", "tune", "osu", "noise") for s in ("slurm", "pbs")}
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
    assert cmd[5:] == ["python3", "-m", "adaptcoll.check", "--full", "--json", "r/check.json", ">", "r/check.txt"]
    (cmd,) = dry_run("smoke.slurm", "RESULTS=r", SLURM_JOB_ID="77", SLURM_NTASKS="16")
    assert cmd[:4] == ["srun", "-n", "16", "--cpu-bind=cores"]
    assert cmd[4:8] == ["python3", "-m", "adaptcoll.check", "--full"]
    cmds = dry_run("smoke.slurm", "SMOKE_PYTEST=1", "MPIEXEC=timeout 60 mpiexec", "MPIEXEC_BIND=-bind-to socket")
    assert cmds[0][:7] == ["timeout", "60", "mpiexec", "-n", "2", "-bind-to", "socket"]
    assert cmds[0][7:11] == ["python3", "-m", "adaptcoll.check", "--full"]
    assert cmds[1][:5] == ["python3", "-m", "pytest", str(ROOT / "tests"), "-k"] and "mpi" in cmds[1]


def test_smoke_dry_run_mode_and_extra_flags_are_the_checks_own():
    from adaptcoll.check.cli import build_parser

    (cmd,) = dry_run("smoke.pbs", "CHECK_MODE=quick", "CHECK_EXTRA=--device cupy --quiet", "RESULTS=r")
    assert cmd[5:] == [
        "python3", "-m", "adaptcoll.check", "--quick", "--json", "r/check.json", "--device", "cupy", "--quiet",
        ">", "r/check.txt",
    ]  # fmt: skip
    args = build_parser().parse_args(cmd[8:-2])
    assert args.quick and args.device == "cupy" and args.quiet and args.json == "r/check.json"
    (cmd,) = dry_run("smoke.slurm", "RESULTS=r")
    assert build_parser().parse_args(cmd[8:-2]).full
    out = subprocess.run(
        ["bash", str(JOBS / "smoke.slurm"), "--dry-run", "CHECK_MODE=fast"],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert out.returncode == 2 and "expected full or quick" in out.stderr and not out.stdout


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


def test_tune_dry_run_slurm_defaults_to_the_cache_directory(tmp_path, monkeypatch):
    from adaptcoll.tune.files import cache_dir

    cache = tmp_path / "cache"
    env = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "32", "SLURM_CLUSTER_NAME": "frontier", "XDG_CACHE_HOME": str(cache)}
    tune, show, export = dry_run("tune.slurm", **env)
    table = cache / "adaptcoll" / "tuning-frontier.json"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert table.parent == cache_dir()  # the directory adaptcoll itself reads and the tuner writes
    assert tune == [
        "srun", "-n", "32", "--cpu-bind=cores", "python3", "-m", "adaptcoll.tune", "-o", str(table),
        ">", "results/77/tune.txt",
    ]  # fmt: skip
    assert show == ["python3", "-m", "adaptcoll.tune", "show", str(table), ">", "results/77/tune-show.txt"]
    assert export == ["export", f"ADAPTCOLL_TUNING={table}"]
    tune, _, _ = dry_run(
        "tune.slurm",
        "TUNE_SIZES=1M..64M",
        "TUNE_COLLS=reduce,allreduce",
        "TUNE_BUDGET=120",
        "TUNE_EXTRA=--no-merge --min-gain 1.05",
        "SRUN_BIND=--cpu-bind=cores --mpi=pmix",
        **env,
    )
    assert tune[:5] == ["srun", "-n", "32", "--cpu-bind=cores", "--mpi=pmix"]
    assert tune[5:8] == ["python3", "-m", "adaptcoll.tune"] and tune[8:-2] == [
        "-o", str(table), "--sizes", "1M..64M", "--collectives", "reduce,allreduce", "--budget", "120",
        "--no-merge", "--min-gain", "1.05",
    ]  # fmt: skip


def test_tune_dry_run_pbs_node_file_and_home_cache(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn1\nn2\nn2\nn2\n")
    home = tmp_path / "home"
    env = {"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "4242.pbs01.example.org", "HOME": str(home)}
    tune, show, export = dry_run("tune.pbs", "MPIEXEC_BIND=--bind-to core --map-by ppr:3:node", **env)
    table = home / ".cache" / "adaptcoll" / "tuning-pbs01.json"  # no XDG_CACHE_HOME: ~/.cache/adaptcoll
    assert tune[:8] == ["mpiexec", "-n", "6", "--bind-to", "core", "--map-by", "ppr:3:node", "python3"]
    assert tune[8:] == ["-m", "adaptcoll.tune", "-o", str(table), ">", "results/4242.pbs01.example.org/tune.txt"]
    assert show[-3:] == [str(table), ">", "results/4242.pbs01.example.org/tune-show.txt"]
    assert export == ["export", f"ADAPTCOLL_TUNING={table}"]
    # TUNING_NAME names the default file; a relative TUNING_OUT is made absolute (later jobs start elsewhere).
    *_, export = dry_run("tune.pbs", "TUNING_NAME=my cluster", **env)
    assert export == ["export", f"ADAPTCOLL_TUNING={table.parent / 'tuning-my-cluster.json'}"]
    *_, export = dry_run("tune.pbs", "TUNING_OUT=shared/t.json", cwd=tmp_path, **env)
    assert export == ["export", f"ADAPTCOLL_TUNING={tmp_path / 'shared' / 't.json'}"]
    *_, export = dry_run("tune.pbs", NP="2", HOME=str(home))  # outside any job: the name 'cluster'
    assert export == ["export", f"ADAPTCOLL_TUNING={table.parent / 'tuning-cluster.json'}"]


def test_tune_help_and_bad_argument():
    for script in ("tune.slurm", "tune.pbs"):
        out = subprocess.run(["bash", str(JOBS / script), "--help"], capture_output=True, text=True)
        assert out.returncode == 0 and "--dry-run" in out.stdout
        for name in ("TUNING_OUT", "TUNING_NAME", "TUNE_SIZES", "TUNE_COLLS", "TUNE_BUDGET", "TUNE_EXTRA", "NP"):
            assert name in out.stdout, name
        out = subprocess.run(["bash", str(JOBS / script), "--dry-run", "-o", "t.json"], capture_output=True, text=True)
        assert out.returncode == 2 and "unknown argument: -o" in out.stderr and not out.stdout
    out = subprocess.run(["bash", str(JOBS / "smoke.pbs"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and all(k in out.stdout for k in ("CHECK_MODE", "CHECK_EXTRA", "SMOKE_PYTEST"))


def test_smoke_job_runs_the_check(tmp_path):
    out = run_job("smoke.slurm", "CHECK_MODE=quick", "CHECK_EXTRA=--only correctness --quiet", f"RESULTS={tmp_path}")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["mode"] == "quick" and report["correctness"]["passed"] and report["correctness"]["total"] > 100
    assert "Recommendation" in (tmp_path / "check.txt").read_text()
    assert "MPI" in (tmp_path / "job-info.txt").read_text()


def test_smoke_job_fails_when_the_check_does(tmp_path):
    out = run_job("smoke.pbs", "CHECK_EXTRA=--only everything", f"RESULTS={tmp_path}")
    assert out.returncode != 0
    text = (tmp_path / "check.txt").read_text()  # the check's own usage error, on every rank
    assert "argument --only: invalid choice" in text and "everything" in text


def test_tune_job_writes_the_table_where_the_export_line_points(tmp_path):
    table = tmp_path / "shared" / "tuning.json"
    args = ("TUNE_SIZES=4K,64K", "TUNE_COLLS=bcast", "TUNE_BUDGET=4", "TUNE_EXTRA=--quiet", f"TUNING_OUT={table}")
    out = run_job("tune.pbs", *args, f"RESULTS={tmp_path / 'r'}")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(table.read_text())
    assert doc["format"] == "adaptcoll-tuning"
    assert {(e["collective"], e["bytes"], e["comm_size"]) for e in doc["entries"]} == {
        ("bcast", 4096, 2),
        ("bcast", 65536, 2),
    }
    line = f"export ADAPTCOLL_TUNING={table}"
    assert out.stdout.splitlines()[-1] == line
    assert (tmp_path / "r" / "tuning.env").read_text() == line + "\n"
    assert f"tuning table written to {table}" in (tmp_path / "r" / "tune.txt").read_text()
    assert "bcast (host memory), 2 ranks" in (tmp_path / "r" / "tune-show.txt").read_text()
    # A second run of another shape or collective merges into the same table.
    out = run_job("tune.pbs", *args[:-2], "TUNE_COLLS=allreduce", f"TUNING_OUT={table}", f"RESULTS={tmp_path / 'r2'}")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert {e["collective"] for e in json.loads(table.read_text())["entries"]} == {"bcast", "allreduce"}
