"""Persons and the units they live in, reconciled so that they agree (``[[units.persons_per_unit]]``, docs/units.md):
step 1, the persons within the bounds the units' invariants imply; step 2, the units within the bounds the published
persons imply.  Every bound is computed from published values, so both remain post-processing (Thm 19.25): no
privacy cost.  Data that break a rule are refused (``rules_broken``): no table could keep them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.config.persons_per_unit import rules_matrix
from censusdp.pipeline.config.schema import TOTAL, Schema
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.release.run import Release, UniverseRun, stage_output
from censusdp.pipeline.release.support import structural_zero_mask
from censusdp.postprocess import UNBOUNDED, QueryBound

PERSONS_BOUND = "persons per unit"  # the bound's name in reconciliation errors and reports


@dataclass(frozen=True)
class LevelRules:
    """The rules of one level, compiled against both schemas: public."""

    names: tuple[str, ...]
    persons: sp.csr_matrix  # (rules, persons' cells)
    units: sp.csr_matrix  # (rules, units' cells)
    min_persons: np.ndarray  # (rules,) int64
    max_persons: np.ndarray  # (rules,) int64
    covers_all: bool  # the rules' persons cells are every persons cell that is not a structural zero

    def persons_answers(self, counts: sp.spmatrix | np.ndarray) -> np.ndarray:
        """(nodes, rules) int64: each node's persons in each rule's cells."""
        return _answers(self.persons, counts)

    def units_answers(self, counts: sp.spmatrix | np.ndarray) -> np.ndarray:
        """(nodes, rules) int64: each node's units in each rule's cells."""
        return _answers(self.units, counts)


def _answers(matrix: sp.csr_matrix, counts: sp.spmatrix | np.ndarray) -> np.ndarray:
    return np.asarray(sp.csr_matrix(counts, dtype=np.int64) @ matrix.T.astype(np.int64).toarray(), dtype=np.int64)


def level_rules(config: ReleaseConfig, level: str | None, persons_zeros: np.ndarray | None) -> LevelRules | None:
    """The rules that hold at ``level`` (every rule: None), or None when there are none (or no units universe)."""
    if config.units is None:
        return None
    rules = [r for r in config.persons_per_unit if level is None or level in r.levels]
    if not rules:
        return None
    persons = rules_matrix(config.schema, [r.persons for r in rules])
    covered = (np.asarray(persons.sum(axis=0)).ravel() > 0) | (False if persons_zeros is None else persons_zeros)
    units = rules_matrix(config.units.schema, [r.units for r in rules])
    return LevelRules(tuple(r.name for r in rules), persons, units,
                      np.array([r.min_persons for r in rules], dtype=np.int64),
                      np.array([r.max_persons for r in rules], dtype=np.int64), bool(np.all(covered)))


NODES_AT_ONCE = 1 << 16  # nodes whose invariants are compared with the rules at a time


def units_range(rules: LevelRules, schema: Schema, zeros: np.ndarray | None,
                invariants: Sequence[tuple[str, np.ndarray]], n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper), each (nodes, rules) int64: what the units' invariants say of each rule's units.  An invariant
    cell holding every cell of the rule's units bounds them above (the housing units bound the occupied ones;
    ``UNBOUNDED`` where none does), one whose open cells are all the rule's bounds them below (a facility count)."""
    r = rules.units.shape[0]
    lower = np.zeros((n_nodes, r), dtype=np.int64)
    upper = np.full((n_nodes, r), UNBOUNDED, dtype=np.int64)
    wanted = rules.units.toarray() > 0  # (rules, cells)
    open_cells = ~zeros if zeros is not None else np.ones(schema.n_cells, dtype=bool)
    for name, values in invariants:
        cells = schema.query_matrix(schema.parse_query(name)).toarray() > 0  # (query cells, cells)
        holds = [np.all(cells >= wanted[i], axis=1) for i in range(r)]
        within = [np.all(~(cells & open_cells) | wanted[i], axis=1) & (cells & open_cells).any(axis=1)
                  for i in range(r)]
        for start in range(0, n_nodes, NODES_AT_ONCE):  # the temporaries of a nation's blocks, bounded
            part = np.asarray(values[start:start + NODES_AT_ONCE], dtype=np.int64)
            rows = slice(start, start + part.shape[0])
            for i in range(r):
                np.minimum(upper[rows, i], part[:, holds[i]].min(axis=1, initial=UNBOUNDED), out=upper[rows, i])
                np.maximum(lower[rows, i], part[:, within[i]].max(axis=1, initial=0), out=lower[rows, i])
    return lower, upper


def persons_bound(rules: LevelRules, units_lower: np.ndarray, units_upper: np.ndarray,
                  total: np.ndarray | None) -> QueryBound:
    """The persons' bounds of step 1, ``min_i lo(U_i) <= P_i <= max_i hi(U_i)``, tightened where the persons' total
    is invariant (``total``, (nodes,), or None) as production's ``hhgq_total_lb`` / ``hhgq_total_ub``."""
    lower = rules.min_persons * units_lower
    unbounded = units_upper >= UNBOUNDED
    upper = np.where(unbounded, UNBOUNDED, rules.max_persons * np.where(unbounded, 0, units_upper))
    if total is not None and rules.covers_all:
        total = np.asarray(total, dtype=np.int64).reshape(-1, 1)
        others_lower = lower.sum(axis=1, keepdims=True) - lower
        others_upper = np.where(unbounded.any(axis=1, keepdims=True), UNBOUNDED,
                                np.minimum(upper, UNBOUNDED).sum(axis=1, keepdims=True) - upper)
        lower, upper = (np.maximum(lower, total - others_upper),
                        np.minimum(upper, np.maximum(total - others_lower, 0)))
    return QueryBound(PERSONS_BOUND, rules.persons, np.maximum(lower, 0), upper)


