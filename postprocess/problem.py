"""What the reconciliation takes and gives back: DP outputs (noisy answers, their variances) and public values
(queries, invariants, structural zeros, the level above's released table), never microdata, so its output is as
private as the measurements (Thm 19.25).  Invariants are published exactly: *not* protected (stated in the manifest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import scipy.sparse as sp


class ReconciliationError(RuntimeError):
    """A constraint violation, an infeasible problem or a solver failure: the run fails and publishes nothing.
    Messages carry public information only, never a count: error text ends up in logs and the orchestrator's
    database."""


@dataclass(frozen=True)
class QueryMeasurement:
    """Noisy answers (n_nodes, q_cells) of one query at every node of a level: ``matrix`` (q_cells, n_cells) is 0/1,
    so a node's true answer is ``matrix @ histogram``; each cell's noise has variance ``sigma2`` (weight 1/sigma2)."""

    name: str
    matrix: sp.csr_matrix
    noisy: np.ndarray
    sigma2: Fraction


@dataclass(frozen=True)
class QueryInvariant:
    """Exact, public answers of one query at every node of a level: ``matrix @ histogram == values[node]``."""

    name: str
    matrix: sp.csr_matrix
    values: np.ndarray


UNBOUNDED = np.iinfo(np.int64).max // 4  # an upper bound that bounds nothing


@dataclass(frozen=True)
class QueryBound:
    """Public bounds on one query at every node of a level: ``lower[node] <= matrix @ histogram <= upper[node]``
    (``UNBOUNDED``: no upper bound).  From published values (e.g. the housing units a node's persons may live in),
    so fitting within them is post-processing like the rest."""

    name: str
    matrix: sp.csr_matrix
    lower: np.ndarray
    upper: np.ndarray


@dataclass
class LevelResult:
    """The level's integer table (n_nodes, n_cells) and public diagnostics of how it was obtained."""

    counts: np.ndarray
    report: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    """Validated, normalised inputs of one level (internal)."""

    n_nodes: int
    n_cells: int
    measurements: tuple[QueryMeasurement, ...]
    invariants: tuple[QueryInvariant, ...]
    parent_counts: np.ndarray | None
    parent_index: np.ndarray | None
    structural_zeros: np.ndarray
    bounds: tuple[QueryBound, ...] = ()
    node_zeros: np.ndarray | None = None  # (n_nodes, n_cells): cells a bound's upper 0 fixes at 0 in that node


def validate(measurements: Sequence[QueryMeasurement], invariants: Sequence[QueryInvariant], *, n_cells: int,
             parent_counts: np.ndarray | None, parent_index: np.ndarray | None, structural_zeros: np.ndarray | None,
             bounds: Sequence[QueryBound] = ()) -> Inputs:
    """Check shapes and types (``ValueError``: a programming error, not a data problem) and normalise them."""
    if n_cells < 1:
        raise ValueError("n_cells must be positive")
    if not measurements:
        raise ValueError("at least one measurement is needed")
    if (parent_counts is None) != (parent_index is None):
        raise ValueError("parent_counts and parent_index must both be given or both be None (root level)")
    n_nodes = np.asarray(measurements[0].noisy).shape[0]
    clean_m = tuple(_clean_measurement(m, n_nodes, n_cells) for m in measurements)
    clean_i = tuple(_clean_invariant(i, n_nodes, n_cells) for i in invariants)
    counts = index = None
    if parent_counts is not None and parent_index is not None:
        counts, index = np.asarray(parent_counts), np.asarray(parent_index)
        if counts.ndim != 2 or counts.shape[1] != n_cells or not np.issubdtype(counts.dtype, np.integer):
            raise ValueError(f"parent_counts must be an integer array of shape (n_parents, {n_cells})")
        if index.shape != (n_nodes,) or not np.issubdtype(index.dtype, np.integer):
            raise ValueError(f"parent_index must be an integer array of shape ({n_nodes},)")
        if n_nodes and (index.min() < 0 or index.max() >= counts.shape[0]):
            raise ValueError("parent_index points outside parent_counts")
        counts, index = counts.astype(np.int64, copy=False), index.astype(np.int64, copy=False)
    zeros = np.zeros(n_cells, dtype=bool) if structural_zeros is None else np.asarray(structural_zeros)
    if zeros.shape != (n_cells,) or zeros.dtype != np.bool_:
        raise ValueError(f"structural_zeros must be a boolean array of shape ({n_cells},)")
    clean_b = tuple(_clean_bound(b, n_nodes, n_cells) for b in bounds)
    node_zeros = None
    for bound in clean_b:
        closed = bound.upper == 0  # (n_nodes, q): those query cells hold nothing
        if closed.any():
            hit = (sp.csr_matrix(closed.astype(np.float64)) @ bound.matrix).toarray() > 0
            node_zeros = hit if node_zeros is None else node_zeros | hit
    return Inputs(n_nodes, n_cells, clean_m, clean_i, counts, index, zeros, clean_b, node_zeros)


def _clean_matrix(name: str, matrix: sp.spmatrix, n_cells: int) -> sp.csr_matrix:
    csr = sp.csr_matrix(matrix, dtype=np.float64)
    csr.eliminate_zeros()
    if csr.ndim != 2 or csr.shape[1] != n_cells:
        raise ValueError(f"query {name!r}: matrix must have {n_cells} columns")
    if not np.all(csr.data == 1.0):
        raise ValueError(f"query {name!r}: matrix entries must be 0 or 1")
    csr.sum_duplicates()
    return csr


def _clean_measurement(m: QueryMeasurement, n_nodes: int, n_cells: int) -> QueryMeasurement:
    matrix = _clean_matrix(m.name, m.matrix, n_cells)
    noisy = np.asarray(m.noisy)
    if noisy.shape != (n_nodes, matrix.shape[0]) or not np.issubdtype(noisy.dtype, np.number):
        raise ValueError(f"query {m.name!r}: noisy must be numeric of shape ({n_nodes}, {matrix.shape[0]})")
    sigma2 = Fraction(m.sigma2)
    if sigma2 <= 0:
        raise ValueError(f"query {m.name!r}: sigma2 must be positive")
    return QueryMeasurement(m.name, matrix, noisy.astype(np.float64), sigma2)


def _clean_invariant(inv: QueryInvariant, n_nodes: int, n_cells: int) -> QueryInvariant:
    matrix = _clean_matrix(inv.name, inv.matrix, n_cells)
    values = np.asarray(inv.values)
    if values.shape != (n_nodes, matrix.shape[0]) or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"invariant {inv.name!r}: values must be integers of shape ({n_nodes}, {matrix.shape[0]})")
    return QueryInvariant(inv.name, matrix, values.astype(np.int64))


def _clean_bound(bound: QueryBound, n_nodes: int, n_cells: int) -> QueryBound:
    matrix = _clean_matrix(bound.name, bound.matrix, n_cells)
    lower, upper = np.asarray(bound.lower), np.asarray(bound.upper)
    shape = (n_nodes, matrix.shape[0])
    for values in (lower, upper):
        if values.shape != shape or not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"bound {bound.name!r}: lower and upper must be integers of shape {shape}")
    return QueryBound(bound.name, matrix, lower.astype(np.int64), upper.astype(np.int64))
