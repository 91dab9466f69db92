"""Run some of the suite's test files again, in a child pytest with other settings in its environment
(the pure-Python engine, the progress thread): the guarantees those files check must hold there too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_again(files: Sequence[str], env: Mapping[str, str], timeout: float = 570) -> None:
    """pytest `files` (paths from the repository root) with `env` added to the environment; asserts that
    the child passed and ran tests (its output's tail is the assertion's message). The child runs its
    tests one after another ("-o addopts=" drops pyproject's "-n 2"): it already runs beside the parent's
    other pytest-xdist worker."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", *files],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout.splitlines()[-1], tail
