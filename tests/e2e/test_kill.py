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

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from censusdp.pipeline.config.ledger_location import default_ledger_location
from censusdp.pipeline.synth.population import write_synthetic
from tests.helpers.tiny import REPO


def release_process(config: Path, seed: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "censusdp.pipeline.cli", "-q", "release", str(config),
                             "--no-prefect", "--insecure-seed", str(seed)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


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


CHARGED = Fraction(64, 25) + 4 * Fraction(3, 40)  # the pl94 preset's per-person bound (persons + 4 units), one charge


@pytest.mark.slow
def test_sigkill_at_many_points_leaves_whole_runs_or_none(tmp_path: Path) -> None:
    files = write_synthetic(20_000, 4, tmp_path / "data")
    micro, geo = files.microdata, files.geography
    from censusdp.pipeline.cli.commands import preset_text

    # the units universe rides along: its file is beside the microdata
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
    published = 1
    for i, fraction in enumerate([0.55, 0.75, 0.9, 0.97]):  # the first part of a run is Python importing
        process = release_process(config, 10 + i)
        time.sleep(duration * fraction)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        count = check_runs_folder(runs, levels)
        assert published <= count <= published + 1  # a kill publishes this run whole or not at all
        published = count
    ledger = PrivacyLedger(default_ledger_location())  # the installation's, in this test's user data directory
    charges = ledger.charges()
    assert ledger.spent("pl94-state") == sum((c.rho for c in charges), Fraction(0))
    assert all(c.rho == CHARGED for c in charges)
    published = {c.run_id for c in charges if c.status == "published"}
    visible = {entry.name for entry in runs.iterdir() if not entry.name.startswith(".")}
    # the folder is renamed into place before the ledger says "published" (a kill in between leaves "charged")
    assert published <= visible <= {c.run_id for c in charges}
    assert all(c.status in ("charged", "published") for c in charges)


DRIVER = '''
import os, sys, time
from pathlib import Path
from censusdp.pipeline.release import group_tasks, stages
from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
stage, marker = sys.argv[1], Path(sys.argv[2])

def pause():  # tell the test where we are, then wait for its SIGKILL
    marker.write_text(str(os.getpid()))
    time.sleep(600)

measure_level, chunk_tasks, rename, set_status = (group_tasks.measure_level, stages.chunk_tasks, Path.rename,
                                                PrivacyLedger.set_status)

def paused_measure_level(schema, histograms, allocations, rng):  # between two levels' draws: us to county drawn
    if allocations and allocations[0].level == "tract" and stage == "measure":
        pause()
    return measure_level(schema, histograms, allocations, rng)

def paused_chunk_tasks(release, run, level, outputs, bounds):  # as the reconcile stage starts a level
    if level == 0 and stage == "after-complete":  # every measurement saved, nothing reconciled
        pause()
    if level == 3 and stage == "reconcile":  # half the levels reconciled
        pause()
    return chunk_tasks(release, run, level, outputs, bounds)

def paused_rename(self, target):  # manifest and report written, the folder not yet renamed into place
    if self.name.endswith(".partial"):
        pause()
    return rename(self, target)

def paused_set_status(self, run_id, status, reason=None):  # published, the ledger not yet told
    if status == "published":
        pause()
    set_status(self, run_id, status, reason)

group_tasks.measure_level, stages.chunk_tasks = paused_measure_level, paused_chunk_tasks
Path.rename = paused_rename if stage == "publish" else rename
PrivacyLedger.set_status = paused_set_status if stage == "after-rename" else set_status
from censusdp.pipeline.cli import main
sys.exit(main(sys.argv[3:]))
'''


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["measure", "after-complete", "reconcile", "publish", "after-rename"])
def test_sigkill_at_a_chosen_stage(stage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The kill lands where the test chose (the run itself says so), and each outcome is the right one."""
    files = write_synthetic(5_000, 4, tmp_path / "data")
    micro, geo = files.microdata, files.geography
    from censusdp.pipeline.cli.commands import preset_text

    # the units universe rides along: its file is beside the microdata
    text = preset_text("pl94").replace('path = "microdata.parquet"', f'path = "{micro}"')
    config = tmp_path / "pl94.toml"
    config.write_text(text.replace('geography = "geography.parquet"', f'geography = "{geo}"'))
    (tmp_path / "driver.py").write_text(DRIVER)
    marker = tmp_path / "paused-at"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), stage, str(marker), "-q", "release",
                                str(config), "--no-prefect"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert process.poll() is None, f"the run ended before reaching {stage}: {process.stderr.read()[-2000:]!r}"
        assert time.monotonic() < deadline, f"the run never reached {stage}"
        time.sleep(0.05)
    assert int(marker.read_text()) == process.pid
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    runs, levels = tmp_path / "runs", ["us", "state", "county", "tract", "block_group", "block"]
    (charge,) = PrivacyLedger(default_ledger_location()).charges()
    assert charge.rho == CHARGED, "the charge is never refunded"
    if stage == "after-rename":  # the run is out; only the ledger's status lags behind
        assert check_runs_folder(runs, levels) == 1 and charge.status == "charged"
        return
    assert check_runs_folder(runs, levels) == 0 and charge.status == "charged"
    (partial,) = runs.iterdir()
    assert partial.name == f".{charge.run_id}.partial"
    noisy = (partial / "measurements" / "block.parquet").read_bytes() if stage != "measure" else b""
    code = main(["-q", "release", str(config), "--resume", charge.run_id])  # the killed process is gone: in this one
    resumed = capsys.readouterr()
    if stage == "measure":  # noise was drawn for some levels only: never finished, the charge stands
        assert code != 0 and "were not all saved" in resumed.err
        return
    assert code == 0, resumed.err[-2000:]
    assert check_runs_folder(runs, levels) == 1
    assert (runs / charge.run_id / "measurements" / "block.parquet").read_bytes() == noisy  # no new noise
    (after,) = PrivacyLedger(default_ledger_location()).charges()
    assert after.status == "published" and after.rho == charge.rho
