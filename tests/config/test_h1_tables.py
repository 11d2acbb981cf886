"""H1 (occupancy status) over the units universe's schema: the definitions, their sums, the schema check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.pl94_tables import h1_schema_problem, h1_variables, pl94_schema_problem
from censusdp.pipeline.config.schema import Attribute, Schema
from censusdp.pipeline.io.summary_tables import summary_counts, variable_matrix

UNITS = Schema((Attribute("hhgq", "GQTYPE", tuple(str(t) for t in range(8))),
                Attribute("occupancy", "VACS", ("1", "2"))))


def test_h1_variables_are_the_2020_ones() -> None:
    """Names, labels and universe as the 2020 redistricting data's H1 (Census API ``!!`` labels)."""
    assert [(v.table, v.name, v.label, v.universe) for v in h1_variables()] == [
        ("H1", "H1_001N", "!!Total:", "Housing units"),
        ("H1", "H1_002N", "!!Total:!!Occupied", "Housing units"),
        ("H1", "H1_003N", "!!Total:!!Vacant", "Housing units")]


def test_h1_counts_housing_units_only() -> None:
    """On hand-made detailed counts (rows: nodes; cells hhgq x occupancy in C order): group-quarters facilities
    are not housing units, whatever their occupancy."""
    counts = np.zeros((3, UNITS.n_cells), dtype=np.int64)
    cell = {(h, o): i for i, (h, o) in enumerate((h, o) for h in range(8) for o in range(2))}
    counts[0, cell[0, 0]], counts[0, cell[0, 1]] = 12, 3  # 12 occupied, 3 vacant housing units
    counts[1, cell[3, 0]], counts[1, cell[5, 0]], counts[1, cell[7, 1]] = 1, 2, 1  # facilities only
    counts[2, cell[0, 1]], counts[2, cell[1, 0]] = 4, 1  # vacant housing units and a prison
    h1 = summary_counts(counts, variable_matrix(UNITS, h1_variables()))
    assert h1.tolist() == [[15, 12, 3], [0, 0, 0], [4, 0, 4]]
    assert (h1[:, 0] == h1[:, 1] + h1[:, 2]).all()


@pytest.mark.parametrize("name", ["pl94", "pl94-2020"])
def test_the_presets_units_schema_carries_h1_and_the_persons_do_not(tmp_path: Path, name: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(preset_text(name))
    config = load_config(path)
    assert config.units is not None and h1_schema_problem(config.units.schema) is None
    assert h1_schema_problem(config.schema) == "the P.L. 94-171 table H1 needs the attribute 'occupancy'"
    assert pl94_schema_problem(config.units.schema) is not None and pl94_schema_problem(config.schema) is None


@pytest.mark.parametrize(("schema", "problem"), [
    (Schema((Attribute("hhgq", "G", tuple(str(t) for t in range(8))),)), "needs the attribute 'occupancy'"),
    (Schema((Attribute("occupancy", "V", ("1", "2")),)), "needs the attribute 'hhgq'"),
    (Schema((Attribute("hhgq", "G", ("0", "1")), Attribute("occupancy", "V", ("1", "2")))),
     "needs 'hhgq' with the values 0, 1, 2, 3, 4, 5, 6, 7"),
    (Schema((Attribute("hhgq", "G", tuple(str(t) for t in range(8))), Attribute("occupancy", "V", ("2", "1")))),
     "needs 'occupancy' with the values 1, 2"),
])
def test_h1_schema_problems(schema: Schema, problem: str) -> None:
    found = h1_schema_problem(schema)
    assert found is not None and problem in found
