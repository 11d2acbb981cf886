"""Serving the release flow as a Prefect deployment on a schedule (``censusdp serve``): every scheduled run is a
release like any other (charged before any noise; a refused run shows as Failed).  Schedules need a Prefect server
that outlives this process; the deployment's default parameters are the config path and the run folder only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import CensusDPError

DEPLOYMENT_NAME = "scheduled"


def deployment_parameters(config_path: str, out_dir: str | None) -> dict[str, Any]:
    """Validate the config now (a broken config should fail at serve time, not at 2 a.m.)."""
    path = Path(config_path).resolve()
    load_config(path)
    return {"config_path": str(path), **({"out_dir": str(Path(out_dir).resolve())} if out_dir is not None else {})}


def make_deployment(config_path: str, cron: str, name: str = DEPLOYMENT_NAME, out_dir: str | None = None) -> Any:
    from censusdp.flows.release import release_flow

    try:
        return release_flow.to_deployment(name=name, cron=cron, parameters=deployment_parameters(config_path, out_dir))
    except ValueError as error:
        raise CensusDPError(f"serve: invalid schedule {cron!r}: {str(error).splitlines()[0]}") from None


def serve(config_path: str, cron: str, name: str = DEPLOYMENT_NAME, out_dir: str | None = None) -> None:
    """Serve the deployment until interrupted (runs execute in this process)."""
    from prefect import serve as prefect_serve

    from censusdp.flows.settings import hardened_prefect

    with hardened_prefect():
        prefect_serve(make_deployment(config_path, cron, name, out_dir))
