"""The Prefect flow end to end, in subprocesses with a PREFECT_HOME of the test's own and a real PostgreSQL ledger:
what Prefect, the logs and the written files hold of the data and of the ledger's password.

Markers: a text column the schema never uses, a distinctive true count (MARKER_COUNT persons in one cell of one
otherwise empty unit), the password of the ledger's URL, and a bad value in one row of a second microdata file.
The budget is tiny (sigma in the thousands) and there are no invariants, so no published noisy or reconciled
value can legitimately equal the marker count except by a chance of about 1e-4 per value.  None may appear, as
text or as binary numbers, in Prefect's database, logs or storage, the run folders, stdout or stderr.  The bad
file's release is charged and reaches Prefect with a category only; ``postprocess`` then finds the ledger from
the user's environment, not from the run's files.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from tests.helpers.tiny import REPO, TINY_TOML, tiny_microdata

MARKER = "ZQXLEAKMARKERQZX"
MARKER_COUNT = 104729
BAD_ROW, BAD_VALUE = 1234, "purplezqx"


def leak_dataset(folder: Path, ledger_url: str) -> Path:
    micro, geo = tiny_microdata()
    micro = micro.filter(pl.col("geocode") != "2311")
    marked = pl.DataFrame({"geocode": ["2311"] * MARKER_COUNT, "COLOUR": ["g"] * MARKER_COUNT,
                           "ADULT": ["1"] * MARKER_COUNT})
    micro = pl.concat([micro, marked]).with_columns(pl.lit(MARKER).alias("NAME"))
    micro.write_parquet(folder / "microdata.parquet")
    colours = micro["COLOUR"].to_list()
    colours[BAD_ROW - 1] = BAD_VALUE
    micro.with_columns(pl.Series("COLOUR", colours)).write_parquet(folder / "bad.parquet")
    geo.write_parquet(folder / "geography.parquet")
    text = TINY_TOML.format(rho="1/1000000").replace('cap_rho = "1000"', f'cap_rho = "1000"\npath = "{ledger_url}"')
    text = text[: text.index("[[invariants]]")] + text[text.index("[[structural_zeros]]"):]
    # GLS estimates too: the flow injects their writer into the release (the release cannot import them)
    (folder / "config.toml").write_text(text.replace("[output]\n", "[output]\nestimates = true\n"))
    return folder / "config.toml"


def scan(paths: list[Path], markers: list[bytes]) -> int:
    """Every file under ``paths`` (databases included) is free of every marker; returns how many were read."""
    scanned = 0
    for path in [p for root in paths for p in root.rglob("*")]:
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            for marker in markers:
                assert marker not in data, f"marker {marker!r} found in {path}"
    return scanned


# Two `censusdp release` commands (the same main()) in one process, as a scheduler retrying a job would run them:
# the first, on the bad file, must fail; the measure stage's helper (group_tasks.measure_level) is wrapped to note
# the Prefect settings in force while a task runs (public booleans only), so removing the hardening fails the test
# even though every task also asks for no persistence itself.  Writes [exit codes, settings seen].
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
argv = sys.argv[2:]
codes = []
for command in (argv[:argv.index("--then")], argv[argv.index("--then") + 1:]):
    codes.append(main(command))
    print(SEPARATOR, flush=True)
    print(SEPARATOR, file=sys.stderr, flush=True)
open(sys.argv[1], "w").write(json.dumps([codes, seen]))
"""
SEPARATOR = "=== the next release ==="


