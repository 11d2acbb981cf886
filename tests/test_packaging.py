"""censusdp installs as one import namespace, ``censusdp.*``: the stage folders at the top of the repository are
``censusdp.pipeline``, ``censusdp.flows``, ``censusdp.postprocess`` and ``censusdp.geography``, so a user's own
``flows/`` or ``pipeline/`` folder never shadows them, and importing censusdp changes nothing in the process."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.helpers.decoy import decoy_project

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_installed() -> None:
    """pyproject.toml lists the packages by hand (a mapped folder cannot be found automatically): a new package
    folder must be listed, or a wheel would lack it while an editable install still found it."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"censusdp." + ".".join(p.parent.relative_to(ROOT).parts)
               for top in setuptools["package-dir"].values() for p in (ROOT / top).rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders


def test_a_users_own_flows_and_pipeline_folders_are_not_imported(tmp_path: Path) -> None:
    project = decoy_project(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(project)}
    script = Path(sys.executable).with_name("censusdp")
    for argv in ([str(script), "budget", "--help"], [sys.executable, "-m", "censusdp.pipeline.cli", "init", "--help"],
                 [sys.executable, "-c", "import censusdp.flows.release, censusdp.pipeline.release.stages"]):
        ran = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0 and "own" not in ran.stderr, (argv, ran.stderr[-2000:])
    shadowed = subprocess.run([sys.executable, "-c", "import flows"], cwd=project, env=env, capture_output=True,
                              text=True, timeout=60)  # the decoy is real: importing it by its bare name fails
    assert "the user's own flows package was imported" in shadowed.stderr


def test_importing_censusdp_changes_no_environment_variable() -> None:
    # polars sets its allocator's variable when it loads, prefect some of its own: theirs, loaded first
    code = ("import os, polars, pyarrow, numpy, cvxpy, prefect; before = dict(os.environ); "
            "import censusdp.pipeline.cli, censusdp.flows.release, censusdp.pipeline.release.stages, "
            "censusdp.postprocess.reconcile; "
            "print(sorted(set(os.environ.items()) ^ set(before.items())))")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert ran.stdout.strip() == "[]"


def test_commands_that_solve_nothing_do_not_load_the_solvers(tiny_release: Path) -> None:
    """cvxpy is most of the CLI's start-up time: loaded where a batch is solved, not by reading a configuration,
    checking data or showing a budget."""
    code = ("import sys; from censusdp.pipeline.cli import main; "
            f"codes = [main(['-q', 'budget', {str(tiny_release)!r}]), main(['-q', 'check', {str(tiny_release)!r}])]; "
            "print(codes, 'cvxpy' in sys.modules, 'distributed' in sys.modules)")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # nor Dask, which sets its logger's handler and its configuration as it loads: where a runner starts
    assert ran.stdout.strip().splitlines()[-1] == "[0, 0] False False", ran.stdout + ran.stderr
