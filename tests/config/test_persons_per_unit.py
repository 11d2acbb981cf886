"""``[[units.persons_per_unit]]``: parsed against both schemas, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.persons_per_unit import selection_mask
from censusdp.pipeline.errors import ConfigError

RULES = '''
[[units.persons_per_unit]]
name = "households"
persons = { hhgq = ["0"] }
units = { hhgq = ["0"], occupancy = ["1"] }
min = 1
max = 99
'''


def _config(tmp_path: Path, rules: str) -> Path:
    text = preset_text("pl94")
    text = text[:text.index("[[units.persons_per_unit]]")] + rules
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_the_presets_tie_every_hhgq_type() -> None:
    names = [r.name for r in load_config_text("pl94").persons_per_unit]
    assert names[0] == "households" and len(names) == 8 and names[-1] == "group quarters hhgq=7"


def load_config_text(preset: str):  # type: ignore[no-untyped-def]
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.toml"
        path.write_text(preset_text(preset))
        return load_config(path)


@pytest.mark.parametrize(("change", "key"), [
    ('persons = { hhgq = ["0"] }', 'persons = { tenure = ["0"] }'),
    ("max = 99", "max = 0"),
    ('units = { hhgq = ["0"], occupancy = ["1"] }', 'units = { hhgq = ["9"] }'),
])
def test_errors_name_the_key(tmp_path: Path, change: str, key: str) -> None:
    with pytest.raises(ConfigError, match=r"units\.persons_per_unit\[0\]"):
        load_config(_config(tmp_path, RULES.replace(change, key)))


def test_overlapping_rules_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="overlap"):
        load_config(_config(tmp_path, RULES + RULES.replace('"households"', '"again"')))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_selection_names_the_cells_whose_every_listed_attribute_has_a_listed_value(data: st.DataObject) -> None:
    schema = SCHEMA
    names = data.draw(st.lists(st.sampled_from(schema.names), unique=True, max_size=len(schema.names)))
    selection = tuple((name, tuple(data.draw(st.lists(st.sampled_from(schema.attribute(name).values), unique=True))))
                      for name in names)
    cells = np.unravel_index(np.arange(schema.n_cells), schema.shape)
    expected = [all(schema.attribute(name).values[cells[schema.names.index(name)][c]] in values
                    for name, values in selection) for c in range(schema.n_cells)]
    np.testing.assert_array_equal(selection_mask(schema, selection), expected)


SCHEMA = load_config_text("pl94").schema
