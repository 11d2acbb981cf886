"""Recodes: an attribute defined as a grouping of another's values (``pipeline.config.schema``, ``config.load``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.schema import Attribute, Recode, Schema
from censusdp.pipeline.errors import ConfigError
from tests.helpers.tiny import TINY_TOML

HHGQ = Attribute("hhgq", "G", tuple(str(i) for i in range(8)))
AGE = Attribute("votingage", "V", ("1", "2"))
INST = Recode("hhinstlevels", "hhgq", ("household", "institutional", "noninstitutional"),
              (("0",), ("1", "2", "3", "4"), ("5", "6", "7")))
SCHEMA = Schema((HHGQ, AGE), (INST,))
HISTOGRAMS = np.arange(3 * 16, dtype=np.int64).reshape(3, 16) ** 2  # 3 nodes, distinct counts


def by_hand(histograms: np.ndarray) -> np.ndarray:
    """votingage * hhinstlevels, summed cell by cell from the (hhgq, votingage) cube."""
    cube = histograms.reshape(-1, 8, 2)
    groups = [[0], [1, 2, 3, 4], [5, 6, 7]]
    answers = np.array([[cube[:, g, v].sum(axis=1) for g in groups] for v in range(2)])  # (votingage, group, node)
    return answers.transpose(2, 0, 1).reshape(len(histograms), 6)


def test_a_recode_query_sums_the_values_of_each_group() -> None:
    query = SCHEMA.parse_query(" votingage *hhinstlevels ")
    assert query.name == "votingage * hhinstlevels" and SCHEMA.query_shape(query) == (2, 3)
    np.testing.assert_array_equal(SCHEMA.marginal(query, HISTOGRAMS), by_hand(HISTOGRAMS))
    np.testing.assert_array_equal(SCHEMA.query_matrix(query) @ HISTOGRAMS.T, by_hand(HISTOGRAMS).T)
    labels = SCHEMA.cell_labels(query)
    assert list(labels[0]) == ["1"] * 3 + ["2"] * 3
    assert list(labels[1]) == ["household", "institutional", "noninstitutional"] * 2
    alone = SCHEMA.parse_query("hhinstlevels")
    np.testing.assert_array_equal(SCHEMA.marginal(alone, HISTOGRAMS), by_hand(HISTOGRAMS).reshape(3, 2, 3).sum(1))
    assert SCHEMA.query_cells(alone) == 3 and SCHEMA.n_cells == 16  # a recode spans no axis of its own


def test_a_query_names_each_axis_once() -> None:
    with pytest.raises(ValueError, match="names an attribute twice"):
        SCHEMA.parse_query("hhgq * hhinstlevels")
    with pytest.raises(ValueError, match="unknown attribute 'hhinst'.*known: hhgq, votingage, hhinstlevels"):
        SCHEMA.parse_query("hhinst")


@pytest.mark.parametrize(("recode", "problem"), [
    (Recode("hhgq", "votingage", ("a",), (("1", "2"),)), "already an attribute"),
    (Recode("x", "age", ("a",), (("1", "2"),)), "'age' is not an attribute"),
    (Recode("x", "votingage", ("a",), (("1",),)), "every value of votingage exactly once"),  # "2" left out
    (Recode("x", "votingage", ("a", "b"), (("1", "2"), ("2",))), "exactly once"),  # "2" twice
    (Recode("x", "votingage", ("a", "a"), (("1",), ("2",))), "distinctly named"),
    (Recode("x", "votingage", ("a", "b"), (("1", "2"), ())), "non-empty"),
])
def test_a_recode_must_partition_an_attribute(recode: Recode, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Schema((HHGQ, AGE), (recode,))


RECODE_TOML = '''
[[recodes]]
name = "tone"
of = "colour"
[recodes.groups]
warm = ["red"]
cool = ["green", "blue"]
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_the_configuration_declares_recodes_and_queries_use_them(tmp_path: Path) -> None:
    text = TINY_TOML.format(rho="4").replace('[strategy.region]\ntotal = "1/3"', '[strategy.region]\ntone = "1/3"')
    config = load_config(write(tmp_path, text + RECODE_TOML))
    assert config.schema.recodes == (Recode("tone", "colour", ("warm", "cool"), (("red",), ("green", "blue"))),)
    assert [e.query.name for e in config.strategy["region"]] == ["tone", "colour", "detailed"]


@pytest.mark.parametrize(("recodes", "key"), [
    (RECODE_TOML.replace('of = "colour"', 'of = "shade"'), "recodes[0]: recode 'tone': 'shade' is not"),
    (RECODE_TOML.replace('cool = ["green", "blue"]', 'cool = ["green"]'), "recodes[0]: recode 'tone'"),
    (RECODE_TOML.replace('name = "tone"', 'name = "total"'), "recodes[0].name"),
    (RECODE_TOML.replace('name = "tone"\n', ''), "recodes[0]: expected a table with exactly name, of and groups"),
    ('recodes = "tone"\n', "recodes: expected an array of tables"),
])
def test_bad_recodes_are_one_line_errors_naming_the_key(tmp_path: Path, recodes: str, key: str) -> None:
    text = TINY_TOML.format(rho="4")
    text = recodes + text if recodes.startswith("recodes =") else text + recodes
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert key in str(info.value) and "\n" not in str(info.value)


def test_gls_estimates_with_a_recode_load(tmp_path: Path) -> None:
    """The exact GLS covers recodes (postprocess.gls_algebra): output.estimates with a recode query is accepted."""
    text = TINY_TOML.format(rho="4").replace('[strategy.region]\ntotal = "1/3"', '[strategy.region]\ntone = "1/3"')
    text = text.replace('dir = "runs"', 'dir = "runs"\nestimates = true')
    config = load_config(write(tmp_path, text + RECODE_TOML))
    assert config.output.estimates and [e.query.name for e in config.strategy["region"]][0] == "tone"
