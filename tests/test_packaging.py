"""Every subpackage of adaptcoll is listed in pyproject.toml, so a non-editable install (what README's
install command does on a fresh machine) carries all of it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_packaged():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "adaptcoll").rglob("__init__.py")}
    assert found <= listed, f"not in pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
