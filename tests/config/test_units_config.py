"""The housing-unit universe's configuration (``[units]``, pipeline.config.units): what it shares with the persons,
what is its own, and every refusal naming the user's key."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.config.load import load_config, parse_recorded_config
from censusdp.pipeline.config.model import Format, Universe
from censusdp.pipeline.config.units import translate_key
from censusdp.pipeline.dp.accounting import UNITS_LOSS_FACTOR, per_person_rho
from censusdp.pipeline.errors import ConfigError
from tests.helpers.tiny import TINY_TOML, TINY_UNITS_TOML

F = Fraction
BASE = TINY_TOML.format(rho="4") + TINY_UNITS_TOML


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_a_release_without_units_has_none(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TINY_TOML.format(rho="4")))
    assert config.units is None and config.universe is Universe.PERSONS


def test_the_units_universe_is_a_whole_configuration_of_its_own(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE))
    units = config.units
    assert units is not None and units.universe is Universe.UNITS and units.units is None
    assert units.input.path == tmp_path / "units.csv" and units.input.format is Format.CSV
    assert units.schema.names == ("kind", "occupancy") and units.schema.shape == (2, 2)
    assert units.schema.attribute("occupancy").source_to_index() == {"o": 0, "v": 1}
    assert units.budget.rho == F(1, 2) and config.budget.rho == 4
    assert {lv: [(e.query.name, e.share) for e in es] for lv, es in units.strategy.items()} == {
        "root": [("detailed", 1)], "region": [("detailed", F(1, 2)), ("occupancy", F(1, 2))],
        "district": [("detailed", 1)], "unit": [("detailed", F(1, 4)), ("occupancy", F(3, 4))]}
    # the lowest level may be invariant, and a structural zero may lie inside an invariant's cells
    assert [(i.query.name, i.levels) for i in units.invariants] == [("kind", ("root", "region", "district", "unit"))]
    assert units.structural_zeros == ({"kind": ("1",), "occupancy": ("2",)},)
    # what belongs to the release: shared, equal to the persons'
    assert units.levels == config.levels and units.ledger == config.ledger and units.source == config.source
    assert units.budget.level_shares == config.budget.level_shares  # the default: the persons' shares
    assert (units.budget.delta, units.budget.neighbouring) == (config.budget.delta, config.budget.neighbouring)
    assert units.input.geography == config.input.geography == tmp_path / "geography.parquet"
    assert units.output.dir == config.output.dir and units.output.tables == ()
    assert (units.solver, units.runner) == (config.solver, config.runner)
    # measured and reconciled in the persons' chunks: as many nodes per chunk
    assert units.chunk_cells // units.schema.n_cells == config.chunk_cells // config.schema.n_cells


def test_own_level_shares_and_postprocess(tmp_path: Path) -> None:
    text = BASE.replace('rho = "1/2"\n', 'rho = "1/2"\nlevel_shares = { root = "1/10", region = "1/10", district = '
                        '"3/10", unit = "1/2" }\n') + '\n[units.postprocess]\nrounding = []\nreconciliation = ' \
                                                      '"level_by_level"\n[postprocess]\nrunner = "dask-local:2"\n'
    config = load_config(write(tmp_path, text))
    units = config.units
    assert units is not None and units.budget.level_shares["unit"] == F(1, 2)
    assert config.budget.level_shares["unit"] == F(1, 4)
    assert units.level_passes("unit").rounding == () and config.level_passes("unit").rounding != ()
    assert units.reconciliation_method == "level_by_level" and config.reconciliation_method == "full_information"
    assert units.runner == config.runner == "dask-local:2"  # the machine's settings are the release's


def test_recorded_configuration_keeps_the_universe(tmp_path: Path) -> None:
    """A run records its configuration's raw table (manifest): re-parsed, it has the same units universe."""
    config = load_config(write(tmp_path, BASE))
    again = parse_recorded_config(config.raw, config.source, tmp_path)
    assert again.units == config.units


