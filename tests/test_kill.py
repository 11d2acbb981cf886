"""Publishing is atomic: SIGKILL at any point leaves complete run folders or none, and a consistent ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest

from pipeline.ledger import PrivacyLedger
from pipeline.ledger_location import default_ledger_location
from pipeline.synth import write_synthetic
from tests.conftest import REPO


def release_process(config: Path, seed: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "pipeline.cli", "-q", "release", str(config), "--no-prefect",
                             "--insecure-seed", str(seed)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def check_runs_folder(runs: Path, levels: list[str]) -> int:
    """Every visible entry is a complete run; returns how many there are."""
    complete = 0
    for entry in runs.iterdir() if runs.exists() else []:
        if entry.name.startswith("."):
            assert entry.name.endswith(".partial")  # unpublished work, never a run folder
            continue
        manifest = json.loads((entry / "manifest.json").read_text())
        assert (entry / "report.md").exists()
        for level in levels:
            assert (entry / "tables" / f"{level}.parquet").exists()
            assert (entry / "measurements" / f"{level}.parquet").exists()
        assert manifest["run_id"] == entry.name
        complete += 1
    return complete


@pytest.mark.slow
def test_sigkill_at_many_points_leaves_whole_runs_or_none(tmp_path: Path) -> None:
    micro, geo = write_synthetic(20_000, 4, tmp_path / "data")
    from pipeline.commands import preset_text

    text = preset_text("pl94").replace('path = "microdata.parquet"', f'path = "{micro}"')
    text = text.replace('geography = "geography.parquet"', f'geography = "{geo}"').replace(
        'cap_rho = "10.24"', 'cap_rho = "1000"')
    config = tmp_path / "pl94.toml"
    config.write_text(text)
    levels = ["us", "state", "county", "tract", "block_group", "block"]
    runs = tmp_path / "runs"
    started = time.monotonic()
    full = release_process(config, 1)
    assert full.wait(timeout=300) == 0, full.stderr.read().decode()[-2000:]
    duration = time.monotonic() - started
    assert check_runs_folder(runs, levels) == 1
    for i, fraction in enumerate([0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 0.97]):
        process = release_process(config, 10 + i)
        time.sleep(duration * fraction)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        check_runs_folder(runs, levels)
    ledger = PrivacyLedger(default_ledger_location())  # the installation's, in this test's user data directory
    charges = ledger.charges()
    assert ledger.spent("pl94-state") == sum((c.rho for c in charges), Fraction(0))
    assert all(c.rho == Fraction(64, 25) for c in charges)
    published = {c.run_id for c in charges if c.status == "published"}
    visible = {entry.name for entry in runs.iterdir() if not entry.name.startswith(".")}
    # the folder is renamed into place before the ledger says "published" (a kill in between leaves "charged")
    assert published <= visible <= {c.run_id for c in charges}
    assert all(c.status in ("charged", "published") for c in charges)
