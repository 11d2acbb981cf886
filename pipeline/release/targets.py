"""A level's full-information targets, made chunk by chunk from the streamed GLS (``release.full_information``
builds them; ``release.tasks`` evaluates one chunk per reconciliation task).  Public values only."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import scipy.sparse as sp

from postprocess import QueryMeasurement
from postprocess.gls_algebra import QuerySpec, answer
from postprocess.gls_stream import StreamedGls


@dataclass(frozen=True)
class TargetTerm:
    """One target query of a level: its name, GLS spec, 0/1 matrix and weight σ²."""

    name: str
    spec: QuerySpec
    matrix: sp.csr_matrix
    sigma2: Fraction


@dataclass(frozen=True)
class LevelTargets:
    """A level's GLS targets, made chunk by chunk: the streamed GLS and each target query with its weight σ²
    (as ``tree_targets`` weighs them)."""

    stream: StreamedGls
    level: int
    shape: tuple[int, ...]
    terms: tuple[TargetTerm, ...]

    def chunk(self, start: int, stop: int) -> tuple[QueryMeasurement, ...]:
        """The targets of nodes [start, stop) (a chunk of the plan): the GLS estimates of every target query."""
        detailed = self.stream.estimate(self.level, start, stop)
        return tuple(QueryMeasurement(name=t.name, matrix=t.matrix, sigma2=t.sigma2,
                                      noisy=answer(detailed, self.shape, t.spec)) for t in self.terms)
