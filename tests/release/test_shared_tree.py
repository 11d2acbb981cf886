"""The two universes share one geography tree on the driver only where it is the same tree; the same geography
file is not read again for it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from censusdp.geography.levels import Level
from censusdp.geography.tree import GeoTree, build_tree
from censusdp.pipeline.release import stages

LEVELS = (Level("nation", 0), Level("state", 2), Level("block", 4))
CODES = np.array(["0101", "0102", "0201"])


def _files(path: Path | None, fmt: str | None = "parquet") -> SimpleNamespace:
    return SimpleNamespace(geography=path, geography_format=fmt)


def _run(levels: tuple[Level, ...], units_files: SimpleNamespace | None, *, built: bool = True) -> SimpleNamespace:
    units = None if units_files is None else SimpleNamespace(
        tree=build_tree(LEVELS, CODES) if built else None, config=SimpleNamespace(levels=LEVELS),
        input_files=units_files)
    run = SimpleNamespace(units=units, config=SimpleNamespace(levels=levels))
    run.persons = run  # the release and its persons' universe in one
    return run


@pytest.fixture
def geography(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[int]]:
    """Two geography files (their content is what ``codes`` says) and a count of the reads."""
    first, second = tmp_path / "geo.parquet", tmp_path / "other.parquet"
    first.write_bytes(b"1")
    second.write_bytes(b"2")
    reads: list[int] = []
    monkeypatch.setattr(stages, "geography_units", lambda files: (reads.append(1), files.codes)[1])
    return first, second, reads


def _tree(run: SimpleNamespace, path: Path | None, codes: np.ndarray, fmt: str = "parquet") -> GeoTree:
    files = _files(path, fmt)
    files.codes = codes
    return stages.geography_tree(run, run, files)  # type: ignore[arg-type]


def test_the_same_geography_file_is_not_read_again(geography: tuple[Path, Path, list[int]], tmp_path: Path) -> None:
    first, _, reads = geography
    run = _run(LEVELS, _files(first))
    assert _tree(run, first, CODES) is run.units.tree and not reads
    link = tmp_path / "link.parquet"
    link.symlink_to(first)
    assert _tree(run, link, CODES) is run.units.tree and not reads  # the same file by another name
    equal_levels = tuple(Level(lv.name, lv.width) for lv in LEVELS)  # equal, not the same objects
    assert _tree(_run(equal_levels, _files(first)), first, CODES) is not None and not reads


def test_another_file_with_the_same_units_shares_the_tree_once_read(geography: tuple[Path, Path, list[int]]) -> None:
    first, second, reads = geography
    run = _run(LEVELS, _files(first))
    shared = _tree(run, second, CODES.copy())
    assert shared is run.units.tree and reads == [1]
    assert _tree(run, first, CODES, fmt="csv") is run.units.tree and reads == [1, 1]  # another format: read
    built = build_tree(LEVELS, CODES)
    assert all(np.array_equal(a, b) for a, b in zip(shared.geoids + shared.parent, built.geoids + built.parent,
                                                   strict=True))


def test_another_geography_or_other_levels_or_no_units_build_their_own(
        geography: tuple[Path, Path, list[int]]) -> None:
    first, second, reads = geography
    other = np.array(["0101", "0102", "0202"])
    own = _tree(_run(LEVELS, _files(first)), second, other)
    assert own.geoids[-1].tolist() == other.tolist()
    assert _tree(_run(LEVELS, _files(first)), second, np.array(["0101", "0102"])).n_nodes(2) == 2
    regions = (Level("nation", 0), Level("region", 1), Level("block", 4))
    for run in (_run(regions, _files(first)), _run(LEVELS, None), _run(LEVELS, _files(first), built=False)):
        tree = _tree(run, first, CODES)
        assert run.units is None or tree is not run.units.tree
    assert len(reads) == 5
    for units_file, own_file in ((None, first), (first, None), (None, None)):  # a universe without a file: read
        run = _run(LEVELS, _files(units_file))
        assert _tree(run, own_file, CODES) is run.units.tree  # the same units
    assert len(reads) == 8
