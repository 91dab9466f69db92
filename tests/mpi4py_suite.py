"""mpi4py's own test suite under `python -m adaptcoll`: fetch the installed mpi4py version's sdist tests,
run `runtests.py` at N ranks, and compare the failing tests with `mpi4py_expected_failures.toml`.

Used by tests/test_mpi4py_suite.py (README's test command: the modules in `CI_MODULES`) and by hand:

    python tests/mpi4py_suite.py --ranks 2                 # CI modules, adaptcoll's defaults
    python tests/mpi4py_suite.py --ranks 3 --serve-all     # adaptcoll serving every size, tiny segments
    python tests/mpi4py_suite.py --ranks 2 --full          # the whole suite (about 100 s at 2 ranks)
    python tests/mpi4py_suite.py --ranks 2 --full --plain  # plain mpi4py, for the baseline

The sdist comes from `pip download --no-deps --no-binary=mpi4py mpi4py==<installed version>` into
`~/.cache/adaptcoll/` (or `$ADAPTCOLL_CACHE`), once (about 10 s; `--no-binary=:all:` also refused
wheels for the build requirements pip installs to read the sdist's metadata, so pip compiled Cython
from source and the fetch ran past its 300-s limit on a fresh machine); `ADAPTCOLL_MPI4PY_TESTS=DIR`
points at an existing `test/` directory instead. Open MPI is launched with `--oversubscribe` (and as
root where allowed).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CI_MODULES",
    "SERVE_ALL",
    "Expected",
    "Outcome",
    "SuiteUnavailable",
    "compare",
    "expected_failures",
    "mpi_vendor",
    "run_suite",
    "sdist_dir",
]

HERE = Path(__file__).resolve().parent
EXPECTED_FILE = HERE / "mpi4py_expected_failures.toml"

CI_MODULES = ("test_cco_buf", "test_cco_nb_buf", "test_cco_pr_buf", "test_objmodel", "test_comm", "test_pickle")
"""What README's test command runs: the buffer collectives adaptcoll replaces in their blocking,
nonblocking and persistent forms (every buffer kind mpi4py tests, host memory behind
`__cuda_array_interface__` included), the object model of communicators (constants, free, handles,
the C API), communicators, and pickling. The rest of the suite (`--full`) is for manual runs."""

SERVE_ALL = {
    "ADAPTCOLL_NATIVE_BELOW": "0",
    "ADAPTCOLL_BCAST_SEGMENT_SIZE": "64",
    "ADAPTCOLL_REDUCE_SEGMENT_SIZE": "64",
    "ADAPTCOLL_ALLREDUCE_SEGMENT_SIZE": "64",
    "ADAPTCOLL_MAX_SEGMENTS": "0",
}
"""Setting (b): adaptcoll serves every size, in 64-byte segments without a cap on their number."""

_RESULT = re.compile(r"\b(FAIL|ERROR): (\w+) \(([\w.]+)\)")
_FINISHED = re.compile(r"MPI4PY-SUITE rank (\d+) finished")


class SuiteUnavailable(Exception):
    """mpi4py's tests cannot be had here (no network, no pip, no mpiexec): the check is skipped."""


def mpi_vendor() -> str:
    """ "MPICH" or "Open MPI" (what mpi4py loaded), for launcher flags and expected failures."""
    from mpi4py import MPI

    return str(MPI.get_vendor()[0])


def _cache_root() -> Path:
    return Path(os.environ.get("ADAPTCOLL_CACHE") or Path.home() / ".cache" / "adaptcoll")


def sdist_dir(timeout: float = 300) -> Path:
    """The `test/` directory of the installed mpi4py's sdist (fetched and unpacked once)."""
    given = os.environ.get("ADAPTCOLL_MPI4PY_TESTS", "").strip()
    if given:
        path = Path(given)
        if not (path / "runtests.py").exists():
            raise SuiteUnavailable(f"ADAPTCOLL_MPI4PY_TESTS={given} has no runtests.py")
        return path
    import mpi4py

    version = mpi4py.__version__
    root = _cache_root() / f"mpi4py-{version}-sdist"
    tests = root / f"mpi4py-{version}" / "test"
    if (tests / "runtests.py").exists():
        return tests
    root.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=mpi4py"]
    command += ["-d", str(root), f"mpi4py=={version}"]
    try:
        fetched = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SuiteUnavailable(f"pip download of mpi4py {version}'s sdist failed: {error}") from error
    archives = sorted(root.glob(f"mpi4py-{version}.tar.gz"))
    if fetched.returncode != 0 or not archives:
        raise SuiteUnavailable(f"pip download of mpi4py {version}'s sdist failed: {fetched.stderr.strip()[-500:]}")
    with tarfile.open(archives[0]) as tar:
        wanted = [m for m in tar.getmembers() if m.name.split("/")[1:2] in (["test"], ["demo"])]
        try:
            tar.extractall(root, members=wanted, filter="data")
        except TypeError:  # a Python without extraction filters: the members are test and demo files
            tar.extractall(root, members=wanted)
    if not (tests / "runtests.py").exists():
        raise SuiteUnavailable(f"mpi4py {version}'s sdist has no test/runtests.py")
    return tests


