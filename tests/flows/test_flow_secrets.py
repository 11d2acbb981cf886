"""Through Prefect, against a real PostgreSQL ledger: a release whose input fails a value
check is charged and reaches Prefect with a category only (no row, no column, no value), and the ledger URL's
password reaches no written file, Prefect's database or logs, stdout or stderr; ``postprocess`` then finds the
ledger from the user's environment, not from the run's files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from tests.helpers.tiny import REPO, TINY_TOML, tiny_microdata

BAD_ROW, BAD_VALUE = 1234, "purplezqx"


def scan(paths: list[Path], markers: list[str]) -> int:
    """Every file under ``paths`` (databases included) is free of every marker; returns how many were read."""
    scanned = 0
    for root in paths:
        for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
            if path.is_file():
                data = path.read_bytes()
                scanned += 1
                for marker in markers:
                    assert marker.encode() not in data, f"{marker!r} found in {path}"
    return scanned


@pytest.mark.slow
def test_prefect_sees_no_row_value_or_password(tmp_path: Path, postgres_url: str) -> None:
    password = urlsplit(postgres_url).password
    assert password and len(password) >= 16
    micro, geo = tiny_microdata()
    colours = micro["COLOUR"].to_list()
    colours[BAD_ROW - 1] = BAD_VALUE
    micro.with_columns(pl.Series("COLOUR", colours)).write_parquet(tmp_path / "bad.parquet")
    micro.write_parquet(tmp_path / "microdata.parquet")
    geo.write_parquet(tmp_path / "geography.parquet")
    config = tmp_path / "config.toml"
    ledger_table = f'cap_rho = "1000"\npath = "{postgres_url}"'
    config.write_text(TINY_TOML.format(rho="4").replace('cap_rho = "1000"', ledger_table))
    home = tmp_path / "prefect-home"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
           "PREFECT_API_URL": "", "PYTHONPATH": str(REPO)}
    env.pop("CENSUSDP_LEDGER", None)

    def censusdp(*argv: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "censusdp.pipeline.cli", *argv], env={**env, **(extra_env or {})},
                              capture_output=True, text=True, timeout=600, cwd=tmp_path)

    rejected = censusdp("release", str(config), "--microdata", str(tmp_path / "bad.parquet"))
    assert rejected.returncode != 0 and "after the budget was charged" in rejected.stderr, rejected.stderr[-2000:]
    published = censusdp("release", str(config))
    assert published.returncode == 0, published.stderr[-3000:]
    run_dir = Path(published.stdout.strip().splitlines()[-1])
    again = censusdp("postprocess", str(run_dir), extra_env={"CENSUSDP_LEDGER": postgres_url})
    assert again.returncode == 0, again.stderr[-2000:]
    post_dir = Path(again.stdout.strip().splitlines()[-1])

    ledger = PrivacyLedger(postgres_url)
    assert [(c.status, c.reason) for c in ledger.charges("tiny")] == [
        ("failed", "input-validation:domain"), ("published", None), ("postprocess", None)]
    assert json.loads((run_dir / "manifest.json").read_text())["ledger"]["location"] == urlsplit(
        postgres_url)._replace(netloc=f"censusdp@{urlsplit(postgres_url).hostname or ''}", query="").geturl()
    database = next(home.rglob("*.db"))
    with sqlite3.connect(database) as connection:
        states = connection.execute("SELECT state_type, state_name FROM flow_run ORDER BY created").fetchall()
        messages = [m for (m,) in connection.execute("SELECT message FROM flow_run_state WHERE type = 'FAILED'")]
    assert [s[0] for s in states] == ["FAILED", "COMPLETED"]
    assert any("after the budget was charged" in (m or "") for m in messages), messages
    for output in (rejected, published, again):
        for marker in (password, BAD_VALUE, f"row {BAD_ROW}", "column COLOUR"):
            assert marker not in output.stdout + output.stderr
    assert scan([home, run_dir, post_dir], [password, BAD_VALUE, f"row {BAD_ROW}", "column COLOUR"]) > 10
