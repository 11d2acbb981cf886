"""The flow's parameters: the insecure-seed guard (a deployment parameter alone never switches off the CSPRNG, and
the CLI's --insecure-seed changes nothing in the process's environment) and rho as a deployment run sends it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from censusdp.pipeline.cli import main
from censusdp.pipeline.config.options import insecure_seed_is_allowed
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.tiny import REPO


def test_the_flow_refuses_a_seed_it_was_not_given_by_the_cli(tiny_release: Path) -> None:
    from censusdp.flows.release import release_flow

    with pytest.raises(CensusDPError, match="insecure_seed is for tests only"):
        release_flow.fn(config_path=str(tiny_release), insecure_seed=7)  # as a deployment run would call it
    assert not (tiny_release.parent / "runs").exists()


def test_the_cli_seed_leaves_no_trace_in_the_process(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = dict(os.environ)
    assert main(["-q", "release", str(tiny_release), "--no-prefect", "--insecure-seed", "3"]) == 0
    assert dict(os.environ) == before and not insecure_seed_is_allowed()
    from censusdp.flows.release import release_flow

    with pytest.raises(CensusDPError, match="insecure_seed is for tests only"):  # still refused afterwards
        release_flow.fn(config_path=str(tiny_release), insecure_seed=3)


def test_the_deployment_takes_rho_as_the_readme_writes_it(tiny_release: Path) -> None:
    """`prefect deployment run censusdp-release/scheduled -p rho=1.5` sends a JSON number."""
    from fractions import Fraction

    from censusdp.flows.release import release_flow
    from censusdp.pipeline.config.options import load_release_config

    for given, exact in ((1.5, Fraction(3, 2)), (2, Fraction(2)), ("64/25", Fraction(64, 25)), (0.1, Fraction(1, 10))):
        checked = release_flow.validate_parameters({"config_path": str(tiny_release), "rho": given})
        assert load_release_config(str(tiny_release), rho=checked["rho"]).budget.rho == exact


def test_importing_the_flows_changes_nothing_in_the_process() -> None:
    """The hardened settings are a Prefect settings context entered around flow calls, not os.environ edits
    (polars, imported first, sets its own allocator variable on import)."""
    probe = ("import os, polars; before = dict(os.environ); "
             "import censusdp.flows, censusdp.flows.release, censusdp.flows.serve, censusdp.flows.settings; "
             "assert dict(os.environ) == before, [k for k in before if os.environ.get(k) != before[k]]")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_hardened_settings_override_a_hostile_profile() -> None:
    from prefect.settings import get_current_settings, temporary_settings

    from censusdp.flows.settings import hardened_prefect

    hostile = {"results.persist_by_default": True, "tasks.default_persist_result": True, "logging.log_prints": True}
    with temporary_settings(updates=hostile), hardened_prefect():
        settings = get_current_settings()
        assert not settings.results.persist_by_default and not settings.tasks.default_persist_result
        assert not settings.logging.log_prints and not settings.server.analytics_enabled
    with temporary_settings(updates=hostile):  # and only while entered
        assert get_current_settings().results.persist_by_default
