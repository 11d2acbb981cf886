"""The P.L. 94-171 tables P1-P5: definitions against the CENRACE codes, identities between tables, the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import SummaryTables
from censusdp.pipeline.config.pl94_tables import RACES, pl94_variables
from censusdp.pipeline.config.schema import Attribute, Schema
from censusdp.pipeline.errors import ConfigError
from censusdp.pipeline.io import summary_tables
from censusdp.pipeline.io.summary_tables import (
    SummaryTableWriter,
    census_geoid,
    summary_counts,
    table_columns,
    variable_matrix,
    write_summary_tables,
)
from tests.helpers.tiny import TINY_TOML

# The CENRACE codes 01-63 written out from the Census technical documentation (W White, B Black or African
# American, I American Indian and Alaska Native, A Asian, P Native Hawaiian and Other Pacific Islander, S Some
# Other Race), independently of the combinatorial rule the code uses.
CENRACE = (
    "W", "B", "I", "A", "P", "S",
    "WB", "WI", "WA", "WP", "WS", "BI", "BA", "BP", "BS", "IA", "IP", "IS", "AP", "AS", "PS",
    "WBI", "WBA", "WBP", "WBS", "WIA", "WIP", "WIS", "WAP", "WAS", "WPS",
    "BIA", "BIP", "BIS", "BAP", "BAS", "BPS", "IAP", "IAS", "IPS", "APS",
    "WBIA", "WBIP", "WBIS", "WBAP", "WBAS", "WBPS", "WIAP", "WIAS", "WIPS", "WAPS",
    "BIAP", "BIAS", "BIPS", "BAPS", "IAPS",
    "WBIAP", "WBIAS", "WBIPS", "WBAPS", "WIAPS", "BIAPS",
    "WBIAPS",
)
LETTER = dict(zip("WBIAPS", RACES, strict=True))
# P1's subtotal rows and the first detail row below each: size -> (subtotal, first detail)
P1_GROUPS = {1: (2, 3), 2: (10, 11), 3: (26, 27), 4: (47, 48), 5: (63, 64), 6: (70, 71)}
SCHEMA = Schema((Attribute("hhgq", "GQTYPE_PL", tuple(str(t) for t in range(8))),
                 Attribute("votingage", "VOTING_AGE", ("1", "2")),
                 Attribute("hispanic", "CENHISP", ("1", "2")),
                 Attribute("cenrace", "CENRACE", tuple(f"{c:02d}" for c in range(1, 64)))))
VARIABLES = pl94_variables()
MATRIX = variable_matrix(SCHEMA, VARIABLES)
COLUMN = {v.name: j for j, v in enumerate(VARIABLES)}


def cells(**fixed: str) -> np.ndarray:
    """The detailed cell indices with the given attribute values."""
    mask = np.ones(SCHEMA.shape, dtype=bool)
    for name, value in fixed.items():
        axis = SCHEMA.names.index(name)
        index = SCHEMA.attribute(name).values.index(value)
        keep = np.zeros(SCHEMA.shape[axis], dtype=bool)
        keep[index] = True
        mask &= keep.reshape([-1 if a == axis else 1 for a in range(4)])
    return np.flatnonzero(mask.ravel())


def test_the_tables_have_their_census_sizes_and_names() -> None:
    sizes = {t: sum(v.table == t for v in VARIABLES) for t in ("P1", "P2", "P3", "P4", "P5")}
    assert sizes == {"P1": 71, "P2": 73, "P3": 71, "P4": 73, "P5": 10}
    assert [v.name for v in VARIABLES if v.table == "P2"][:3] == ["P2_001N", "P2_002N", "P2_003N"]
    assert VARIABLES[-1].name == "P5_010N" and len({v.name for v in VARIABLES}) == 298


@pytest.mark.parametrize("code", range(1, 64))
def test_every_cenrace_code_lands_in_exactly_its_p1_rows(code: int) -> None:
    letters = CENRACE[code - 1]
    subtotal, first = P1_GROUPS[len(letters)]
    same_size = [c for c in CENRACE if len(c) == len(letters)]
    own = first + same_size.index(letters)
    expected = {1, subtotal, own} | ({9} if len(letters) > 1 else set())
    cell = cells(hhgq="0", votingage="2", hispanic="1", cenrace=f"{code:02d}")[0]
    rows = {int(v.name[3:6]) for v in VARIABLES if v.table == "P1" and MATRIX[cell, COLUMN[v.name]]}
    assert rows == expected
    label = VARIABLES[COLUMN[f"P1_{own:03d}N"]].label
    names = [LETTER[letter] for letter in letters]
    assert label.endswith(f"{names[0]} alone" if len(names) == 1 else "; ".join(names))
    # P2 repeats P1's race rows for the population not Hispanic or Latino, two rows further down
    p2 = {int(v.name[3:6]) for v in VARIABLES if v.table == "P2" and MATRIX[cell, COLUMN[v.name]]}
    assert p2 == {1, 3} | {row + 2 for row in expected - {1}}
    hispanic = cells(hhgq="0", votingage="2", hispanic="2", cenrace=f"{code:02d}")[0]
    assert {int(v.name[3:6]) for v in VARIABLES if v.table == "P2" and MATRIX[hispanic, COLUMN[v.name]]} == {1, 2}


def test_p3_p4_count_adults_and_p5_the_group_quarters_by_type() -> None:
    child = cells(hhgq="5", votingage="1", hispanic="2", cenrace="07")[0]
    adult = cells(hhgq="5", votingage="2", hispanic="2", cenrace="07")[0]
    in_p3 = {v.name for v in VARIABLES if v.table in ("P3", "P4") and MATRIX[child, COLUMN[v.name]]}
    assert in_p3 == set()
    assert {v.name for v in VARIABLES if v.table == "P5" and MATRIX[adult, COLUMN[v.name]]} == {
        "P5_001N", "P5_007N", "P5_008N"}  # college housing: noninstitutional
    household = cells(hhgq="0", votingage="2", hispanic="1", cenrace="01")[0]
    assert not any(MATRIX[household, COLUMN[f"P5_{i:03d}N"]] for i in range(1, 11))
    nursing = cells(hhgq="3", votingage="2", hispanic="1", cenrace="01")[0]
    assert {v.name for v in VARIABLES if v.table == "P5" and MATRIX[nursing, COLUMN[v.name]]} == {
        "P5_001N", "P5_002N", "P5_005N"}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), nodes=st.integers(1, 5))
def test_identities_between_the_tables_hold_on_any_histogram(seed: int, nodes: int) -> None:
    rng = np.random.default_rng(seed)  # test-only
    counts = sp.random(nodes, SCHEMA.n_cells, density=0.05, random_state=rng, format="csr",
                       data_rvs=lambda n: rng.integers(1, 9, n)).astype(np.int64)
    table = summary_counts(counts, MATRIX)

    def col(name: str) -> np.ndarray:
        return table[:, COLUMN[name]]

    households = np.asarray(counts[:, cells(hhgq="0")].sum(axis=1)).ravel()
    adults = np.asarray(counts[:, cells(votingage="2")].sum(axis=1)).ravel()
    total = np.asarray(counts.sum(axis=1)).ravel()
    assert (col("P1_001N") == total).all() and (col("P2_001N") == total).all()
    assert (col("P1_001N") == col("P5_001N") + households).all()
    assert (col("P3_001N") == adults).all() and (col("P4_001N") == adults).all()
    for p in ("P1", "P3"):
        assert (col(f"{p}_001N") == col(f"{p}_002N") + col(f"{p}_009N")).all()
        assert (col(f"{p}_009N") == sum(col(f"{p}_{i:03d}N") for i in (10, 26, 47, 63, 70))).all()
        for size, (subtotal, first) in P1_GROUPS.items():
            width = sum(len(c) == size for c in CENRACE)
            assert (col(f"{p}_{subtotal:03d}N") == sum(col(f"{p}_{i:03d}N")
                                                       for i in range(first, first + width))).all()
    for p, q in (("P2", "P1"), ("P4", "P3")):
        assert (col(f"{p}_001N") == col(f"{p}_002N") + col(f"{p}_003N")).all()
        assert (col(f"{p}_003N") == col(f"{p}_004N") + col(f"{p}_011N")).all()
        for row in range(2, 72):  # not Hispanic is part of everyone
            assert (col(f"{p}_{row + 2:03d}N") <= col(f"{q}_{row:03d}N")).all()
    assert (table[:, [COLUMN[f"P3_{i:03d}N"] for i in range(1, 72)]]
            <= table[:, [COLUMN[f"P1_{i:03d}N"] for i in range(1, 72)]]).all()
    assert (col("P5_001N") == col("P5_002N") + col("P5_007N")).all()
    assert (col("P5_002N") == sum(col(f"P5_{i:03d}N") for i in range(3, 7))).all()
    assert (col("P5_007N") == sum(col(f"P5_{i:03d}N") for i in range(8, 11))).all()


def test_files_have_census_geoids_int64_columns_and_a_dictionary(tmp_path: Path) -> None:
    geoids = [np.array([""]), np.array(["44"]), np.array(["44001", "44003"])]
    rng = np.random.default_rng(5)  # test-only
    counts = [sp.csr_matrix(rng.integers(0, 3, (len(g), SCHEMA.n_cells))) for g in geoids]
    paths = write_summary_tables(tmp_path / "tables", SummaryTables.PL94, SCHEMA, ["us", "state", "county"],
                                 geoids, counts)
    assert paths == {"dictionary": "tables/pl94/dictionary.csv", "levels": {
        "us": "tables/pl94/us.parquet", "state": "tables/pl94/state.parquet", "county": "tables/pl94/county.parquet"}}
    county = pl.read_parquet(tmp_path / "tables" / "pl94" / "county.parquet")
    assert county.columns == ["GEOID", *(v.name for v in VARIABLES)]
    assert county["GEOID"].to_list() == ["44001", "44003"] and county["P1_001N"].dtype == pl.Int64
    assert county["P1_001N"].to_list() == [int(c.sum()) for c in counts[2].toarray()]
    assert pl.read_parquet(tmp_path / "tables" / "pl94" / "us.parquet")["GEOID"].to_list() == ["US"]
    assert census_geoid("440010101001000") == "440010101001000"
    dictionary = pl.read_csv(tmp_path / "tables" / "pl94" / "dictionary.csv")
    assert dictionary.columns == ["variable", "table", "label", "universe"] and dictionary.height == 298
    assert dictionary.row(by_predicate=pl.col("variable") == "P4_002N", named=True) == {
        "variable": "P4_002N", "table": "P4", "label": "!!Total:!!Hispanic or Latino",
        "universe": "Total population 18 years and over"}


@pytest.mark.parametrize(("tables", "message"), [
    ('["pl94"]', "the P.L. 94-171 tables need the attribute 'cenrace'"),
    ('["sf1"]', "'sf1' is not a table set (known: 'pl94')"),
    ('"pl94"', "expected a list of distinct table set names"),
])
def test_a_table_set_the_schema_cannot_answer_is_refused_by_key(tmp_path: Path, tables: str, message: str) -> None:
    text = TINY_TOML.format(rho="4").replace('dir = "runs"', f'dir = "runs"\ntables = {tables}')
    (tmp_path / "release.toml").write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "release.toml")
    assert "output.tables" in str(error.value) and message in str(error.value)


def test_a_level_written_chunk_by_chunk_equals_the_level_written_whole(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The lowest level's table is written as its chunks are reconciled, a few rows per row group: the same rows."""
    geoids = np.array([f"44001{i:04d}" for i in range(11)])
    rng = np.random.default_rng(8)  # test-only
    counts = sp.csr_matrix(rng.integers(0, 2, (len(geoids), SCHEMA.n_cells)) * rng.integers(0, 4, SCHEMA.n_cells))
    whole = write_summary_tables(tmp_path / "whole", SummaryTables.PL94, SCHEMA, ["block"], [geoids], [counts])
    monkeypatch.setattr(summary_tables, "ROWS_PER_WRITE", 3)
    writer = SummaryTableWriter(tmp_path / "chunks.parquet", table_columns(SummaryTables.PL94, SCHEMA))
    for start, stop in ((0, 4), (4, 5), (5, 11)):
        writer.write_rows(geoids[start:stop], [counts[start:stop]])
    chunked = pl.read_parquet(writer.close())
    assert chunked.equals(pl.read_parquet(tmp_path / whole["levels"]["block"]))
    assert chunked["P1_001N"].to_list() == np.asarray(counts.sum(axis=1)).ravel().tolist()
    assert len(chunked) == 11
