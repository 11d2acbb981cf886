"""The tiny release every layer's tests share (a configuration and microdata made in the test) and the real PPMF
sample's location.  Test modules import these from here, never from another test module or conftest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/tiny.py -> the repository
# the repository is cloned next to shared/; a copy inside it (mutmut's mutants/) finds it a level further up
SHARED = next((p / "shared" for p in REPO.parents if (p / "shared" / "data").is_dir()), REPO.parent / "shared")
SHARED_DATA = SHARED / "data" / "ppmf_pl94_perry_al.csv"


def require_shared_data() -> Path:
    """The real PPMF sample.  The repository is always cloned next to ``shared/`` (here and in CI), so a missing
    sample is a broken checkout to report, not a reason to skip."""
    assert SHARED_DATA.is_file(), (f"shared PPMF sample not found at {SHARED_DATA}: clone the repository next to "
                                   "shared/ (its data/ folder holds ppmf_pl94_perry_al.csv)")
    return SHARED_DATA


TINY_TOML = """
[input]
path = "microdata.parquet"
format = "parquet"
geography = "geography.parquet"

[output]
dir = "runs"

[ledger]
dataset = "tiny"
cap_rho = "1000"

[budget]
rho = "{rho}"
delta = "1e-10"
neighbouring = "replace-one"

[budget.level_shares]
root = "1/4"
region = "1/4"
district = "1/4"
unit = "1/4"

[[levels]]
name = "root"
width = 0

[[levels]]
name = "region"
width = 1

[[levels]]
name = "district"
width = 2

[[levels]]
name = "unit"
width = 4

[[attributes]]
name = "colour"
column = "COLOUR"
values = ["red", "green", "blue"]
mapping = {{ r = "red", g = "green", b = "blue" }}

[[attributes]]
name = "adult"
column = "ADULT"
values = ["0", "1"]

[strategy.root]
total = "1/2"
detailed = "1/2"

[strategy.region]
total = "1/3"
colour = "1/3"
detailed = "1/3"

[strategy.district]
"adult * colour" = "1/2"
detailed = "1/2"

[strategy.unit]
detailed = "1"

[[invariants]]
query = "total"
levels = ["root", "region"]

[[structural_zeros]]
colour = ["blue"]
adult = ["0"]
"""


# A housing-unit universe for the tiny release (docs/units.md), appended to TINY_TOML once formatted: kind 0 is a
# housing unit and 1 a facility (exact at every level, the lowest included), never vacant (a structural zero).
TINY_UNITS_TOML = """
[units]
path = "units.csv"
format = "csv"
rho = "1/2"

[[units.attributes]]
name = "kind"
column = "KIND"
values = ["0", "1"]

[[units.attributes]]
name = "occupancy"
column = "OCC"
values = ["1", "2"]
mapping = { o = "1", v = "2" }

[units.strategy.root]
detailed = "1"

[units.strategy.region]
detailed = "1/2"
occupancy = "1/2"

[units.strategy.district]
detailed = "1"

[units.strategy.unit]
detailed = "1/4"
occupancy = "3/4"

[[units.invariants]]
query = "kind"
levels = ["root", "region", "district", "unit"]

[[units.structural_zeros]]
kind = ["1"]
occupancy = ["2"]
"""


def tiny_microdata(seed: int = 1, persons: int = 3000) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)  # test-only
    units = [f"{r}{d}{u:02d}" for r in "12" for d in "123" for u in range(12)]
    weights = rng.pareto(1.5, len(units)) + 0.1
    weights[rng.choice(len(units), 10, replace=False)] = 0  # empty units, present only in the geography file
    chosen = rng.choice(len(units), persons, p=weights / weights.sum())
    colour = rng.choice(["r", "g", "b"], persons, p=[0.5, 0.3, 0.2])
    adult = np.where(colour == "b", "1", rng.choice(["0", "1"], persons, p=[0.3, 0.7]))
    micro = pl.DataFrame({"geocode": np.asarray(units)[chosen], "COLOUR": colour, "ADULT": adult})
    return micro, pl.DataFrame({"geocode": units})


def single_region_release(tmp_path: Path, reconciliation: str = "level_by_level") -> Path:
    """The tiny configuration on data whose units all lie in region 1: the region is the root's only child.
    ``reconciliation``: the ``postprocess.reconciliation`` method (the only-child chain is level_by_level's)."""
    micro, geo = tiny_microdata()
    micro.filter(pl.col("geocode").str.starts_with("1")).write_parquet(tmp_path / "microdata.parquet")
    geo.filter(pl.col("geocode").str.starts_with("1")).write_parquet(tmp_path / "geography.parquet")
    config = tmp_path / "config.toml"
    config.write_text(TINY_TOML.format(rho="4") + f'\n[postprocess]\nreconciliation = "{reconciliation}"\n')
    return config
