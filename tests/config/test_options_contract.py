"""Command-line options as config overrides, and the random source they select (``pipeline.config.options``).

The overrides are a contract between the CLI, the flows and ``load_config``: every dotted key must be exactly the
configuration key it replaces (a misspelt key would be refused as unknown, or worse silently ignored), paths given
on the command line are made absolute against the working directory, and ``--rho`` replaces a configured
(epsilon, delta) target (removing it, not blanking it).  The random source is the OS CSPRNG unless a seed is
given, and a seeded source is never publishable.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from censusdp.pipeline.config.options import (
    insecure_seed_allowed,
    insecure_seed_is_allowed,
    load_release_config,
    random_source,
    release_overrides,
)
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers.tiny import TINY_TOML, TINY_UNITS_TOML


def test_no_option_no_override() -> None:
    assert release_overrides() == {}
    assert release_overrides(None, None, None, None, None) == {}


def test_every_option_maps_to_its_config_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    overrides = release_overrides(microdata="in/micro.csv", geography="geo.parquet", fmt="csv", rho="3/7",
                                  runner="dask-local:2")
    assert overrides == {
        "input.path": str(tmp_path.resolve() / "in" / "micro.csv"),
        "input.geography": str(tmp_path.resolve() / "geo.parquet"),
        "input.format": "csv",
        "postprocess.runner": "dask-local:2",
        "budget.rho": "3/7",
        "budget.epsilon": None,  # removed, so that the rho given is the only budget target
    }


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("microdata", "m.parquet", {"input.path": "{cwd}/m.parquet"}),
    ("geography", "g.parquet", {"input.geography": "{cwd}/g.parquet"}),
    ("fmt", "parquet", {"input.format": "parquet"}),
    ("runner", "local", {"postprocess.runner": "local"}),
    ("rho", 2, {"budget.rho": 2, "budget.epsilon": None}),
])
def test_each_option_alone(option: str, value: str | int, expected: dict[str, object], tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cwd = str(tmp_path.resolve())
    want = {k: v.replace("{cwd}", cwd) if isinstance(v, str) else v for k, v in expected.items()}
    assert release_overrides(**{option: value}) == want


def test_load_release_config_applies_every_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each option lands in its own field (none shifted to another), and --rho replaces a configured epsilon."""
    config = tmp_path / "config.toml"
    config.write_text(TINY_TOML.format(rho="4").replace('rho = "4"', 'epsilon = "1"'))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    base = load_release_config(str(config))
    assert base.budget.target_epsilon == 1.0 and base.input.format == "parquet" and base.runner == "auto"
    assert base.input.path == tmp_path / "microdata.parquet"
    loaded = load_release_config(str(config), "people.csv", "places.csv", "csv", "5/2", "dask-local:3")
    assert loaded.input.path == elsewhere.resolve() / "people.csv"
    assert loaded.input.geography == elsewhere.resolve() / "places.csv"
    assert loaded.input.format == "csv" and loaded.runner == "dask-local:3"
    assert loaded.budget.rho == Fraction(5, 2) and loaded.budget.target_epsilon is None
    assert loaded.source == str(config)


def test_load_release_config_units_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--units replaces the units universe's file (made absolute), --no-units drops the universe (nothing of it is
    read or charged), and neither is the default: a configured [units] table is kept when no option is given."""
    config = tmp_path / "config.toml"
    config.write_text(TINY_TOML.format(rho="4") + TINY_UNITS_TOML)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    configured = load_release_config(str(config))
    assert configured.units is not None and configured.units.input.path == tmp_path / "units.csv"
    moved = load_release_config(str(config), units="other/units.csv")
    assert moved.units is not None and moved.units.input.path == elsewhere.resolve() / "other" / "units.csv"
    assert load_release_config(str(config), no_units=True).units is None
    assert load_release_config(str(config), units="other/units.csv", no_units=True).units is None
    assert release_overrides(units="u.csv") == {"units.path": str(elsewhere.resolve() / "u.csv")}
    assert release_overrides(no_units=True) == {"units": None}


def test_random_source_is_the_os_csprng_unless_seeded() -> None:
    system = random_source(None)
    assert system.publishable is True and "os.urandom" in system.name
    seeded = random_source(12345)
    assert seeded.publishable is False and "seed=12345" in seeded.name
    np.testing.assert_array_equal(seeded.uniform_uint64(8), seeded_random_source(12345).uniform_uint64(8))
    assert random_source(0).publishable is False  # seed 0 is a seed, not "no seed"


def test_insecure_seed_allowed_only_inside_the_block() -> None:
    assert insecure_seed_is_allowed() is False
    with insecure_seed_allowed():
        assert insecure_seed_is_allowed() is True
        with insecure_seed_allowed():
            assert insecure_seed_is_allowed() is True
        assert insecure_seed_is_allowed() is True  # the inner block restores the outer state
    assert insecure_seed_is_allowed() is False
    with pytest.raises(RuntimeError), insecure_seed_allowed():
        raise RuntimeError("boom")
    assert insecure_seed_is_allowed() is False
