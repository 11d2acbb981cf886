"""The README's walk-through, run verbatim: its command blocks, in order, in an empty folder, against a ledger of
the test's own (``$CENSUSDP_LEDGER``, as the README says)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tests.helpers.doc_blocks import run_blocks, section_blocks


def test_the_walk_through_runs_verbatim(tmp_path: Path) -> None:
    blocks = section_blocks("README.md", "## Walk-through")
    assert len(blocks) == 5  # the README promises five steps
    outputs = run_blocks(blocks, tmp_path)
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "manifest.json").is_file() and "0 with violations" in outputs[3]
    assert "published" in outputs[3] and "pl94-state" in outputs[3]  # the ledger shows the charge
    districts = pl.read_parquet(tmp_path / "districts.parquet")
    plan = pl.read_csv(tmp_path / "plan.csv", schema_overrides={"GEOID": pl.Utf8, "DISTRICT": pl.Utf8})
    assert districts["area"].n_unique() == plan["DISTRICT"].n_unique() > 1