@dataclass(frozen=True)
class LevelBounds:
    """A level's bounds on one universe's rule answers (nodes, rules), handed to its chunks' tasks."""

    matrix: sp.csr_matrix
    lower: np.ndarray
    upper: np.ndarray

    def chunk(self, start: int, stop: int) -> QueryBound:
        return QueryBound(PERSONS_BOUND, self.matrix, self.lower[start:stop], self.upper[start:stop])


def units_level_bounds(config: ReleaseConfig, rules: LevelRules, answers: np.ndarray, block_lower: np.ndarray,
                       block_upper: np.ndarray, tree: GeoTree) -> dict[int, LevelBounds]:
    """Step 2 for every level: each block's units bounds (its published persons, the units' invariants) summed up the
    tree, so a parent's value can be shared among its children (a node's own ``ceil(P / max)`` is superadditive).
    ``block_lower`` and ``block_upper`` (int64) are overwritten."""
    # in place, into ``block_lower`` and ``block_upper``: a nation's blocks times the rules, several times over,
    # was the driver's peak at its block level
    ceil = np.negative(answers.astype(np.int64, copy=False))
    np.floor_divide(ceil, rules.max_persons, out=ceil)
    np.negative(ceil, out=ceil)
    lower = np.maximum(block_lower, ceil, out=block_lower)  # ceil(P / max)
    del ceil
    floor = np.floor_divide(answers, np.maximum(rules.min_persons, 1))
    floor[:, rules.min_persons <= 0] = UNBOUNDED
    upper = np.minimum(block_upper, floor, out=block_upper)  # floor(P / min), UNBOUNDED where neither bounds it
    del floor
    out: dict[int, LevelBounds] = {}
    for level in range(len(config.levels) - 1, -1, -1):
        active = [i for i, name in enumerate(rules.names)
                  if config.levels[level].name in next(r.levels for r in config.persons_per_unit if r.name == name)]
        if len(active) == len(rules.names):
            out[level] = LevelBounds(rules.units, lower, upper)
        elif active:
            out[level] = LevelBounds(rules.units[active], lower[:, active], upper[:, active])
        if level > 0:
            unbounded = tree.aggregate_up(level, upper >= UNBOUNDED)  # a sum of booleans: whether any child is
            lower = tree.aggregate_up(level, lower)
            # never in place: ``out`` may hold this very array
            upper = np.where(unbounded, UNBOUNDED, tree.aggregate_up(level, np.where(upper >= UNBOUNDED, 0, upper)))
    return out


# --- the driver's side: the bounds of a run's levels, from what its universes have published or measured ---------


def persons_bounds_of(release: Release, level: int) -> LevelBounds | None:
    """Step 1 for a level of the persons: their bounds from the units' invariants (None: no rule)."""
    run, units = release.persons, stage_output(release.units, "the units universe")
    tree = stage_output(run.tree, "the geography")
    rules = level_rules(run.config, run.config.levels[level].name, structural_zero_mask(run.config))
    if rules is None:
        return None
    total = next((i.values[:, 0] for i in run.invariants.get(level, []) if i.name == TOTAL), None)
    lower, upper = units_range(rules, units.schema, structural_zero_mask(units.config),
                               [(i.name, i.values) for i in units.invariants.get(level, [])], tree.n_nodes(level))
    bound = persons_bound(rules, lower, upper, total)
    return LevelBounds(bound.matrix, bound.lower, bound.upper)


def units_bounds_of(release: Release, answers: list[np.ndarray]) -> dict[int, LevelBounds]:
    """Step 2 for every level: the units' bounds from the persons' published blocks (``RULE_ANSWERS``, in order;
    ``answers`` is emptied)."""
    run, units = release.persons, stage_output(release.units, "the units universe")
    tree = stage_output(run.tree, "the geography")
    rules = level_rules(run.config, None, structural_zero_mask(run.config))
    if rules is None or not answers:
        return {}
    lowest = tree.depth - 1
    lower, upper = units_range(rules, units.schema, structural_zero_mask(units.config),
                               [(i.name, i.values) for i in units.invariants.get(lowest, [])], tree.n_nodes(lowest))
    joined = np.concatenate(answers)
    answers.clear()  # the driver holds the blocks' answers once
    return units_level_bounds(run.config, rules, joined, lower, upper, tree)


def record_limits(release: Release, universe: UniverseRun) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray] | None:
    """The persons' bounds every block's records must keep (from the units' invariants), checked as groups measure."""
    if universe is not release.persons or release.units is None:
        return None
    bounds = persons_bounds_of(release, len(release.config.levels) - 1)
    return (bounds.matrix, bounds.lower, bounds.upper) if bounds is not None else None


def check_same_chunks(release: Release, level: int) -> None:
    """The units' lowest tasks read their persons by chunk index: refuse measurements chunked otherwise."""
    run, units = release.persons, stage_output(release.units, "the units universe")
    if [c[:2] for c in run.chunk_plan[level]] != [c[:2] for c in units.chunk_plan[level]]:
        raise CensusDPError("the units' measurements are not in the persons' chunks (measured by an earlier "
                            "version): release again")
