"""The streamed GLS's intermediates as plain files (``postprocess.gls_stream``'s ``CubeStore``): public values
(post-processing of noisy measurements), under the run's temporary folder, removed before publish.
"""

from __future__ import annotations

import shutil
import tempfile
from math import prod
from pathlib import Path

import numpy as np


class ScratchCubes:
    """(n, n_1..n_m) float64 cubes per (kind, level) in plain files: appended front to back, read by node range
    with ``np.fromfile`` (never memory-mapped: touched pages of a map count in the process's resident memory)."""

    def __init__(self, directory: Path, shape: tuple[int, ...]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # a folder of its own: a stale stream's clean-up (at garbage collection) never touches a newer one's files
        self.directory = Path(tempfile.mkdtemp(prefix="gls-", dir=directory))
        self.shape, self.cells = shape, prod(shape)
        self.rows: dict[tuple[str, int], int] = {}

    def path(self, kind: str, level: int) -> Path:
        return self.directory / f"{kind}-{level}.f64"

    def write(self, kind: str, level: int, cube: np.ndarray) -> None:
        with open(self.path(kind, level), "ab") as file:
            np.ascontiguousarray(cube, dtype=np.float64).tofile(file)
        self.rows[kind, level] = self.rows.get((kind, level), 0) + cube.shape[0]

    def read(self, kind: str, level: int, start: int, stop: int) -> np.ndarray:
        if stop > self.written(kind, level):
            raise ValueError(f"{kind} of level {level}: rows {start}:{stop} not written")
        return read_rows(self.path(kind, level), start, stop, self.shape)

    def written(self, kind: str, level: int) -> int:
        """The rows written so far of (kind, level)."""
        return self.rows.get((kind, level), 0)

    def rename(self, kind: str, new: str, level: int) -> None:
        self.path(kind, level).rename(self.path(new, level))
        self.rows[new, level] = self.rows.pop((kind, level))

    def remove(self, kind: str, level: int) -> None:
        self.path(kind, level).unlink(missing_ok=True)
        self.rows.pop((kind, level), None)

    def close(self) -> None:
        """Remove this store's folder (idempotent)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def read_rows(path: Path, start: int, stop: int, shape: tuple[int, ...]) -> np.ndarray:
    """Rows [start, stop) of a cube file (``ScratchCubes.path``), where no store is at hand (a Dask worker)."""
    cells = prod(shape)
    values = np.fromfile(path, dtype=np.float64, count=(stop - start) * cells, offset=start * cells * 8)
    if values.size != (stop - start) * cells:
        raise ValueError(f"{path.name}: rows {start}:{stop} not written")
    return values.reshape(stop - start, *shape)
