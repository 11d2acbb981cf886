"""The geography's tree of a universe, shared with the units universe's where it is the same geography."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from censusdp.geography.tree import GeoTree, build_tree
from censusdp.pipeline.io.microdata import InputFiles, geography_units
from censusdp.pipeline.release.run import Release, UniverseRun


def geography_tree(release: Release, run: UniverseRun, files: InputFiles) -> GeoTree:
    """The universe's tree: the units universe's (validated first) where it has the same levels and either the same
    geography file (not read again) or the same lowest-level units, so the two share one copy; else built."""
    units = release.units if run is release.persons else None
    theirs = units.input_files if units is not None and units.config.levels == run.config.levels else None
    if units is None or units.tree is None or theirs is None:
        return build_tree(run.config.levels, geography_units(files))
    if files.geography_format == theirs.geography_format and _same_file(files.geography, theirs.geography):
        return units.tree
    codes = geography_units(files)
    return units.tree if np.array_equal(units.tree.geoids[-1], codes) else build_tree(run.config.levels, codes)


def _same_file(path: Path | None, other: Path | None) -> bool:
    try:
        return path is not None and other is not None and path.samefile(other)
    except OSError:
        return False
