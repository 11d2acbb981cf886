"""A release that measures a recode gets GLS estimates with per-cell standard errors and a GLS column in
``censusdp evaluate`` (the exact GLS covers recodes: ``postprocess.gls_algebra``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.cli import main
from censusdp.pipeline.evaluate.compare import evaluate, write_evaluation
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.uncertainty.estimates import gls_estimates
from tests.helpers.configs import preset_config
from tests.helpers.releases import release_dir
from tests.helpers.tiny import require_shared_data

RECODE = '\n[[recodes]]\nname = "tone"\nof = "colour"\n[recodes.groups]\nwarm = ["red"]\ncool = ["green", "blue"]\n'


def test_a_recode_run_has_gls_estimates_and_is_evaluated_with_gls(tiny_release: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = tiny_release.read_text().replace('[strategy.region]\ntotal = "1/3"', '[strategy.region]\ntone = "1/3"')
    assert 'tone = "1/3"' in text
    tiny_release.write_text(text.replace('dir = "runs"', 'dir = "runs"\nestimates = true') + RECODE)
    run_dir = release_dir(capsys, tiny_release)
    region = pl.read_parquet(run_dir / "estimates" / "region.parquet").with_columns(pl.col("colour", "adult").cast(
        pl.String))
    sd = {c: region.filter((pl.col("colour") == c) & (pl.col("adult") == "1"))["std_error"].to_numpy()
          for c in ("red", "green", "blue")}
    np.testing.assert_allclose(sd["green"], sd["blue"], rtol=1e-12)  # one group of the recode: the same
    assert (np.abs(sd["red"] - sd["green"]) > 1e-6).all()  # groups of different sizes: per-cell errors differ
    queries = pl.read_parquet(run_dir / "estimates" / "queries" / "region.parquet")
    tone = queries.filter(pl.col("query") == "tone").sort(["geoid", "cell"])
    assert tone.height == 2 * 2 and (tone["std_error"] > 0).all()
    cool = (region.filter(pl.col("colour") != "red").group_by("geoid").agg(pl.col("estimate").sum()).sort("geoid"))
    np.testing.assert_allclose(tone.filter(pl.col("cell") == 1)["estimate"].to_numpy(), cool["estimate"].to_numpy())
    metrics = evaluate(tiny_release.parent / "microdata.parquet", run_dir)
    assert set(metrics["method"]) == {"noisy", "reconciled", "gls", "bottom_up"}
    tone_mae = metrics.filter((pl.col("level") == "region") & (pl.col("query") == "tone")
                              & (pl.col("metric") == "mae") & (pl.col("group") == "all"))
    assert set(tone_mae["method"]) == {"noisy", "reconciled", "gls", "bottom_up"}


@pytest.mark.slow
def test_perry_county_pl94_2020_release_has_gls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pl94-2020 preset (the hhinstlevels recode, the total invariant at us and state) on the real PPMF
    sample: GLS estimates in the release, ``censusdp uncertainty`` and ``censusdp evaluate`` with the GLS column."""
    shared_data = require_shared_data()
    config = tmp_path / "pl94.toml"
    preset_config(config, "pl94-2020", {"input.geography": None, "output.estimates": True,
                                        "output.protected_microdata": False,
                                        "ledger.path": str(tmp_path / "ledger.sqlite")})
    run_dir = release_dir(capsys, config, "--microdata", str(shared_data), "--format", "mdf-pl94", "--no-units",
                          seed=11)
    us = pl.read_parquet(run_dir / "estimates" / "queries" / "us.parquet")
    total = us.filter(pl.col("query") == "total")
    assert total["estimate"].to_list() == pytest.approx([10588]) and total["std_error"].to_list() == pytest.approx(
        [0], abs=1e-6)  # the invariant
    inst = pl.read_parquet(run_dir / "estimates" / "queries" / "county.parquet").filter(
        pl.col("query") == "hhinstlevels")
    assert inst.height == 3 and (inst["std_error"] > 0).all()
    result = gls_estimates(load_run(run_dir))
    block = result.variance(result_levels := len(result.estimates) - 1)
    assert block.shape == (result.estimates[result_levels].shape[0], 2016)
    hhgq = block.reshape(-1, 8, 252)
    np.testing.assert_allclose(hhgq[:, 1], hhgq[:, 4], rtol=1e-9)  # institutional values: one group
    assert not np.allclose(hhgq[:, 0], hhgq[:, 1])  # households and institutions differ
    assert main(["-q", "uncertainty", str(run_dir)]) == 0
    metrics = evaluate(shared_data, run_dir, fmt="mdf-pl94")
    gls = metrics.filter((pl.col("method") == "gls") & (pl.col("query") == "hhinstlevels"))
    assert set(gls["level"]) == {"us", "state", "county", "tract", "block_group", "block"}
    tables = metrics.filter(pl.col("query").is_in(["P1", "P2", "P3", "P4", "P5"]) & (pl.col("metric") == "mae")
                            & (pl.col("group") == "all"))
    assert set(zip(tables["level"], tables["query"], tables["method"], strict=True)) == {
        (lv, t, m) for lv in ("us", "state", "county", "tract", "block_group", "block")
        for t in ("P1", "P2", "P3", "P4", "P5") for m in ("reconciled", "gls", "bottom_up")}
    # P5 at the nation, recomputed from the raw file and the published wide table
    people = pl.read_csv(shared_data, infer_schema=False)
    by_type = dict(people.group_by("GQTYPE_PL").len().iter_rows())
    true = [sum(by_type.get(str(t), 0) for t in types)
            for types in ((1, 2, 3, 4, 5, 6, 7), (1, 2, 3, 4), (1,), (2,), (3,), (4,), (5, 6, 7), (5,), (6,), (7,))]
    published = pl.read_parquet(run_dir / "tables" / "pl94" / "us.parquet").select(
        [f"P5_{i:03d}N" for i in range(1, 11)]).row(0)
    expected = float(np.mean(np.abs(np.array(published) - np.array(true))))
    found = tables.filter((pl.col("level") == "us") & (pl.col("query") == "P5") & (pl.col("method") == "reconciled"))
    assert found["value"].to_list() == pytest.approx([expected])
    assert "## Summary table P1: mean absolute error" in (write_evaluation(metrics, {"run_id": "x", "levels": [
        {"name": lv} for lv in ("us", "block")]}, tmp_path / "eval")[1]).read_text()