@dataclass(frozen=True)
class Expected:
    """One expected failure: a test id (module.Class.method), where it fails, and why."""

    test: str
    reason: str
    kind: str  # "mpi4py": plain mpi4py fails it too; "deviation": adaptcoll's documented difference
    mpi: str = "*"  # "MPICH", "Open MPI" or "*"


def expected_failures(path: Path = EXPECTED_FILE) -> list[Expected]:
    """The entries of the expected-failures file (each with its reason)."""
    return [Expected(**entry) for entry in _failure_tables(path.read_text())]


def _failure_tables(text: str) -> list[dict[str, str]]:
    """The `[[failure]]` tables of the file (TOML restricted to `key = "string"` lines, so that Python
    3.10, without tomllib, reads it too)."""
    tables: list[dict[str, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "[[failure]]":
            tables.append({})
            continue
        key, sep, value = line.partition("=")
        value = value.strip()
        if not sep or not tables or len(value) < 2 or value[0] != '"' or value[-1] != '"':
            raise ValueError(f'{EXPECTED_FILE.name}:{number}: expected [[failure]] or key = "value": {raw!r}')
        tables[-1][key.strip()] = value[1:-1]
    return tables


@dataclass
class Outcome:
    """What one launch of runtests.py gave: failing test ids (every rank's), crash text if it crashed."""

    failed: set[str] = field(default_factory=set)
    ranks_finished: int = 0
    crash: str = ""
    output: str = ""


_DRIVER = """
import runpy, sys
from mpi4py import MPI
sys.argv = ["runtests.py", *sys.argv[1:]]
code = 0
try:
    runpy.run_path("runtests.py", run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
sys.stdout.flush()
sys.stderr.flush()
MPI.COMM_WORLD.Barrier()
print(f"MPI4PY-SUITE rank {MPI.COMM_WORLD.Get_rank()} finished, exit code {code}", flush=True)
"""


def _launcher(ranks: int) -> list[str]:
    if mpi_vendor() == "Open MPI":
        return ["mpiexec", "--oversubscribe", "--bind-to", "core:overload-allowed", "-n", str(ranks)]
    return ["mpiexec", "-n", str(ranks)]


def run_suite(
    ranks: int,
    modules: tuple[str, ...] | None = CI_MODULES,
    serve_all: bool = False,
    plain: bool = False,
    timeout: float = 600,
) -> Outcome:
    """Run runtests.py (`modules`, or all of it) at `ranks` ranks under `python -m adaptcoll` (or plain)."""
    tests = sdist_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    if serve_all:
        env.update(SERVE_ALL)
    if mpi_vendor() == "Open MPI":
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["MPIEXEC_TIMEOUT"] = str(int(timeout))
    python = [sys.executable] if plain else [sys.executable, "-m", "adaptcoll"]
    command = [*_launcher(ranks), *python, "-c", _DRIVER, "--no-numba", "--no-cupy", *(modules or ())]
    try:
        run = subprocess.run(command, cwd=tests, env=env, capture_output=True, text=True, timeout=timeout + 30)
        output = run.stdout + run.stderr
        returncode = run.returncode
    except subprocess.TimeoutExpired as expired:
        output = _text(expired.stdout) + _text(expired.stderr)
        returncode = -1
    outcome = Outcome(output=output)
    for found in _RESULT.finditer(output):  # anywhere: ranks' lines may interleave mid-line
        outcome.failed.add(f"{found.group(3).rsplit('.', 1)[0]}.{found.group(2)}")
    # ranks' lines may interleave mid-line in the launcher's output: look for the markers anywhere
    outcome.ranks_finished = len(set(_FINISHED.findall(output)))
    if outcome.ranks_finished != ranks or returncode != 0:
        outcome.crash = f"exit status {returncode}, {outcome.ranks_finished} of {ranks} ranks finished"
    return outcome


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def compare(outcome: Outcome, modules: tuple[str, ...] | None, plain: bool = False) -> list[str]:
    """What is wrong with `outcome`: a crash, unexpected failures, expected failures that did not occur."""
    vendor = mpi_vendor()
    expected = {
        e.test
        for e in expected_failures()
        if e.mpi in ("*", vendor)
        and (e.kind == "mpi4py" or not plain)
        and (modules is None or e.test.split(".")[0] in modules)
    }
    problems = []
    if outcome.crash:
        problems.append(f"the run crashed ({outcome.crash}); last output:\n{outcome.output[-4000:]}")
    unexpected = sorted(outcome.failed - expected)
    if unexpected:
        problems.append("unexpected failures: " + ", ".join(unexpected))
    if not outcome.crash:
        missing = sorted(expected - outcome.failed)
        if missing:
            problems.append(
                "expected failures that passed (update tests/mpi4py_expected_failures.toml): " + ", ".join(missing)
            )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="the whole suite, not only CI_MODULES")
    parser.add_argument("--serve-all", action="store_true", help="adaptcoll serves every size (setting b)")
    parser.add_argument("--plain", action="store_true", help="plain mpi4py (no adaptcoll), for the baseline")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    modules = None if args.full else CI_MODULES
    outcome = run_suite(args.ranks, modules, args.serve_all, args.plain, args.timeout)
    problems = compare(outcome, modules, args.plain)
    print(f"failing tests ({len(outcome.failed)}): {', '.join(sorted(outcome.failed)) or 'none'}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