@pytest.mark.slow
def test_prefect_and_the_files_hold_no_value_and_no_password(tmp_path: Path, prefect_home: Path, postgres_url: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    password = urlsplit(postgres_url).password
    assert password and len(password) >= 16
    config = leak_dataset(tmp_path, postgres_url)
    home = prefect_home
    storage = tmp_path / "prefect-results"
    # a hostile profile: result persistence and print capture switched on; nothing may be persisted anyway
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
           "PYTHONPATH": str(REPO), "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
           "PREFECT_TASKS_DEFAULT_PERSIST_RESULT": "true", "PREFECT_LOCAL_STORAGE_PATH": str(storage),
           "PREFECT_LOGGING_LOG_PRINTS": "true"}
    env.pop("PREFECT_API_URL", None)  # Prefect's embedded server, whatever the caller's environment names
    env.pop("CENSUSDP_LEDGER", None)

    # a bad value is found after the charge (a larger rho: the tiny one's accounting takes seconds), then the release
    seen = tmp_path / "seen.json"
    done = subprocess.run([sys.executable, "-c", f"SEPARATOR = {SEPARATOR!r}\n" + SPY_DRIVER, str(seen),
                           "release", str(config), "--microdata", str(tmp_path / "bad.parquet"), "--rho", "4", "--then",
                           "release", str(config), "--insecure-seed", "3"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    codes, settings_seen = json.loads(seen.read_text())
    rejected_err, published_err, _ = done.stderr.split(SEPARATOR)
    published_out = done.stdout.split(SEPARATOR)[1]
    # the flow's own error, raised again as itself in the process that started the flow (not Prefect's text)
    assert codes[0] != 0 and "censusdp: error: the input failed validation after the budget was charged" in (
        rejected_err), rejected_err[-2000:]
    assert codes[1] == 0, published_err[-3000:]
    # inside every measure task the hardened settings held, whatever the profile said
    assert settings_seen == [[False, False, False]] * 4
    run_dir = Path(published_out.strip().splitlines()[-1])
    with pytest.MonkeyPatch.context() as patch:  # postprocess draws nothing: in this process, the ledger from env
        patch.setenv("CENSUSDP_LEDGER", postgres_url)
        code = main(["postprocess", str(run_dir)])
    again = capsys.readouterr()
    assert code == 0, again.err[-2000:]
    post_dir = Path(again.out.strip().splitlines()[-1])

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [lv["name"] for lv in manifest["levels"]] == ["root", "region", "district", "unit"]
    assert manifest["ledger"]["location"] == urlsplit(postgres_url)._replace(
        netloc=f"censusdp@{urlsplit(postgres_url).hostname or ''}", query="").geturl()
    assert [(c.status, c.reason) for c in PrivacyLedger(postgres_url).charges("tiny")] == [
        ("failed", "input-validation:domain"), ("published", None), ("postprocess", None)]
    assert home.exists() and any(home.rglob("*.db")), "Prefect did not use the embedded SQLite store"
    assert not storage.exists() or not any(storage.rglob("*")), "Prefect persisted results"
    texts = [MARKER, str(MARKER_COUNT), password, BAD_VALUE, f"row {BAD_ROW}", "column COLOUR"]
    for output in (done.stdout + done.stderr, again.out + again.err):
        for text in texts:
            assert text not in output
    markers = [*(t.encode() for t in texts), MARKER_COUNT.to_bytes(8, "little", signed=True),
               MARKER_COUNT.to_bytes(4, "little", signed=True), np.float64(MARKER_COUNT).tobytes(),
               MARKER_COUNT.to_bytes(8, "big", signed=True)]
    assert scan([home, run_dir, post_dir], markers) > 10
    for path in [*run_dir.rglob("*.parquet"), *post_dir.rglob("*.parquet")]:  # compressed pages hide bytes
        for column in pl.read_parquet(path).iter_columns():
            if column.dtype == pl.Utf8 or column.dtype == pl.Categorical:
                assert not column.cast(pl.Utf8).str.contains(MARKER).any(), f"marker text in {path}"
            elif column.dtype.is_numeric():
                assert not (column == MARKER_COUNT).any(), f"the marked true count in {path}:{column.name}"
    # the marked cell was measured and published with noise, so the test would see a leak of the true value
    unit = pl.read_parquet(run_dir / "measurements" / "unit.parquet")
    assert unit.filter((pl.col("geoid") == "2311") & (pl.col("query") == "detailed")).height == 6

    database = next(home.rglob("*.db"))
    with sqlite3.connect(database) as connection:
        states = connection.execute("SELECT state_type, state_name FROM flow_run ORDER BY created").fetchall()
        messages = [m for (m,) in connection.execute("SELECT message FROM flow_run_state WHERE type = 'FAILED'")]
        (artifact,) = connection.execute("SELECT data FROM artifact WHERE key = 'censusdp-budget'").fetchall()
    assert [s[0] for s in states] == ["FAILED", "COMPLETED"]
    assert any("after the budget was charged" in (m or "") for m in messages), messages
    # the flow's artifact is the published report with the published figure inlined (kept in memory, not read
    # back), and the estimates were written inside the release
    plot = base64.b64encode((run_dir / "budget_shares.png").read_bytes()).decode()
    report = (run_dir / "report.md").read_text().replace("(budget_shares.png)", f"(data:image/png;base64,{plot})")
    assert json.loads(artifact[0]) == report and plot in report
    estimates = pl.read_parquet(run_dir / "estimates" / "unit.parquet")
    assert estimates.height == 6 * manifest["levels"][-1]["nodes"] and estimates["std_error"].min() > 0
