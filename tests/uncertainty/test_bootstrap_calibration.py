"""The parametric bootstrap's intervals are as wide as the noise and cover the truth (issue 10, item 2).

A two-level release (root and unit, the detailed query at each, no invariants, each level fitted to its own
measurements: ``level_by_level``) is repeated with fresh seeds. At the root every cell's published count is its
noisy measurement (the least-squares projection is the identity for counts far from zero), so its standard error is
exactly the root query's sigma. Checked, over the root cells whose truth is at least 10 sigma from zero: the
bootstrap sd matches sigma within 10% (its relative sampling error with 100 replicates x 5 cells x 24 releases is
about 1%), and the 95% intervals cover the truth in 87-99.5% of cases (about 94% expected from 100 replicates; 120
intervals give a standard deviation of 2.2 points, so the lower bound is 3.2 standard deviations away; intervals
too wide fail the sd check first). With the bootstrap's noise switched off (the audit's mutant) the sd is 0 and the
coverage collapses.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.cli import main
from pipeline.uncertainty.bootstrap import bootstrap_intervals
from tests.helpers.tiny import TINY_TOML, tiny_microdata

RELEASES, REPLICATES = 24, 100
TWO_LEVELS = ("""
[input]
path = "microdata.parquet"
geography = "geography.parquet"

[output]
dir = "runs"

[ledger]
dataset = "two-levels"
cap_rho = "100000"

[budget]
rho = "1"
neighbouring = "replace-one"

[postprocess]
reconciliation = "level_by_level"

[budget.level_shares]
root = "1/4"
unit = "3/4"

[[levels]]
name = "root"
width = 0

[[levels]]
name = "unit"
width = 4

"""  # the attributes of the tiny fixture, as tests/helpers/tiny.py declares them
              + TINY_TOML[TINY_TOML.index("[[attributes]]"): TINY_TOML.index("[strategy.root]")].format()
              + """[strategy.root]
detailed = "1"

[strategy.unit]
detailed = "1"
""")


@pytest.mark.slow
def test_bootstrap_intervals_are_as_wide_as_the_noise_and_cover_the_truth(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    micro, geo = tiny_microdata()
    micro.write_parquet(tmp_path / "microdata.parquet")
    geo.write_parquet(tmp_path / "geography.parquet")
    (tmp_path / "config.toml").write_text(TWO_LEVELS)
    sigma = math.sqrt(2 / (2 * Fraction(1, 4)))  # replace-one: sigma² = Δ₂²/(2 rho_root) = 4
    truth = (micro.with_columns(pl.col("COLOUR").replace_strict({"r": "red", "g": "green", "b": "blue"}))
             .group_by(["COLOUR", "ADULT"]).len().rename({"COLOUR": "colour", "ADULT": "adult", "len": "true"}))
    ratios, covered = [], []
    for seed in range(RELEASES):
        assert main(["-q", "release", str(tmp_path / "config.toml"), "--no-prefect", "--insecure-seed",
                     str(seed)]) == 0
        run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
        bootstrap_intervals(run_dir, replicates=REPLICATES, seed=1000 + seed)
        root = pl.read_parquet(run_dir / "bootstrap" / "root.parquet").with_columns(
            pl.col("colour").cast(pl.Utf8), pl.col("adult").cast(pl.Utf8))
        cells = root.join(truth, on=["colour", "adult"]).filter(pl.col("true") >= 10 * sigma)
        assert cells.height == 5  # every root cell but the empty (blue, child) one
        ratios += (cells["boot_sd"] / sigma).to_list()
        covered += ((cells["ci_low"] <= cells["true"]) & (cells["true"] <= cells["ci_high"])).to_list()
    width, coverage = float(np.mean(ratios)), float(np.mean(covered))
    assert 0.9 <= width <= 1.1, f"bootstrap sd is {width:.3f} x the root query's sigma"
    assert 0.87 <= coverage <= 0.995, f"95% bootstrap intervals covered {coverage:.1%}"
