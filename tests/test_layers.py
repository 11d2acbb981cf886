"""The architecture as a test: imports go one way (ARCHITECTURE.md).

Every import of project code is read from the source (module level and inside functions alike) and checked
against the layers below; a package may import its own layer and the layers to its left only:

    errors, exact  <  dp  <  config  <  budget  <  io  <  release  <  uncertainty  <  evaluate  <  flows  <  cli

and besides:
- ``geography`` and ``postprocess`` import nothing of ``pipeline`` or ``flows``;
- ``synth`` (the only user of ``numpy.random``) is imported by ``cli`` only;
- Prefect is imported in ``flows`` only; argparse and ``print`` appear in ``cli`` only;
- nothing imports ``evaluate`` (NOT PRIVATE: it reads the true data) except ``cli``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "flows", "geography", "postprocess")
LAYERS = ("pipeline.errors pipeline.exact", "pipeline.dp", "pipeline.config", "pipeline.budget", "pipeline.io",
          "pipeline.release", "pipeline.uncertainty", "pipeline.evaluate", "flows", "pipeline.cli")
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names.split()}


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement, lazy ones included; ``from a import b`` yields both
    ``a`` and ``a.b`` (b may be a module)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def unit(name: str) -> str | None:
    """The layer unit a module belongs to (longest prefix in RANK), ``synth``, or None for outside code."""
    if name == "pipeline.synth" or name.startswith("pipeline.synth."):
        return "pipeline.synth"
    for prefix in sorted(RANK, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


def violations(path: Path) -> list[str]:
    source = module_name(path)
    top = source.split(".")[0]
    own = unit(source)
    found = []
    for target, line in imports(path):
        where = f"{path.relative_to(ROOT)}:{line} imports {target}"
        head = target.split(".")[0]
        if top in ("geography", "postprocess") and head in ("pipeline", "flows"):
            found.append(f"{where}: {top}/ must not import pipeline/ or flows/")
        if head == "prefect" and top != "flows":
            found.append(f"{where}: Prefect lives in flows/ only")
        if head == "argparse" and own != "pipeline.cli":
            found.append(f"{where}: argument parsing lives in pipeline/cli/ only")
        if target.startswith("numpy.random") and own != "pipeline.synth":
            found.append(f"{where}: numpy.random is for synthetic data (pipeline/synth/) only")
        to = unit(target)
        if to is None or own is None or to == own:
            continue
        if to == "pipeline.synth" and own != "pipeline.cli":
            found.append(f"{where}: only pipeline/cli/ imports pipeline/synth/")
        elif own == "pipeline.synth" and to != "pipeline.synth":
            found.append(f"{where}: pipeline/synth/ is a leaf")
        elif to != "pipeline.synth" and own != "pipeline.synth" and RANK[to] > RANK[own]:
            found.append(f"{where}: {own} may not import {to} (a later layer)")
    return found


def prints(path: Path) -> list[str]:
    if unit(module_name(path)) == "pipeline.cli":
        return []
    return [f"{path.relative_to(ROOT)}:{node.lineno}: print() lives in pipeline/cli/ only"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]


def test_imports_go_one_way() -> None:
    found = [v for path in modules() for v in violations(path) + prints(path)]
    assert not found, "\n".join(found)


def test_every_pipeline_module_has_a_layer() -> None:
    """A new top-level module or package must be placed in LAYERS (and ARCHITECTURE.md) deliberately."""
    unplaced = [module_name(p) for p in modules() if p.parts[len(ROOT.parts)] == "pipeline"
                and module_name(p) != "pipeline" and unit(module_name(p)) is None]
    assert not unplaced, unplaced


@pytest.mark.parametrize(("source", "text", "problem"), [
    ("pipeline/dp/x.py", "from pipeline.release.stages import publish\n", "may not import pipeline.release"),
    ("pipeline/release/x.py", "def f():\n    from pipeline.evaluate import compare\n", "may not import"),
    ("pipeline/release/x.py", "import pipeline.uncertainty.gls\n", "may not import pipeline.uncertainty"),
    ("pipeline/config/x.py", "from pipeline import release\n", "may not import pipeline.release"),
    ("postprocess/x.py", "from pipeline.dp import noise\n", "must not import pipeline/"),
    ("pipeline/release/x.py", "from prefect import task\n", "Prefect lives in flows/"),
    ("pipeline/budget/x.py", "import argparse\n", "argument parsing"),
    ("pipeline/evaluate/x.py", "from pipeline.synth.population import write_synthetic\n", "only pipeline/cli/"),
    ("pipeline/io/x.py", "from numpy.random import default_rng\n", "numpy.random"),
    ("flows/x.py", "from pipeline.cli import main\n", "may not import pipeline.cli"),
])
def test_the_check_catches_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str,
                                           text: str, problem: str) -> None:
    """The checker itself, on planted files: each forbidden edge is reported."""
    path = tmp_path / source
    path.parent.mkdir(parents=True)
    path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert any(problem in v for v in violations(path)), violations(path)


def test_the_check_allows_downward_and_own_layer_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pipeline" / "release" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text("from pipeline.dp import noise\nfrom pipeline.release import chunks\nfrom pipeline.errors import "
                    "CensusDPError\nfrom postprocess import reconcile\nimport numpy as np\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert violations(path) == []
    (tmp_path / "pipeline" / "release" / "y.py").write_text("print('x')\n")
    assert prints(tmp_path / "pipeline" / "release" / "y.py")


def test_modules_import_only_shared_helpers(tmp_path: Path) -> None:
    """No test module (nor conftest) imports another: what they share lives in tests/helpers/."""

    def test_imports(path: Path) -> list[str]:
        return [f"{path.relative_to(root)}:{line} imports {target}" for target, line in imports(path)
                if (target == "tests" or target.startswith("tests.")) and not target.startswith("tests.helpers")]

    root = ROOT / "tests"
    found = [v for path in sorted(root.rglob("*.py")) if "helpers" not in path.relative_to(root).parts
             for v in test_imports(path)]
    assert not found, "\n".join(found)
    root = tmp_path / "tests"  # the check itself, on a planted module
    (root / "dp").mkdir(parents=True)
    (root / "dp" / "test_x.py").write_text("from tests.dp.test_noise import SAMPLERS\nfrom tests.helpers import ok\n")
    assert [v.split(" imports ")[1] for v in test_imports(root / "dp" / "test_x.py")] == [
        "tests.dp.test_noise", "tests.dp.test_noise.SAMPLERS"]
