"""A level's full-information targets, made chunk by chunk from the streamed GLS (``release.full_information``
builds them; docs/dask.md says where each is computed).  Public values only (post-processing, Thm 19.25)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from censusdp.pipeline.io.gls_scratch import ScratchCubes, read_rows
from censusdp.pipeline.io.measurements import read_chunk
from censusdp.postprocess import QueryMeasurement
from censusdp.postprocess.gls_algebra import AxisBasis, QuerySpec, answer, unrotate
from censusdp.postprocess.gls_stream import FINAL, StreamedGls
from censusdp.postprocess.gls_stream_chunk import LowestChunk


@dataclass(frozen=True)
class TargetTerm:
    """One target query of a level: its name, GLS spec, 0/1 matrix and weight σ²."""

    name: str
    spec: QuerySpec
    matrix: sp.csr_matrix
    sigma2: Fraction


@dataclass(frozen=True)
class StoredTargets:
    """A chunk's targets above the lowest level, computed by its task from the GLS's scratch file (not sent dense)."""

    path: str
    start: int
    stop: int
    shape: tuple[int, ...]
    bases: tuple[AxisBasis, ...]
    terms: tuple[TargetTerm, ...]

    def answers(self) -> tuple[QueryMeasurement, ...]:
        """What ``LevelTargets.chunk`` gives for these nodes, read and computed here."""
        rotated = read_rows(Path(self.path), self.start, self.stop, self.shape)
        return target_answers(unrotate(rotated, self.bases), self.shape, self.terms)

    def __repr__(self) -> str:
        return f"StoredTargets(nodes={self.start}:{self.stop})"


@dataclass(frozen=True)
class LevelTargets:
    """A level's GLS targets, made chunk by chunk: the streamed GLS and each target query with its weight σ²."""

    stream: StreamedGls
    level: int
    shape: tuple[int, ...]
    terms: tuple[TargetTerm, ...]
    store: ScratchCubes | None = None

    def chunk(self, start: int, stop: int) -> tuple[QueryMeasurement, ...]:
        """The targets of nodes [start, stop) (a chunk of the plan): the GLS estimates of every target query."""
        return target_answers(self.stream.estimate(self.level, start, stop), self.shape, self.terms)

    def stored(self, start: int, stop: int) -> StoredTargets:
        """The same targets, computed by the chunk's task from ``store`` (a level above the lowest)."""
        if self.store is None or self.level >= self.stream.depth - 1:
            raise ValueError("stored targets: a level above the lowest, of a GLS solved into scratch files")
        if stop > self.store.written(FINAL, self.level):
            raise ValueError(f"stored targets of level {self.level}: nodes {start}:{stop} not estimated")
        return StoredTargets(str(self.store.path(FINAL, self.level)), start, stop, self.shape,
                             tuple(self.stream.bases), self.terms)


def target_answers(detailed: np.ndarray, shape: tuple[int, ...], terms: Sequence[TargetTerm]
                   ) -> tuple[QueryMeasurement, ...]:
    """The targets of nodes whose detailed GLS estimates are ``detailed``: every term's query answered."""
    return tuple(QueryMeasurement(name=t.name, matrix=t.matrix, sigma2=t.sigma2, noisy=answer(detailed, shape, t.spec))
                 for t in terms)


def lowest_targets(chunk: LowestChunk, terms: Sequence[TargetTerm], noisy: Sequence[np.ndarray],
                   values: Sequence[np.ndarray]) -> tuple[QueryMeasurement, ...]:
    """A lowest chunk's targets from its own noisy measurements and invariant values, where they are read."""
    return target_answers(chunk.estimate(noisy, values), tuple(len(b.group) for b in chunk.bases), terms)


@dataclass(frozen=True)
class LowestSumsJob:
    """One chunk of the lowest level's GLS up pass, self-contained for a runner (its measurements read there)."""

    chunk: LowestChunk
    measurements_path: str
    first_row_group: int
    shapes: tuple[tuple[int, int], ...]
    invariant_values: tuple[np.ndarray, ...]

    def __repr__(self) -> str:
        return f"LowestSumsJob(nodes={self.chunk.start}:{self.chunk.stop})"


def lowest_children_sums(job: LowestSumsJob) -> np.ndarray:
    """The chunk's parents' children sums Σz̃ (rotated), its measurements read here."""
    noisy = read_chunk(Path(job.measurements_path), job.first_row_group, job.shapes)
    return job.chunk.children_sums(noisy, job.invariant_values)
