"""A release that measures a recode is evaluated without the GLS column (the exact GLS does not cover recodes yet)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline.evaluate.compare import evaluate
from tests.helpers.releases import release_dir

RECODE = '\n[[recodes]]\nname = "tone"\nof = "colour"\n[recodes.groups]\nwarm = ["red"]\ncool = ["green", "blue"]\n'


def test_a_recode_run_is_evaluated_without_gls(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    text = tiny_release.read_text().replace('[strategy.region]\ntotal = "1/3"', '[strategy.region]\ntone = "1/3"')
    assert 'tone = "1/3"' in text
    tiny_release.write_text(text + RECODE)
    run_dir = release_dir(capsys, tiny_release)
    metrics = evaluate(tiny_release.parent / "microdata.parquet", run_dir)
    assert set(metrics["method"]) == {"noisy", "reconciled", "bottom_up"}
    tone = metrics.filter((pl.col("level") == "region") & (pl.col("query") == "tone") & (pl.col("metric") == "mae")
                          & (pl.col("group") == "all"))
    assert set(tone["method"]) == {"noisy", "reconciled", "bottom_up"}  # the recode is evaluated like any query
    assert "no GLS estimates for this run (it measures a recode)" in caplog.text
