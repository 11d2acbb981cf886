"""docs/configuration.md's worked example of a census of one's own, run verbatim: its command blocks, in order, in
an empty folder, against a ledger of the test's own."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tests.helpers.doc_blocks import run_blocks, section_blocks


def test_the_worked_example_runs_verbatim(tmp_path: Path) -> None:
    blocks = section_blocks("docs/configuration.md", "## A census of your own")
    assert len(blocks) == 3
    outputs = run_blocks(blocks, tmp_path)
    assert "0 with violations" in outputs[2]
    (run,) = (tmp_path / "runs").iterdir()
    wards = pl.read_parquet(run / "tables" / "ward.parquet")
    assert wards["geoid"].n_unique() == 120 and wards["count"].sum() == 60_000  # the country's total is exact
    assert sorted(wards["age"].cast(pl.Utf8).unique()) == sorted(
        [f"{a}-{a + 4}" for a in range(0, 85, 5)] + ["85+"])
    assert set(wards["sex"].cast(pl.Utf8).unique()) == {"female", "male"}
