"""The folders are the layers of docs/architecture.md, and imports point down only.

Every module of adaptcoll belongs to one layer (by its package, or by name where a package holds
modules of two layers, as tune/ and trace/ do: the policy the decision reads next to the tool that
measures it). A module may import its own package and any lower layer, never a higher one, nor
another package of its own layer. The static check reads every import statement, those inside
functions too, so it also holds for imports made late on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "adaptcoll"

# Top to bottom. A name matches itself and everything below it (a package and its modules; the bare
# package name only the package file); the longest matching name wins, so a module can sit in another
# layer than its package. Within a layer, a name may import the names listed after it.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "tools",
        [
            "adaptcoll.__main__",
            "adaptcoll.trees",
            "adaptcoll.check",
            "adaptcoll.measure",
            "adaptcoll.noise",
            "adaptcoll.schedule",
            "adaptcoll.simulate",
            "adaptcoll.trace",
            "adaptcoll.tune.__main__",
            "adaptcoll.tune.cli",
            "adaptcoll.tune.measure",
            "adaptcoll.tune.show",
            "adaptcoll.tune.sweep",
        ],
    ),
    ("api", ["adaptcoll.MPI", "adaptcoll.dropin", "adaptcoll.comm", "adaptcoll"]),
    ("forms", ["adaptcoll.forms"]),
    ("decision", ["adaptcoll.decision", "adaptcoll.trace.attach", "adaptcoll.tune.choose"]),
    ("state", ["adaptcoll.state"]),
    (
        "inputs",
        [
            "adaptcoll.device",
            "adaptcoll.buffers",
            "adaptcoll.tune",
            "adaptcoll.trace.record",
            "adaptcoll.trace.format",
            "adaptcoll.trace.clock",
        ],
    ),
    ("protocols", ["adaptcoll.protocols"]),
    ("runtime", ["adaptcoll.runtime"]),
    ("bottom", ["adaptcoll.plans", "adaptcoll.backends"]),
]

# Imports allowed against the rule, each with the reason (keep this short).
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


MODULES = _modules()


def _matches(name: str, listed: str) -> bool:
    return name == listed or (listed != "adaptcoll" and name.startswith(listed + "."))


def _place(name: str) -> tuple[int, int, str]:
    """(layer index, position in the layer, the matching name) of a module: the longest listed name
    it equals or lies under."""
    best: tuple[int, int, str] | None = None
    for index, (_, names) in enumerate(LAYERS):
        for position, listed in enumerate(names):
            if _matches(name, listed) and (best is None or len(listed) > len(best[2])):
                best = (index, position, listed)
    assert best is not None, f"{name} is in no layer: add it to LAYERS (and to docs/architecture.md)"
    return best


def _imports(name: str, path: Path) -> set[str]:
    """The adaptcoll modules `name` imports (a package import counts as the package)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == "adaptcoll" or m.startswith("adaptcoll.")}


def _package(listed: str) -> str:
    """The top subpackage a listed name belongs to (adaptcoll.tune.cli -> adaptcoll.tune)."""
    return ".".join(listed.split(".")[:2])


def test_every_module_has_a_layer():
    for name in MODULES:
        _place(name)


def test_imports_point_down():
    wrong = []
    for name, path in MODULES.items():
        layer, position, listed = _place(name)
        for target in _imports(name, path):
            if target not in MODULES:
                continue  # adaptcoll.kernels (data) and the like
            t_layer, t_position, t_listed = _place(target)
            same_package = _package(listed) == _package(t_listed) and "adaptcoll" not in (listed, t_listed)
            upward = t_layer < layer
            sideways = t_layer == layer and t_position <= position and not same_package and LAYERS[layer][0] != "tools"
            if (upward or sideways) and (name, target) not in EXCEPTIONS:
                wrong.append(f"{name} ({LAYERS[layer][0]}) imports {target} ({LAYERS[t_layer][0]})")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_package_root_is_the_public_surface():
    """The package root holds the public surface and the commands only (issue 35: at most about 8)."""
    root_modules = sorted(p.stem for p in ROOT.glob("*.py"))
    assert root_modules == ["MPI", "__init__", "__main__", "comm", "dropin", "trees"]


@pytest.mark.parametrize("package", sorted({n for n in MODULES if (MODULES[n].name == "__init__.py")}))
def test_each_subpackage_says_its_layer(package):
    """Every subpackage's docstring says what it is; the layer ones also say what they may import."""
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text()))
    assert doc, f"{package}/__init__.py has no docstring"
    if package in (
        "adaptcoll.forms",
        "adaptcoll.decision",
        "adaptcoll.state",
        "adaptcoll.protocols",
        "adaptcoll.runtime",
        "adaptcoll.plans",
        "adaptcoll.backends",
    ):
        assert "Layer" in doc and "May import" in doc, package


def test_architecture_page_lists_the_folders():
    """docs/architecture.md's layer list and the folders agree: every subpackage is named there."""
    text = (ROOT.parent / "docs" / "architecture.md").read_text()
    for path in sorted(ROOT.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            assert f"`{path.name}/`" in text, f"docs/architecture.md does not name {path.name}/"
