from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.geography.levels import Level
from censusdp.geography.presets import US_CENSUS_LEVELS
from censusdp.geography.tree import LOWEST_GEOIDS, build_tree, fixed_width

LEVELS = (Level("root", 0), Level("a", 1), Level("b", 3))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text("0123", min_size=3, max_size=3), min_size=1, max_size=40))
def test_tree_parents_are_prefixes_and_aggregation_sums(codes: list[str]) -> None:
    tree = build_tree(LEVELS, np.array(codes))
    assert list(tree.geoids[-1]) == sorted(set(codes))
    for level in range(1, tree.depth):
        width = LEVELS[level - 1].width
        assert list(tree.geoids[level - 1]) == sorted({c[:width] for c in codes})  # every prefix, once
        parents = tree.geoids[level - 1][tree.parent[level]]
        assert all(g[:width] == p for g, p in zip(tree.geoids[level], parents, strict=True))
        assert np.all(np.diff(tree.parent[level]) >= 0)  # children of a parent are contiguous
        values = np.arange(tree.n_nodes(level) * 2).reshape(-1, 2)
        up = tree.aggregate_up(level, values)
        expected = np.zeros((tree.n_nodes(level - 1), 2), dtype=values.dtype)
        np.add.at(expected, tree.parent[level], values)
        assert np.array_equal(up, expected)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text("0123", min_size=3, max_size=3), min_size=1, max_size=40))
def test_sorted_unique_codes_are_taken_as_given_and_make_the_same_tree(codes: list[str]) -> None:
    listing = np.array(sorted(set(codes)))
    given_order, listed = build_tree(LEVELS, np.array(codes)), build_tree(LEVELS, listing)
    for a, b in zip(given_order.geoids + given_order.parent, listed.geoids + listed.parent, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # the lowest level in the compact string type (16 bytes a code, not 4 a character), read-only; the others str_
    assert listed.geoids[-1].dtype == LOWEST_GEOIDS and not listed.geoids[-1].flags.writeable
    assert listed.geoids[-1].nbytes == 16 * len(listing) and all(g.dtype.kind == "U" for g in listed.geoids[:-1])
    naive = [sorted({c[:lv.width] for c in codes}) for lv in LEVELS]  # every level: the distinct prefixes
    assert [list(g) for g in listed.geoids] == naive
    repeated = np.array(sorted(codes + codes[:1]))  # sorted, not strictly: a duplicate goes
    assert list(build_tree(LEVELS, repeated).geoids[-1]) == sorted(set(codes))
    assert list(build_tree(LEVELS, listing.reshape(-1, 1)).geoids[-1]) == list(listing)  # any shape


def test_us_levels_and_lookup() -> None:
    blocks = np.array(["011050001001000", "011050001001001", "011059999002000", "020010000011000"])
    tree = build_tree(US_CENSUS_LEVELS, blocks)
    assert [tree.n_nodes(i) for i in range(6)] == [1, 2, 2, 3, 3, 4]
    assert tree.geoids[0][0] == ""
    assert list(tree.lowest_index(np.array(["020010000011000", "999999999999999"]))) == [3, -1]
    # a longer code is not cut to the tree's width (a fixed-width cast would match it to 011050001001000)
    assert list(tree.lowest_index(np.array(["0110500010010009", "011050001001000"]))) == [-1, 0]
    assert list(tree.lowest_index(np.array(["011050001001001"], dtype=object))) == [1]


def test_codes_of_the_wrong_width_are_rejected() -> None:
    with pytest.raises(ValueError, match="3 characters"):
        build_tree(LEVELS, np.array(["012", "01"]))
    with pytest.raises(ValueError, match="3 characters"):
        build_tree(LEVELS, np.array(["012", "02"]))  # sorted and unique: taken as given, still checked


@pytest.mark.parametrize("name", ["../ledger", "/tmp/x", "a/b", "", "invariants", "block group", ".hidden"])
def test_a_level_name_that_is_not_a_plain_file_name_is_refused(name: str) -> None:
    """A level's name names its files (measurements/<name>, tables/<name>.parquet): a path there would let a
    release write or delete outside its run folder (e.g. the ledger's)."""
    with pytest.raises(ValueError, match="must be letters, digits"):
        build_tree((Level("root", 0), Level(name, 2)), np.array(["01"]))


def test_fixed_width_cuts_no_code_short() -> None:
    compact = np.array(["01", "0123", "012"], dtype=LOWEST_GEOIDS)
    wide = fixed_width(compact)
    assert wide.dtype == np.dtype("<U4") and wide.tolist() == ["01", "0123", "012"]
    assert fixed_width(np.array([], dtype=LOWEST_GEOIDS)).dtype.kind == "U"
    assert fixed_width(np.array(["abc"])).dtype == np.dtype("<U3")  # a str_ array as it is


@pytest.mark.parametrize(("width", "code"), [(15, "é"), (16, "0"), (21, "0")])
def test_codes_longer_than_fifteen_bytes_are_found_where_they_are(width: int, code: str) -> None:
    """Spine codes (or non-ASCII codes) past 15 bytes stay ``str_``: numpy's StringDType searchsorted misreads
    strings stored outside the array when needles and haystack are different arrays (numpy#31533)."""
    codes = np.array([code * (width - 5) + f"{i:05d}" for i in range(300)])
    tree = build_tree((Level("root", 0), Level("unit", width)), codes)
    assert tree.geoids[-1].dtype.kind == "U"
    assert np.array_equal(tree.lowest_index(codes[::-1].copy()), np.arange(300)[::-1])
