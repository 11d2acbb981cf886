"""The Prefect flow end to end in a subprocess with its own PREFECT_HOME, and the leak test.

Markers: a text column the schema never uses, and a distinctive true count (MARKER_COUNT persons in one cell
of one otherwise empty unit).  The budget is tiny (sigma in the thousands) and there are no invariants, so
no published noisy or reconciled value can legitimately equal the marker count except by a chance of about
1e-4 per value; the run is seeded, so the check is deterministic.  Neither marker may appear, as text or as
a little-endian int64, in Prefect's database, logs or storage, the run folder, stdout or stderr.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.helpers.tiny import REPO, TINY_TOML, tiny_microdata

MARKER = "ZQXLEAKMARKERQZX"
MARKER_COUNT = 104729


def leak_dataset(folder: Path) -> Path:
    micro, geo = tiny_microdata()
    micro = micro.filter(pl.col("geocode") != "2311")
    marked = pl.DataFrame({"geocode": ["2311"] * MARKER_COUNT, "COLOUR": ["g"] * MARKER_COUNT,
                           "ADULT": ["1"] * MARKER_COUNT})
    pl.concat([micro, marked]).with_columns(pl.lit(MARKER).alias("NAME")).write_parquet(folder / "microdata.parquet")
    geo.write_parquet(folder / "geography.parquet")
    text = TINY_TOML.format(rho="1/1000000")
    text = text[: text.index("[[invariants]]")] + text[text.index("[[structural_zeros]]"):]
    # GLS estimates too: the flow injects their writer into the release (the release cannot import them)
    (folder / "config.toml").write_text(text.replace("[output]\n", "[output]\nestimates = true\n"))
    return folder / "config.toml"


# `censusdp release` (the same main()) with the measure stage's helper (group_tasks.measure_level) wrapped: it
# notes the Prefect settings in
# force while a task runs (public booleans only), so removing the hardening fails the test even though every
# task also asks for no persistence itself
SPY_DRIVER = """
import json, sys
import censusdp.pipeline.release.group_tasks as stages
from prefect.settings import get_current_settings
from censusdp.pipeline.cli import main
original, seen = stages.measure_level, []
def spy(*args, **kwargs):
    s = get_current_settings()
    seen.append([s.results.persist_by_default, s.tasks.default_persist_result, s.logging.log_prints])
    return original(*args, **kwargs)
stages.measure_level = spy
code = main(sys.argv[2:])
open(sys.argv[1], "w").write(json.dumps(seen))
sys.exit(code)
"""


@pytest.mark.slow
def test_release_through_prefect_publishes_and_leaks_nothing(tmp_path: Path) -> None:
    config = leak_dataset(tmp_path)
    home = tmp_path / "prefect-home"
    storage = tmp_path / "prefect-results"
    # a hostile profile: result persistence and print capture switched on; nothing may be persisted anyway
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
           "PREFECT_API_URL": "", "PYTHONPATH": str(REPO), "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
           "PREFECT_TASKS_DEFAULT_PERSIST_RESULT": "true", "PREFECT_LOCAL_STORAGE_PATH": str(storage),
           "PREFECT_LOGGING_LOG_PRINTS": "true"}
    seen = tmp_path / "settings-seen.json"
    done = subprocess.run([sys.executable, "-c", SPY_DRIVER, str(seen), "release", str(config), "--insecure-seed", "3"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # inside every measure task the hardened settings held, whatever the profile said
    assert json.loads(seen.read_text()) == [[False, False, False]] * 4
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [lv["name"] for lv in manifest["levels"]] == ["root", "region", "district", "unit"]
    assert home.exists() and any(home.rglob("*.db")), "Prefect did not use the embedded SQLite store"
    assert not storage.exists() or not any(storage.rglob("*")), "Prefect persisted results"
    markers = [MARKER.encode(), str(MARKER_COUNT).encode(), MARKER_COUNT.to_bytes(8, "little", signed=True),
               MARKER_COUNT.to_bytes(4, "little", signed=True), np.float64(MARKER_COUNT).tobytes(),
               MARKER_COUNT.to_bytes(8, "big", signed=True)]
    for text in (done.stdout, done.stderr):
        assert MARKER not in text and str(MARKER_COUNT) not in text
    scanned = 0
    for path in [*home.rglob("*"), *run_dir.rglob("*")]:
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            for marker in markers:
                assert marker not in data, f"marker {marker!r} found in {path}"
    assert scanned > 10
    for path in run_dir.rglob("*.parquet"):  # compressed pages hide bytes: look at the decoded values too
        for column in pl.read_parquet(path).iter_columns():
            if column.dtype == pl.Utf8 or column.dtype == pl.Categorical:
                assert not column.cast(pl.Utf8).str.contains(MARKER).any(), f"marker text in {path}"
            elif column.dtype.is_numeric():
                assert not (column == MARKER_COUNT).any(), f"the marked true count in {path}:{column.name}"
    # the marked cell was measured and published with noise, so the test would see a leak of the true value
    unit = pl.read_parquet(run_dir / "measurements" / "unit.parquet")
    assert unit.filter((pl.col("geoid") == "2311") & (pl.col("query") == "detailed")).height == 6

    # (a failing release's FAILED flow run and its one-line reason: test_flow_secrets.py)
    database = next(home.rglob("*.db"))
    with sqlite3.connect(database) as connection:
        states = connection.execute("SELECT state_type, state_name FROM flow_run ORDER BY created").fetchall()
    assert [s[0] for s in states] == ["COMPLETED"]
    # the flow's artifact is the published report with the published figure inlined (kept in memory, not read
    # back), and the estimates were written inside the release
    with sqlite3.connect(database) as connection:
        (artifact,) = connection.execute("SELECT data FROM artifact WHERE key = 'censusdp-budget'").fetchall()
    plot = base64.b64encode((run_dir / "budget_shares.png").read_bytes()).decode()
    report = (run_dir / "report.md").read_text().replace("(budget_shares.png)", f"(data:image/png;base64,{plot})")
    assert json.loads(artifact[0]) == report and plot in report
    estimates = pl.read_parquet(run_dir / "estimates" / "unit.parquet")
    assert estimates.height == 6 * manifest["levels"][-1]["nodes"] and estimates["std_error"].min() > 0
