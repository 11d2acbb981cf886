"""The flow's insecure-seed guard (issue 10, item 2): a deployment parameter alone never switches off the CSPRNG,
and the CLI's --insecure-seed changes nothing in the process's environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import CensusDPError
from pipeline.options import insecure_seed_is_allowed


def test_the_flow_refuses_a_seed_it_was_not_given_by_the_cli(tiny_release: Path) -> None:
    from flows.release import release_flow

    with pytest.raises(CensusDPError, match="insecure_seed is for tests only"):
        release_flow.fn(config_path=str(tiny_release), insecure_seed=7)  # as a deployment run would call it
    assert not (tiny_release.parent / "runs").exists()


def test_the_cli_seed_leaves_no_trace_in_the_process(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = dict(os.environ)
    assert main(["-q", "release", str(tiny_release), "--no-prefect", "--insecure-seed", "3"]) == 0
    assert dict(os.environ) == before and not insecure_seed_is_allowed()
    from flows.release import release_flow

    with pytest.raises(CensusDPError, match="insecure_seed is for tests only"):  # still refused afterwards
        release_flow.fn(config_path=str(tiny_release), insecure_seed=3)