@pytest.mark.parametrize(("old", "new", "key", "problem"), [
    ('rho = "1/2"', 'rho = "1/2"\nepsilon = "1"', "units.epsilon", "unknown key"),
    ('rho = "1/2"\n', "", "units.rho", "missing"),
    ('rho = "1/2"', 'rho = "-1/2"', "units.rho", "must be > 0"),
    ('rho = "1/2"', 'rho = "half"', "units.rho", "not an exact number"),
    ('rho = "1/2"', 'rho = "997"', "units.rho", "lifetime cap"),  # 4 + 997 > cap_rho 1000
    ('format = "csv"', 'format = "mdf-pl94"', "units.format", "not a layout of unit records"),
    ('format = "csv"', 'format = "xlsx"', "units.format", "unknown format 'xlsx' (one of: parquet, csv, mdf-units)"),
    ('path = "units.csv"', 'path = ""', "units.path", "expected a file path"),
    ('format = "csv"', 'format = "csv"\ngeocode_columns = "geocode"', "units.geocode_columns", "list of column"),
    ('rho = "1/2"', 'rho = "1/2"\nlevel_shares = { root = "1/2", region = "1/2", district = "0", unit = "0" }',
     "units.level_shares.district", "must be > 0"),
    ('rho = "1/2"', 'rho = "1/2"\nlevel_shares = { root = "1" }', "units.level_shares.region", "missing share"),
    ('name = "kind"', 'name = "total"', "units.attributes[0].name", "reserved"),
    ('values = ["1", "2"]', 'values = ["1", "1"]', "units.attributes[1].values", "distinct"),
    ('mapping = { o = "1", v = "2" }', 'mapping = { o = "1", v = "3" }', "units.attributes[1].mapping.v",
     "not a value of occupancy"),
    ('[units.strategy.unit]\ndetailed = "1/4"\noccupancy = "3/4"\n', "", "units.strategy.unit", "missing"),
    ('[units.strategy.root]\n', '[units.strategy.nation]\ndetailed = "1"\n[units.strategy.root]\n',
     "units.strategy.nation", "not a level"),
    ('[units.strategy.district]\ndetailed = "1"', '[units.strategy.district]\ncolour = "1"',
     "units.strategy.district.'colour'", "unknown attribute"),
    ('occupancy = "3/4"', 'occupancy = "1/2"', "units.strategy.unit", "sum to 1"),
    ('levels = ["root", "region", "district", "unit"]', 'levels = ["district", "unit"]', "units.invariants[0].levels",
     "every level above"),
    ('query = "kind"', 'query = "colour"', "units.invariants[0].query", "unknown attribute"),
    ('kind = ["1"]\noccupancy = ["2"]', 'kind = ["2"]', "units.structural_zeros[0].kind", "not a value of kind"),
    ('kind = ["1"]\noccupancy = ["2"]', 'adult = ["1"]', "units.structural_zeros[0].adult", "unknown attribute"),
    ('[units]\n', '[[units.recodes]]\nname = "k"\nof = "kind"\ngroups = { a = ["0"] }\n[units]\n',
     "units.recodes[0]", "every value of kind"),
    ('[units]\n', '[units.postprocess]\nsolver = "cvxpy"\n[units]\n', "units.postprocess.solver",
     "the solver, runner and chunk size are the release's"),
    ('[units]\n', '[units.postprocess]\nrounding = ["colour"]\n[units]\n', "units.postprocess.rounding",
     "unknown query"),
    ('[units]\n', '[units.postprocess]\nreconciliation = "bottom_up"\n[units]\n', "units.postprocess.reconciliation",
     "expected one of"),
    ('[units]\n', '[[units.postprocess.passes]]\nlevels = ["nation"]\n[units]\n', "units.postprocess.passes[0].levels",
     "unknown level"),
])
def test_units_errors_name_the_users_key(tmp_path: Path, old: str, new: str, key: str, problem: str) -> None:
    assert old in TINY_UNITS_TOML
    text = TINY_TOML.format(rho="4") + TINY_UNITS_TOML.replace(old, new, 1)
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert caught.value.key == key, str(caught.value)
    assert problem in caught.value.problem and "\n" not in str(caught.value)


