"""adaptcoll.simulate gives bit-for-bit the outputs it gave before its speed work: the golden jobs of
bench/simulate_golden.py (the quick ones) against the digests stored in tests/simulate_golden.json.

A deliberate change of the model changes these digests: regenerate them with
`python bench/simulate_golden.py --digests` and say why in the commit."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORED = json.loads((ROOT / "tests" / "simulate_golden.json").read_text())


def _golden():
    spec = importlib.util.spec_from_file_location("bench_simulate_golden", ROOT / "bench" / "simulate_golden.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GOLDEN = _golden()


@pytest.mark.parametrize("name", sorted(STORED))
def test_golden_digest(name):
    text = GOLDEN.outputs({name})[name]
    assert GOLDEN.digests({name: text})[name] == STORED[name], f"{name}: simulated output changed:\n{text[:2000]}"


def test_every_stored_job_exists():
    assert set(STORED) <= {g.name for g in GOLDEN.JOBS}
