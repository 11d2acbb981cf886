"""A test seed never reveals the noise: the seeded stream is bound to the ledger key, the data and the layout of
the release (hostile reviews)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.helpers.releases import release
from tests.helpers.tiny import TINY_TOML, tiny_microdata


def unit_noise(run_dir: Path, micro: pl.DataFrame) -> np.ndarray:
    """noisy - true of the unit level's detailed query, in (geoid, cell) order (colour major, adult minor)."""
    colour = pl.col("COLOUR").replace_strict({"r": 0, "g": 1, "b": 2}, return_dtype=pl.Int64)
    cells = micro.select(pl.col("geocode").alias("geoid"), (colour * 2 + pl.col("ADULT").cast(pl.Int64))
                         .alias("cell")).group_by(["geoid", "cell"]).len()
    noisy = pl.read_parquet(run_dir / "measurements" / "unit.parquet").filter(pl.col("query") == "detailed") \
        .with_columns(pl.col("geoid").cast(pl.Utf8))
    joined = noisy.join(cells.with_columns(pl.col("cell").cast(noisy.schema["cell"])), on=["geoid", "cell"],
                        how="left").with_columns(pl.col("len").fill_null(0))
    return joined.sort(["geoid", "cell"]).select(pl.col("noisy_value") - pl.col("len")).to_series().to_numpy()


def test_a_test_seed_does_not_reveal_the_noise(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The attack of the hostile review: the same --insecure-seed on data of one's own gives the noise, to be
    subtracted from the real release.  Bound to the ledger's key and the data's fingerprint, it does not."""
    real = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    mine = tiny_microdata(seed=9)[0]
    mine.write_parquet(tiny_release.parent / "mine.parquet")
    first = release(capsys, tiny_release)
    again = release(capsys, tiny_release)
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('dataset = "tiny"', 'dataset = "mine"'))
    own = release(capsys, tiny_release, "--microdata", str(tiny_release.parent / "mine.parquet"))
    assert first[0] == again[0] == own[0] == 0
    real_noise, own_noise = unit_noise(Path(first[1]), real), unit_noise(Path(own[1]), mine)
    assert np.array_equal(real_noise, unit_noise(Path(again[1]), real))  # still reproducible for tests
    assert real_noise.size == 432 and np.var(real_noise) > 0.5
    # unbound, the two would agree in all 432 cells; independent draws (sigma² = 1) agree in about 28%
    assert np.mean(real_noise == own_noise) < 0.5


def test_the_same_seed_never_puts_the_same_noise_on_another_layout(
        tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two seeded releases of one file whose layouts differ (here: the geography file) must not share noise,
    or subtracting them would cancel it (the second hostile review)."""
    real = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    first = release(capsys, tiny_release)
    geo = pl.read_parquet(tiny_release.parent / "geography.parquet")
    pl.concat([geo, pl.DataFrame({"geocode": ["2399"]})]).write_parquet(tiny_release.parent / "geo2.parquet")
    second = release(capsys, tiny_release, "--geography", str(tiny_release.parent / "geo2.parquet"))
    assert first[0] == second[0] == 0
    a, b = unit_noise(Path(first[1]), real), unit_noise(Path(second[1]), real)
    assert a.size == 432 and b.size == 438
    assert np.mean(a == b[:432]) < 0.5  # the first 432 cells hold the same counts in both layouts
