"""A plan's block-assignment file (``censusdp areas --assign FILE``): each block to the id of an area.

Formats, columns and errors: docs/areas.md.  The file holds public geography only (no confidential value), so
its errors name the file, the column, the row (1-based, the header not counted) and the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from censusdp.geography.spine import UnitLookup
from censusdp.pipeline.errors import InputError, InputProblem

BLOCK_COLUMNS = ("GEOID", "GEOID20", "GEOID10", "BLOCKID", "geoid", "block")


@dataclass(frozen=True)
class Assignment:
    """``area_ids`` in sorted order; ``leaf_area[b]``: the index of block b's area, or -1 (in no area)."""

    path: Path
    area_ids: tuple[str, ...]
    leaf_area: np.ndarray
    skipped: int = 0  # rows whose code is not a block of the release (only with skip_unknown)

    @property
    def n_areas(self) -> int:
        return len(self.area_ids)

    def members(self) -> sp.csr_matrix:
        """(n_areas, n_blocks) 0/1: row a sums the blocks of area a (a block in no area in no row)."""
        inside = np.flatnonzero(self.leaf_area >= 0)
        return sp.csr_matrix((np.ones(len(inside), dtype=np.int64), (self.leaf_area[inside], inside)),
                             shape=(self.n_areas, len(self.leaf_area)))


def _read(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise InputError(str(path), "not found")
    try:
        if path.suffix.lower() == ".parquet":
            return pl.read_parquet(path).cast(pl.String)
        head = path.open(encoding="utf-8", errors="replace").readline()
        separator = "|" if "|" in head and "," not in head else ","
        return pl.read_csv(path, infer_schema=False, separator=separator)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as error:
        raise InputError(str(path), f"cannot be read as {'Parquet' if path.suffix.lower() == '.parquet' else 'CSV'} "
                                    f"({type(error).__name__})") from None


def _columns(frame: pl.DataFrame, path: Path, block: str | None, area: str | None) -> tuple[str, str]:
    names = frame.columns
    if block is None:
        block = next((c for c in BLOCK_COLUMNS if c in names), names[0] if len(names) == 2 else None)
    if area is None:
        others = [c for c in names if c != block]
        area = others[0] if len(others) == 1 else None
    for kind, name in (("block", block), ("area", area)):
        if name is None or name not in names:
            option = f"--{kind}-column"
            raise InputError(str(path), f"no {kind} column ({f'{option} {name}' if name else f'give {option}'}; "
                             f"columns: {', '.join(names)})", category=InputProblem.COLUMN)
    return block, area


def read_assignment(path: Path, blocks: np.ndarray | UnitLookup, *, block_column: str | None = None,
                    area_column: str | None = None, skip_unknown: bool = False) -> Assignment:
    """The assignment of the release's lowest-level units ``blocks`` (sorted codes, or the tree's lookup by
    their own codes when levels come from columns) to areas; ``skip_unknown``
    skips (and counts) the rows whose code is not a block of the release (a Census block assignment file lists
    every block, a release made without a geography file only the populated ones)."""
    path = Path(path)
    frame = _read(path)
    if frame.height == 0:
        raise InputError(str(path), "has no rows: list at least one block and its area", category=InputProblem.EMPTY)
    block, area = _columns(frame, path, block_column, area_column)
    codes = frame[block].to_numpy().astype(object)
    ids = frame[area].to_numpy().astype(object)
    for name, values in ((block, codes), (area, ids)):
        missing = np.flatnonzero([v is None or str(v).strip() == "" for v in values])
        if len(missing):
            raise InputError(str(path), "missing value", column=name, row=int(missing[0]) + 1,
                             category=InputProblem.MISSING_VALUE)
    units = blocks if isinstance(blocks, UnitLookup) else UnitLookup(blocks, None)
    codes = codes.astype(str)
    index, known = units.find(codes)
    if not known.all() and not skip_unknown:
        row = int(np.flatnonzero(~known)[0])
        raise InputError(str(path), f"{str(codes[row])!r} is not a block of the release (a release made without a "
                         "geography file has only its populated blocks: --skip-unknown-blocks)", column=block,
                         row=row + 1, category=InputProblem.GEOGRAPHY)
    skipped = int((~known).sum())
    codes, ids, index = codes[known], ids[known], index[known]
    rows = np.flatnonzero(known)  # the file's row of every kept entry
    order = np.argsort(index, kind="stable")
    repeated = np.flatnonzero(index[order][1:] == index[order][:-1])
    if len(repeated):
        first, second = sorted((int(order[repeated[0]]), int(order[repeated[0] + 1])))
        first_row, second_row = int(rows[first]) + 1, int(rows[second]) + 1
        same = ids[first] == ids[second]
        problem = (f"block {str(codes[second])!r} is listed twice (rows {first_row} and {second_row})" if same else
                   f"block {str(codes[second])!r} is in two areas ({ids[first]!r} at row {first_row}, {ids[second]!r} "
                   f"at row {second_row})")
        raise InputError(str(path), problem, column=block, row=second_row, category=InputProblem.DUPLICATE)
    area_ids, area_index = np.unique(ids.astype(str), return_inverse=True)
    leaf_area = np.full(len(units.codes), -1, dtype=np.int64)
    leaf_area[index] = area_index
    return Assignment(path=path, area_ids=tuple(str(a) for a in area_ids), leaf_area=leaf_area, skipped=skipped)
