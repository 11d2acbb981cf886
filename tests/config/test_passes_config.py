"""The reconciliation method and the multi-pass order as configuration data (``pipeline.config.reconciliation``)."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.reconciliation import ReconciliationMethod
from censusdp.pipeline.errors import ConfigError

PRODUCTION_PASS_1 = ("cenrace", "hispanic", "votingage", "hhinstlevels", "hhgq", "votingage * hispanic",
                     "hispanic * cenrace", "votingage * cenrace", "votingage * hispanic * cenrace", "detailed")


def with_postprocess(tiny_release: Path, text: str) -> Path:
    tiny_release.write_text(tiny_release.read_text() + "\n[postprocess]\n" + text)
    return tiny_release


def test_the_default_is_full_information_with_the_total_rounded_first(tiny_release: Path) -> None:
    config = load_config(tiny_release)
    assert config.reconciliation_method is ReconciliationMethod.FULL_INFORMATION
    for level in config.levels:
        passes = config.level_passes(level.name)
        assert passes.l2 == () and [q.name for q in passes.rounding] == ["total"]
        assert passes.tolerance == Fraction(1, 10)


def test_the_pl94_2020_preset_carries_productions_ordering(tmp_path: Path) -> None:
    config_path = tmp_path / "pl94-2020.toml"
    config_path.write_text(preset_text("pl94-2020"))
    config = load_config(config_path)
    assert config.reconciliation_method is ReconciliationMethod.FULL_INFORMATION
    for level in ("state", "county", "tract", "block_group"):  # Strategy1b_ST_CTY_TR_BG_isoTot_Ordering_dsepJune3
        passes = config.level_passes(level)
        assert passes.l2 == (("total",), PRODUCTION_PASS_1)
        assert [q.name for q in passes.rounding] == ["total"] and passes.tolerance == Fraction(1, 10)
    for level in ("us", "block"):  # one pass, cells rounded at once
        passes = config.level_passes(level)
        assert passes.l2 == () and passes.rounding == ()


def test_passes_apply_to_the_levels_named(tiny_release: Path) -> None:
    config = load_config(with_postprocess(tiny_release, 'reconciliation = "level_by_level"\nrounding = []\n'
                                          '[[postprocess.passes]]\nlevels = ["district"]\n'
                                          'l2 = [["adult*colour"], ["detailed"]]\nrounding = ["total"]\n'
                                          'tolerance = "0"\n'))
    assert config.reconciliation_method is ReconciliationMethod.LEVEL_BY_LEVEL
    district = config.level_passes("district")
    assert district.l2 == (("adult * colour",), ("detailed",)) and district.tolerance == 0
    assert [q.name for q in district.rounding] == ["total"]
    assert config.level_passes("unit").l2 == () and config.level_passes("unit").rounding == ()


@pytest.mark.parametrize(("text", "key", "problem"), [
    ('reconciliation = "gls"\n', "postprocess.reconciliation", "expected one of full_information, level_by_level"),
    ('rounding = "total"\n', "postprocess.rounding", "expected a list of query names"),
    ('rounding = ["detailed"]\n', "postprocess.rounding", "the detailed cells are always rounded last"),
    ('rounding = ["total", "total"]\n', "postprocess.rounding", "a query is listed twice"),
    ('rounding = ["shape"]\n', "postprocess.rounding", "unknown query 'shape'"),
    ('[[postprocess.passes]]\nlevels = ["nowhere"]\n', "postprocess.passes[0].levels", "unknown level 'nowhere'"),
    ('[[postprocess.passes]]\nlevels = ["unit"]\n[[postprocess.passes]]\nlevels = ["unit"]\n',
     "postprocess.passes[1].levels", "level 'unit' is given passes twice"),
    ('[[postprocess.passes]]\nl2 = [[]]\n', "postprocess.passes[0].l2", "non-empty lists"),
    ('[[postprocess.passes]]\ntolerance = "-1"\n', "postprocess.passes[0].tolerance", "must be >= 0"),
    ('[[postprocess.passes]]\nspeed = 1\n', "postprocess.passes[0].speed", "unknown key"),
    ('reconciliation = "level_by_level"\n[[postprocess.passes]]\nlevels = ["unit"]\nl2 = [["detailed"], ["colour"]]\n',
     "postprocess.passes[0].l2", "'colour' is not measured at level 'unit'"),
])
def test_a_bad_order_is_refused_by_key(tiny_release: Path, text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{key}: ") + ".*" + re.escape(problem)):
        load_config(with_postprocess(tiny_release, text))


def test_full_information_may_fit_a_query_no_level_measures(tiny_release: Path) -> None:
    """Its targets are GLS estimates, which exist for every marginal: a pass may name an unmeasured one."""
    config = load_config(with_postprocess(tiny_release, '[[postprocess.passes]]\nlevels = ["unit"]\n'
                                          'l2 = [["total"], ["colour"]]\n'))
    assert config.level_passes("unit").l2 == (("total",), ("colour",))
