"""The architecture as a test: imports go one way (ARCHITECTURE.md).

The layers and the forbidden imports are import-linter contracts in pyproject.toml (``lint-imports``).  What a
contract cannot state is checked here from the source: ``numpy.random`` is for synthetic data only (a contract sees
``numpy``, not its submodules), ``print`` appears in the command line only, and test modules share code through
tests/helpers only.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "flows", "geography", "postprocess")


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement, lazy ones included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def source_problems(path: Path, root: Path = ROOT) -> list[str]:
    where = path.relative_to(root)
    found = [f"{where}:{line} imports {target}: numpy.random is for synthetic data (pipeline/synth/) only"
             for target, line in imports(path)
             if target.startswith("numpy.random") and where.parts[:2] != ("pipeline", "synth")]
    if where.parts[:2] != ("pipeline", "cli"):
        found += [f"{where}:{node.lineno}: print() lives in pipeline/cli/ only" for node in ast.walk(ast.parse(
            path.read_text())) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print"]
    return found


def test_the_import_contracts_are_kept() -> None:
    linted = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "0 broken" in linted.stdout and " kept" in linted.stdout


def test_numpy_random_and_print_stay_where_they_belong(tmp_path: Path) -> None:
    found = [v for path in modules() for v in source_problems(path)]
    assert not found, "\n".join(found)
    planted = tmp_path / "pipeline" / "release" / "x.py"  # the check itself, on a planted module
    planted.parent.mkdir(parents=True)
    planted.write_text("from numpy.random import default_rng\nprint('x')\n")
    problems = source_problems(planted, tmp_path)
    assert any("numpy.random is for" in p for p in problems) and any("print()" in p for p in problems)


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
