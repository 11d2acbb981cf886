"""One chunk of one level's reconciliation, as a self-contained task a Dask worker can run: public values only, the
measurements read where it runs.  Post-processing of DP outputs is free (Thm 19.25).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.measurements import read_chunk
from censusdp.pipeline.release.lowest_parts import LowestPart, write_lowest_part, write_units_part
from censusdp.pipeline.release.persons_units import LevelRules
from censusdp.pipeline.release.targets import StoredTargets, TargetTerm, lowest_targets
from censusdp.postprocess import QueryBound, QueryInvariant, QueryMeasurement, reconcile_level
from censusdp.postprocess.gls_stream_chunk import LowestChunk
from censusdp.postprocess.passes import RoundingMarginal


@dataclass(frozen=True)
class ChunkTask:
    """Everything needed to reconcile nodes [start, stop) of one level."""

    level: str
    start: int
    stop: int
    measurements_path: str
    first_row_group: int
    queries: tuple[tuple[str, Fraction], ...]  # (query name, sigma²) in row-group order
    schema: Schema
    parent_counts: sp.csr_matrix | None  # rows: the chunk's parents, in order
    parent_index: np.ndarray | None  # each node's row in parent_counts
    invariants: tuple[tuple[str, np.ndarray], ...]  # (query name, values of the chunk's nodes)
    structural_zeros: np.ndarray | None
    solver: str
    tie_seed: int  # rounding ties are broken at random from a stream keyed by this (drawn from the run's CSPRNG)
    # measurements of the same nodes at only-child levels below (release.only_child): (label, query, σ², answers)
    chain_measurements: tuple[tuple[str, str, Fraction, np.ndarray], ...] = ()
    # full information: the GLS targets replace the measurements (scratch file, or the lowest level's gls_chunk)
    stored_targets: StoredTargets | None = None
    gls_chunk: LowestChunk | None = None
    target_terms: tuple[TargetTerm, ...] = ()
    passes: tuple[tuple[str, ...], ...] = ()  # least-squares passes (query names), pipeline.config.reconciliation
    tolerance: float = 0.1
    rounding: tuple[str, ...] = ()  # marginals rounded and fixed before the cells, in order
    lowest_part: LowestPart | None = None  # the persons' lowest level: the part of its outputs the task writes
    # persons and units tied together (release.persons_units): the chunk's bounds, from published values
    bound: QueryBound | None = None
    rules: LevelRules | None = None  # a persons' lowest task hands back its rule answers (``RULE_ANSWERS``)
    units_part: LowestPart | None = None  # the units' lowest level: the task writes its summary tables (H1)

    def __repr__(self) -> str:
        return f"ChunkTask(level={self.level!r}, nodes={self.start}:{self.stop})"


DISAGREEMENTS = "disagreements"  # a lowest task's report: its blocks where persons and units disagree
RULE_ANSWERS = "rule answers"  # a persons' lowest task's report: (nodes, rules) persons in each rule's cells


def reconcile_chunk(task: ChunkTask) -> tuple[sp.csr_matrix | None, dict[str, Any]]:
    """Reconcile the chunk against its fixed parents (within ``task.bound``): sparse counts and its report.  A lowest
    task writes its part of the outputs instead (no counts; its report adds ``DISAGREEMENTS``, ``RULE_ANSWERS``)."""
    schema = task.schema

    def matrix(name: str) -> sp.csr_matrix:
        return schema.query_matrix(schema.parse_query(name))

    chain = [QueryMeasurement(name=label, matrix=matrix(query), noisy=values, sigma2=sigma2)
             for label, query, sigma2, values in task.chain_measurements]
    invariants = [QueryInvariant(name=name, matrix=matrix(name), values=values) for name, values in task.invariants]
    parent = task.parent_counts.toarray().astype(np.int64) if task.parent_counts is not None else None
    result = reconcile_level(fitted_measurements(task) + chain, n_cells=schema.n_cells, parent_counts=parent,
                             parent_index=task.parent_index, invariants=invariants,
                             structural_zeros=task.structural_zeros, solver=task.solver,
                             rng=seeded_random_source(task.tie_seed), passes=task.passes, tolerance=task.tolerance,
                             rounding=[RoundingMarginal(name, matrix(name)) for name in task.rounding],
                             bounds=[task.bound] if task.bound is not None else [])
    counts, report = sp.csr_matrix(result.counts), result.report
    if task.units_part is not None:  # the units' table is the driver's to write, as above the lowest level
        return counts, {**report, DISAGREEMENTS: write_units_part(task.units_part, counts)}
    if task.lowest_part is None:
        return counts, report
    if task.rules is not None:
        report[RULE_ANSWERS] = task.rules.persons_answers(counts)
    return None, {**report, DISAGREEMENTS: write_lowest_part(task.lowest_part, counts)}


def fitted_measurements(task: ChunkTask) -> list[QueryMeasurement]:
    """What the chunk's least squares fits besides the only-child chain: its GLS targets, else its own measurements."""
    if task.stored_targets is not None:
        return list(task.stored_targets.answers())
    schema = task.schema
    parsed = [schema.parse_query(name) for name, _ in task.queries]
    shapes = [(task.stop - task.start, schema.query_cells(q)) for q in parsed]
    noisy = read_chunk(Path(task.measurements_path), task.first_row_group, shapes)
    if task.gls_chunk is not None:
        return list(lowest_targets(task.gls_chunk, task.target_terms, noisy, [values for _, values in task.invariants]))
    return [QueryMeasurement(name=q.name, matrix=schema.query_matrix(q), noisy=values, sigma2=sigma2)
            for q, (_, sigma2), values in zip(parsed, task.queries, noisy, strict=True)]
