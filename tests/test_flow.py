"""The Prefect flow end to end, in a subprocess with its own PREFECT_HOME (embedded server on SQLite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO

MARKER = "ZQXLEAKMARKERQZX"


@pytest.mark.slow
def test_release_through_prefect_publishes_and_leaks_no_marker(tiny_release: Path) -> None:
    folder = tiny_release.parent
    micro = pl.read_parquet(folder / "microdata.parquet")
    # a column the schema does not use, full of a marker that must never reach Prefect or the outputs
    micro.with_columns(pl.lit(MARKER).alias("NAME")).write_parquet(folder / "microdata.parquet")
    home = folder / "prefect-home"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
           "PREFECT_API_URL": "", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "release", str(tiny_release), "--insecure-seed", "3"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [lv["name"] for lv in manifest["levels"]] == ["root", "region", "district", "unit"]
    assert (run_dir / "tables" / "unit.parquet").exists()
    assert home.exists() and any(home.rglob("*.db")), "Prefect did not use the embedded SQLite store"
    for text in (done.stdout, done.stderr):
        assert MARKER not in text
    for path in [*home.rglob("*"), *run_dir.rglob("*")]:
        if path.is_file():
            assert MARKER.encode() not in path.read_bytes(), f"marker found in {path}"
