from __future__ import annotations

from pathlib import Path

import pytest

from censusdp.pipeline.errors import CensusDPError
from tests.helpers.configs import edit_config


def test_deployment_has_the_schedule_and_only_paths_as_parameters(tiny_release: Path) -> None:
    from censusdp.flows.serve import make_deployment

    deployment = make_deployment(str(tiny_release), "0 2 * * *", out_dir=str(tiny_release.parent / "runs"))
    assert deployment.name == "scheduled"
    assert set(deployment.parameters) == {"config_path", "out_dir"}
    assert all(isinstance(v, str) for v in deployment.parameters.values())
    schedules = [s.schedule for s in deployment.schedules]
    assert [s.cron for s in schedules] == ["0 2 * * *"]


def test_invalid_cron_and_invalid_config_fail_at_serve_time(tiny_release: Path) -> None:
    from censusdp.flows.serve import make_deployment

    with pytest.raises(CensusDPError, match="invalid schedule"):
        make_deployment(str(tiny_release), "not a cron")
    edit_config(tiny_release, {"budget.rho": "-4"})
    with pytest.raises(CensusDPError, match="budget.rho"):
        make_deployment(str(tiny_release), "0 2 * * *")
