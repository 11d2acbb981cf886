"""The one public call: reconcile the noisy measurements of one geography level into an integer table, top-down
(docs/reconciliation.md, "Inside one level").  Only noisy measurements and public constraints come in, so the output
is as private as the measurements (Thm 19.25).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess import fast_path, first_order
from censusdp.postprocess.checks import check_inputs, check_table
from censusdp.postprocess.layout import (
    Batch,
    Blocks,
    bound_rows,
    build_batch,
    invariant_rows,
    plan_batches,
    plan_blocks,
    restrict_rows,
)
from censusdp.postprocess.least_squares import (
    ABS_TOLERANCE,
    Equalities,
    Inequalities,
    Solution,
    SolverPath,
    Term,
    check_solver,
    resolve_solvers,
    solve,
    violation,
)
from censusdp.postprocess.passes import RoundingMarginal, check_marginal, fix_marginals, solve_in_passes
from censusdp.postprocess.problem import (
    Inputs,
    LevelResult,
    QueryBound,
    QueryInvariant,
    QueryMeasurement,
    ReconciliationError,
    validate,
)
from censusdp.postprocess.rounding import round_batch
from censusdp.postprocess.ties import TieSource, check_source


def reconcile_level(
    measurements: Sequence[QueryMeasurement],
    *,
    n_cells: int,
    parent_counts: np.ndarray | None,
    parent_index: np.ndarray | None,
    invariants: Sequence[QueryInvariant] = (),
    structural_zeros: np.ndarray | None = None,
    solver: str = SolverPath.AUTO,
    rng: TieSource | None = None,
    passes: Sequence[Sequence[str]] = (),
    tolerance: float = 0.1,
    rounding: Sequence[RoundingMarginal] = (),
    bounds: Sequence[QueryBound] = (),
) -> LevelResult:
    """Non-negative, consistent integer table (n_nodes, n_cells) of one level, with a public report.

    ``parent_counts``/``parent_index`` are None at the root (no parent constraint); below it, ``parent_index[node]``
    is the node's row of ``parent_counts`` (rows no node points to are ignored: a level can go in chunks of parents).

    ``solver``: a ``SolverPath`` (``"auto"`` takes each where it applies: ``fast_path.applies``,
    ``first_order.applies``; the others force a path, ``ValueError`` where it does not apply) or cvxpy solver names,
    comma-separated, tried in order; ``report["path"]`` says which path ran.  ``rng`` (e.g. the run's
    ``RandomSource``) breaks rounding ties at random.

    ``passes`` orders the measurements' names into least-squares passes, each keeping the earlier passes' answers
    within ``tolerance`` persons (cvxpy only); ``rounding`` lists marginals rounded and fixed, in order, before the
    cells (not with the closed forms, which round cell by cell): ``postprocess.passes``.  ``bounds``: public bounds on
    node marginals; an upper bound of 0 removes those cells of that node, the others constrain the least squares
    and the rounding where they can bind (a first-order or greedy point that keeps them is optimal under them too).

    ``ValueError`` for malformed arguments; ``ReconciliationError`` (the run must fail) when the constraints are
    inconsistent, every solver fails, or the rounded table breaks a constraint."""
    started = time.perf_counter()
    inputs = validate(measurements, invariants, n_cells=n_cells, parent_counts=parent_counts, parent_index=parent_index,
                      structural_zeros=structural_zeros, bounds=bounds)
    rng = check_source(rng)
    check_solver(solver)
    rounding = tuple(check_marginal(m, n_cells) for m in rounding)
    multi_pass = len(passes) > 1
    if tolerance < 0:
        raise ValueError("tolerance must be >= 0")
    if solver in (SolverPath.FAST, SolverPath.FIRST_ORDER) and (multi_pass or rounding):
        raise ValueError(f"solver={solver!r} does not run several passes or round marginals first; use auto")
    fast = solver == SolverPath.FAST or (solver == SolverPath.AUTO and not multi_pass and not rounding
                                         and not inputs.bounds and fast_path.applies(inputs))
    if solver == SolverPath.FAST and (inputs.bounds or not fast_path.applies(inputs)):
        raise ValueError("solver='fast' needs detailed-only measurements (identity matrices), no invariants and no "
                         "bounds")
    first = solver == SolverPath.FIRST_ORDER or (solver == SolverPath.AUTO and not fast and not multi_pass
                                                 and first_order.applies(inputs))
    if solver == SolverPath.FIRST_ORDER and not first_order.applies(inputs):
        raise ValueError("solver='first_order' needs a parent, a detailed measurement and no invariants")
    solvers = () if fast else resolve_solvers(SolverPath.AUTO if first else solver)
    check_inputs(inputs)
    blocks = plan_blocks(inputs)
    counts = np.zeros((inputs.n_nodes, inputs.n_cells), dtype=np.int64)
    report: dict = {
        "nodes": inputs.n_nodes,
        "cells": inputs.n_cells,
        "root": inputs.parent_counts is None,
        "blocks": int(blocks.n_free.size),
        "blocks_only_child": int(np.count_nonzero(np.diff(blocks.start) == 1)) if blocks.parent is not None else 0,
        "blocks_empty": int(np.count_nonzero(blocks.n_free == 0)),
        "path": SolverPath.FAST if fast else SolverPath.FIRST_ORDER if first else SolverPath.CVXPY,
        "tie_break": "random" if rng is not None else "index",
        "l2_passes": max(1, len(passes)),
        "rounding_marginals": [m.name for m in rounding],
    }
    if fast:
        tick = time.perf_counter()
        report.update(fast_path.reconcile_fast(inputs, blocks, counts, rng))
        # the fast path rounds inside its vectorised loop: its rounding time is counted in seconds_solve
        report.update(problems=0, solvers=["closed_form"], solver_status={}, fallbacks=0,
                      rounding={"largest_remainder" if blocks.parent is not None else "nearest": 1},
                      max_invariant_violation=0.0, min_value_before_rounding=0.0,
                      seconds_solve=time.perf_counter() - tick, seconds_rounding=0.0)
    else:
        if blocks.parent is not None and inputs.parent_counts is not None:  # an only child equals its parent
            only = np.flatnonzero(np.diff(blocks.start) == 1)
            counts[blocks.order[blocks.start[only]]] = inputs.parent_counts[blocks.parent[only]]
        report.update(_reconcile_general(inputs, blocks, counts, solvers, rng, first, tuple(tuple(p) for p in passes),
                                         tolerance, rounding))
    check_table(inputs, counts)
    report["seconds_total"] = time.perf_counter() - started
    return LevelResult(counts=counts, report=report)


def _reconcile_general(inputs: Inputs, blocks: Blocks, counts: np.ndarray, solvers: tuple[str, ...],
                       rng: TieSource | None, first: bool, passes: tuple[tuple[str, ...], ...],
                       tolerance: float, marginals: tuple[RoundingMarginal, ...]) -> dict:
    """Least squares per batch of blocks, then rounding (marginals first: ``postprocess.passes``); fills ``counts``."""
    statuses: Counter[str] = Counter()
    rounding: Counter[str] = Counter()
    worst = {"sum": 0.0, "invariant": 0.0, "min": np.inf}
    seconds = {"solve": 0.0, "rounding": 0.0}
    batches = plan_batches(blocks, inputs.n_cells)
    variables = fallbacks = 0
    for block_ids in batches:
        batch, inv_matrix, inv_rhs, solution, limits = solve_batch(inputs, blocks, block_ids, solvers, first, passes,
                                                                   tolerance)
        statuses.update(f"{name}:{status}" for name, status in solution.attempts)
        fallbacks += len(solution.attempts) > 1
        seconds["solve"] += solution.seconds
        if solution.x is None:
            tried = ", ".join(f"{name}={status}" for name, status in solution.attempts)
            raise ReconciliationError(f"least squares failed for a batch of {batch.n_blocks} blocks, "
                                      f"{batch.nodes.size} nodes and {batch.n_vars} variables: {tried}")
        worst["sum"] = max(worst["sum"], solution.violations[0])
        worst["invariant"] = max(worst["invariant"], solution.violations[1])
        worst["min"] = min(worst["min"], solution.min_value)
        tick = time.perf_counter()
        rounded = _round_marginals_first(batch, solution.x, inv_matrix, inv_rhs, marginals, rng, limits, rounding)
        values, method = rounded or round_batch(batch, solution.x, inv_matrix, inv_rhs, rng, limits)
        if marginals and rounded is None:
            method += "_marginals_released"
        seconds["rounding"] += time.perf_counter() - tick
        rounding[method] += 1
        variables += batch.n_vars
        counts[batch.nodes[batch.var_node], batch.var_cell] = values
    return {
        "problems": len(batches),
        "variables": variables,
        "solvers": ([SolverPath.FIRST_ORDER.value] if first else []) + list(solvers),
        # "first_order" when it was tried on some batch (solver_status says on which), else cvxpy alone ran
        "path": (SolverPath.FIRST_ORDER if any(key.startswith(f"{SolverPath.FIRST_ORDER}:") for key in statuses)
                 else SolverPath.CVXPY),
        "solver_status": dict(sorted(statuses.items())),
        "fallbacks": fallbacks,
        "rounding": dict(sorted(rounding.items())),
        "max_sum_violation": worst["sum"],
        "max_invariant_violation": worst["invariant"],
        "min_value_before_rounding": worst["min"] if np.isfinite(worst["min"]) else None,
        "seconds_solve": seconds["solve"],
        "seconds_rounding": seconds["rounding"],
    }


def _round_marginals_first(batch: Batch, x: np.ndarray, inv_matrix: sp.csr_matrix, inv_rhs: np.ndarray,
                           marginals: Sequence[RoundingMarginal], rng: TieSource | None, limits: Inequalities,
                           counts: Counter[str]) -> tuple[np.ndarray, str] | None:
    """The cells rounded under the marginals rounded first, or None when there are none or they leave the cells no
    integer point.  The marginals are rounded over their own cells, blind to which cells the bounds and zeros leave
    each child (children that only some of the parent's cells may fill can all be rounded up); the cells alone
    always have an integer point where the fit is feasible (integral parents and bounds: a flow problem)."""
    if not marginals:
        return None
    try:
        fixed_matrix, fixed_rhs, methods = fix_marginals(batch, x, inv_matrix, inv_rhs, marginals, rng)
        rounded = round_batch(batch, x, fixed_matrix, fixed_rhs, rng, limits)
    except ReconciliationError:
        return None
    counts.update(f"{m.name}:{method}" for m, method in zip(marginals, methods, strict=True))
    return rounded


def solve_batch(inputs: Inputs, blocks: Blocks, block_ids: np.ndarray, solvers: tuple[str, ...], first: bool = False,
                passes: tuple[tuple[str, ...], ...] = (), tolerance: float = 0.1,
                ) -> tuple[Batch, sp.csr_matrix, np.ndarray, Solution, Inequalities]:
    """Least squares of a stack of blocks; also returns the batch, its invariant rows and its bounds that can bind,
    for the rounding.  ``first``: try ``postprocess.first_order`` before the cvxpy ``solvers``."""
    batch = build_batch(inputs, blocks, block_ids)
    inv_matrix, inv_rhs, redundant = invariant_rows(inputs, batch)
    limits = bound_rows(inputs, batch)
    equalities = [Equalities(batch.sum_matrix, batch.sum_rhs, np.ones(batch.sum_rhs.size, dtype=bool)),
                  Equalities(inv_matrix, inv_rhs, ~redundant)]
    named = _terms(inputs, batch)
    terms = [term for _, term in named]
    if len(passes) > 1:
        solution = solve_in_passes(named, passes, tolerance, equalities, batch.n_vars, solvers, limits)
    elif first and terms:
        x, info = first_order.solve(terms, batch)
        # without the bounds; its point is kept where it keeps them, as it is then their problem's optimum too
        if x is not None and limits.excess(x) <= ABS_TOLERANCE:
            violations = tuple(violation(eq, x) for eq in equalities)
            minimum = float(x.min()) if x.size else 0.0
            solution = Solution(x, [("first_order", "optimal")], violations, minimum, info["seconds"])
        else:
            solution = solve(terms, equalities, batch.n_vars, solvers, [limits])
            solution.attempts.insert(0, ("first_order", info.get("status", "limit") if x is None else "bounds"))
            solution.seconds += info["seconds"]
    else:
        solution = solve(terms, equalities, batch.n_vars, solvers, [limits])
    return batch, inv_matrix, inv_rhs, solution, limits


def _terms(inputs: Inputs, batch: Batch) -> list[tuple[str, Term]]:
    terms = []
    for m in inputs.measurements:
        matrix, rows = restrict_rows(m.matrix, batch)
        if rows.size:
            node, cell = np.divmod(rows, m.matrix.shape[0])
            terms.append((m.name, Term(matrix, m.noisy[batch.nodes[node], cell], 1.0 / float(m.sigma2))))
    return terms