def test_units_must_be_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "units = 3\n" + TINY_TOML.format(rho="4")))
    assert caught.value.key == "units" and "expected a table" in caught.value.problem


def test_a_persons_format_is_not_a_units_one_and_back(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, BASE.replace('format = "parquet"', 'format = "mdf-units"', 1)))
    assert caught.value.key == "input.format" and "not a layout of person records" in caught.value.problem


def test_add_remove_is_refused_with_units_invariants_only(tmp_path: Path) -> None:
    """The persons here have no invariant, so add-remove is theirs to choose; the units' exact counts rule it out,
    and the error names the units' key."""
    persons = TINY_TOML.format(rho="4").replace('neighbouring = "replace-one"', 'neighbouring = "add-remove"')
    persons = persons[: persons.index("[[invariants]]")] + persons[persons.index("[[structural_zeros]]"):]
    assert load_config(write(tmp_path, persons)).budget.neighbouring == "add-remove"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, persons + TINY_UNITS_TOML))
    assert caught.value.key == "units.invariants" and "replace-one" in caught.value.problem
    without = TINY_UNITS_TOML[: TINY_UNITS_TOML.index("[[units.invariants]]")]
    units = load_config(write(tmp_path, persons + without)).units
    assert units is not None and units.budget.sensitivity2_squared == 1  # add-remove, shared


def test_an_error_at_a_shared_key_says_it_is_the_units(tmp_path: Path) -> None:
    """The persons may use the fast solver (detailed cells only, level by level, no invariant, no rounding
    marginal); the units universe, which shares the solver setting, cannot: the error keeps the persons' key."""
    persons = TINY_TOML.format(rho="4")
    persons = persons[: persons.index("[strategy.root]")] + "".join(
        f'[strategy.{level}]\ndetailed = "1"\n' for level in ("root", "region", "district", "unit"))
    persons += '[postprocess]\nsolver = "fast"\nreconciliation = "level_by_level"\nrounding = []\n'
    assert load_config(write(tmp_path, persons)).solver == "fast"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, persons + TINY_UNITS_TOML))
    assert caught.value.key == "postprocess.solver" and caught.value.problem.startswith("in the [units] universe: ")


@pytest.mark.parametrize(("ours", "theirs"), [
    ("budget.rho", "units.rho"), ("budget.level_shares.unit", "units.level_shares.unit"),
    ("input.geocode_column", "units.geocode_column"), ("input.geocode_columns", "units.geocode_columns"),
    ("attributes[1].mapping.v", "units.attributes[1].mapping.v"), ("strategy.unit.'x'", "units.strategy.unit.'x'"),
    ("postprocess.passes[0].l2", "units.postprocess.passes[0].l2"),
    ("postprocess.solver", None), ("ledger.cap_rho", None), ("levels", None), ("budget.delta", None),
    ("strategyx", None), ("input.geography", None),
])
def test_key_translation(ours: str, theirs: str | None) -> None:
    assert translate_key(ours) == theirs


def test_the_per_person_bound_counts_the_units_four_times(tmp_path: Path) -> None:
    """One person's change alters at most two unit records (the unit left, the unit joined), at most twice each
    units query's sensitivity: at most 4 times the units' rho (a Laplace query's), and the lifetime cap is
    checked against that bound when the configuration loads."""
    assert per_person_rho(F(4), F(1, 2)) == F(6) and per_person_rho(F(4), None) == F(4)
    assert per_person_rho(F(0), F(1, 3)) == F(4, 3) and UNITS_LOSS_FACTOR == 4
    at_cap = TINY_TOML.format(rho="4") + TINY_UNITS_TOML.replace('rho = "1/2"', 'rho = "249"', 1)
    assert load_config(write(tmp_path, at_cap)).units is not None  # 4 + 4 x 249 = 1000, the cap itself
    with pytest.raises(ConfigError) as caught:  # 4 + 249.01 is far below the cap; 4 + 4 x 249.01 is not
        load_config(write(tmp_path, at_cap.replace('rho = "249"', 'rho = "249.01"')))
    assert caught.value.key == "units.rho" and "per-person bound" in caught.value.problem
