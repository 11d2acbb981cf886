"""A budget designed for the areas users publish (``censusdp budget optimize CONFIG --areas plan.csv``).

The variance of any area's GLS estimate depends on the strategy, the tree and the area only, never on the data or
the noise (docs/areas.md), so the shares can be chosen before any release: this reads the configuration, the
geography file and the plans (public), no microdata, and spends no budget.  Scaling a query's zCDP budget ρ_q by c
scales its noise variance by 1/c (Gaussian, Thm 19.37(iii); the Laplace's variance too, its scale going as
1/sqrt(ρ_q)) and leaves the total ρ, hence the guarantee, unchanged when the shares still sum to 1.

The areas' mean variance of the total and every level's mean variance are matrix-fractional functions of the
precisions, convex in the shares, so the problem (minimise the first under caps on the others, the shares on the
simplex) is convex: SLSQP from the configured shares finds its optimum.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from censusdp.geography.spine import unit_lookup
from censusdp.geography.tree import GeoTree
from censusdp.pipeline.budget.allocation import QueryAllocation, allocate, allocations_of, query_allocation
from censusdp.pipeline.budget.optimize import LEVEL_DENOMINATOR, QUERY_DENOMINATOR, round_shares
from censusdp.pipeline.config.model import Accountant, Mechanism, ReleaseConfig, SummaryTables
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.assignments import Assignment, read_assignment
from censusdp.pipeline.io.summary_tables import table_variables, variable_matrix
from censusdp.pipeline.release.expected_errors import ExpectedErrorsJob, design_errors, design_plans, main_variables
from censusdp.postprocess.gls_areas import PreparedPlans

FLOOR = 1e-3  # no level or query share below this in the search: every level keeps measuring
EXACT = 1e-6  # of the largest error: one below this is an invariant's zero, up to the solver's rounding
HEADROOM = 0.995  # the search caps growth a little under the limit, so the rounded shares still keep it
STEPS = (1.0, 0.99, 0.95, 0.9, 0.75, 0.5, 0.0)  # of the way from the configuration's shares to the optimum
Key = tuple[str, str]  # (level, query)
log = logging.getLogger("censusdp")


@dataclass(frozen=True)
class Design:
    """What the expected errors depend on: the tree, the strategy's queries with their budget fractions, the
    invariants, the report's variables and the user's plans.  Public values only."""

    config: ReleaseConfig
    tree: GeoTree
    level_shares: dict[str, Fraction]
    query_shares: dict[Key, Fraction]  # in strategy order, level by level
    allocations: tuple[QueryAllocation, ...]  # the configuration's, as allocate gives them (the job's order)
    configured: ExpectedErrorsJob  # the expected errors' job at the configured shares
    variables: tuple[str, ...]  # every variable whose expected errors are capped
    weights: np.ndarray  # (n_vars, C); row 0 is the total
    shown: int  # the leading variables the command prints (the CSV has them all)
    plans: tuple[Assignment, ...]

    def __repr__(self) -> str:
        return f"Design(levels={[lv.name for lv in self.config.levels]}, plans={len(self.plans)})"


def report_variables(config: ReleaseConfig) -> tuple[tuple[str, ...], np.ndarray, int]:
    """The variables whose expected errors are capped, and how many of them lead the printed table: the total
    first, then with the pl94 tables the report's main P.L. counts and every other P.L. 94-171 variable (P1-P5),
    else every attribute's one-way cells (all printed)."""
    schema = config.schema
    total = schema.query_matrix(schema.parse_query("total")).toarray().astype(float)
    if SummaryTables.PL94 in config.output.tables:
        main, _ = main_variables(schema)
        others = [v for v in table_variables(SummaryTables.PL94) if v.name not in main]
        variables = [v for name in main if name != "P1_001N"
                     for v in table_variables(SummaryTables.PL94) if v.name == name] + others
        weights = variable_matrix(schema, variables).T.toarray().astype(float)
        return ("total", *(v.name for v in variables)), np.vstack([total, weights]), len(main)
    names, blocks = ["total"], [total]
    for attribute in schema.names:
        query = schema.parse_query(attribute)
        names += [f"{attribute}={label}" for label in schema.cell_labels(query)[0]]
        blocks.append(schema.query_matrix(query).toarray().astype(float))
    return tuple(names), np.vstack(blocks), len(names)


def design_of(config: ReleaseConfig, tree: GeoTree, plan_paths: Sequence[Path]) -> Design:
    """The design of ``config`` on ``tree`` with the plans (block-assignment files) read against its units."""
    if config.budget.accountant == Accountant.PLD:  # its ρ is solved from the split: other shares, another ρ
        raise CensusDPError("budget optimize --areas: the configuration's rho is solved from budget.epsilon by the "
                            "pld accountant, so other shares would change it; give budget.rho (censusdp budget "
                            "shows the rho in use)")
    units = unit_lookup(config.levels, tree.geoids[-1])
    plans = tuple(read_assignment(Path(path), units) for path in plan_paths)
    for plan in plans:
        if plan.n_areas == 0:
            raise CensusDPError(f"{plan.path}: names no area")
    names, weights, shown = report_variables(config)
    query_shares = {(lv.name, e.query.name): e.share for lv in config.levels for e in config.strategy[lv.name]}
    allocations = allocate(config)
    schema = config.schema
    configured = ExpectedErrorsJob(
        schema, tuple(tree.parent), tuple(tree.n_nodes(i) for i in range(tree.depth)),
        tuple(tuple((schema.parse_query(a.query), a.sigma2) for a in allocations_of(allocations, lv.name))
              for lv in config.levels),
        {i: tuple(inv.query.name for inv in config.invariants if lv.name in inv.levels)
         for i, lv in enumerate(config.levels)},
        tuple(lv.name for lv in config.levels), str(config.reconciliation_method))
    return Design(config, tree, dict(config.budget.level_shares), query_shares, allocations, configured, names,
                  weights, shown, plans)


def design_job(design: Design, level_shares: dict[str, float], query_shares: dict[Key, float]
               ) -> ExpectedErrorsJob:
    """The expected errors' job with the shares given: each query's variance is the configuration's scaled by its
    old over its new fraction of ρ."""
    budget = design.config.budget
    queries = []
    for level, configured in zip(design.config.levels, design.configured.queries, strict=True):
        row = []
        for a, (query, sigma2) in zip(allocations_of(design.allocations, level.name), configured, strict=True):
            key = (level.name, a.query)
            old = float(design.level_shares[level.name] * design.query_shares[key])
            new = level_shares[level.name] * query_shares[key]
            if a.mechanism == Mechanism.LAPLACE:  # its variance follows the rounded scale, not 1/ρ exactly
                rho = Fraction(float(budget.rho) * new).limit_denominator(10**15)
                sigma2 = query_allocation(level.name, a.query, rho, a.mechanism, budget.sensitivity1,
                                          budget.sensitivity2_squared).sigma2
                row.append((query, float(sigma2)))
            else:  # σ² = Δ₂²/(2ρ_q): exactly the configuration's scaled
                row.append((query, float(sigma2) * old / new))
        queries.append(tuple(row))
    return replace(design.configured, queries=tuple(queries))


def errors_at(design: Design, level_shares: dict[str, float], query_shares: dict[Key, float],
              prepared: PreparedPlans | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Root mean square standard errors, (levels, vars) and (plans, vars), with the shares given (``prepared``: the
    plans walked once, ``design_plans``, for many designs)."""
    job = design_job(design, level_shares, query_shares)
    try:
        return design_errors(job, design.weights,
                             prepared if prepared is not None else [(p.leaf_area, p.n_areas) for p in design.plans])
    except ValueError as error:  # public: a design whose GLS is not defined
        raise CensusDPError(f"the expected errors are not defined for this design: {error}") from None


def exact_zeros(errors: np.ndarray) -> np.ndarray:
    """1 where an expected error is an invariant's zero (up to rounding, relative to the largest), else 0."""
    return (errors <= EXACT * max(float(errors.max(initial=0.0)), 1e-300)).astype(np.int8)


@dataclass(frozen=True)
class Tuned:
    """The rounded shares and the expected errors before and after, per level and per plan (rows: variables)."""

    level_shares: dict[str, Fraction]
    query_shares: dict[Key, Fraction]
    levels_before: np.ndarray
    levels_after: np.ndarray
    plans_before: np.ndarray
    plans_after: np.ndarray
    evaluations: int


def tune(design: Design, max_growth: dict[str, float], with_queries: bool = False) -> Tuned:
    """Shares minimising the plans' mean variance of the total (each plan relative to its own), with no level's
    expected error of any variable above ``max_growth[level]`` times the configuration's."""
    levels = [lv.name for lv in design.config.levels]
    base_levels = {lv: float(s) for lv, s in design.level_shares.items()}
    base_queries = {k: float(s) for k, s in design.query_shares.items()}
    prepared = design_plans(design.configured, [(p.leaf_area, p.n_areas) for p in design.plans])
    before_levels, before_plans = errors_at(design, base_levels, base_queries, prepared)
    caps = np.array([[max_growth[lv] * HEADROOM] for lv in levels]) * before_levels
    capped = exact_zeros(before_levels) == 0  # an invariant's zero stays zero whatever the shares
    reference = np.maximum(before_plans[:, 0] ** 2, 1e-12)
    per_level = {lv: sum(1 for k in design.query_shares if k[0] == lv) for lv in levels}
    free = [k for k in design.query_shares if with_queries and per_level[k[0]] > 1]

    def shares(x: np.ndarray) -> tuple[dict[str, float], dict[Key, float]]:
        lv = dict(zip(levels, x[:len(levels)], strict=True))
        qs = dict(base_queries)
        qs.update(zip(free, x[len(levels):], strict=True))
        return lv, qs

    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def evaluate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(x, dtype=float).tobytes()
        if key not in cache:
            cache[key] = errors_at(design, *shares(np.maximum(x, FLOOR / 10)), prepared)
        return cache[key]

    def objective(x: np.ndarray) -> float:
        return float(np.mean(evaluate(x)[1][:, 0] ** 2 / reference))

    def growth(x: np.ndarray) -> np.ndarray:  # >= 0 where a level's error is within its cap (log scale)
        errors = evaluate(x)[0]
        return np.log(caps[capped]) - np.log(np.maximum(errors[capped], 1e-12))

    constraints = [{"type": "ineq", "fun": growth},
                   {"type": "eq", "fun": lambda x: float(np.sum(x[:len(levels)]) - 1.0)}]
    for lv in dict.fromkeys(k[0] for k in free):
        at = [len(levels) + i for i, k in enumerate(free) if k[0] == lv]
        constraints.append({"type": "eq", "fun": lambda x, at=at: float(np.sum(x[at]) - 1.0)})
    start = np.array([base_levels[lv] for lv in levels] + [base_queries[k] for k in free])
    found = minimize(objective, start, method="SLSQP", bounds=[(FLOOR, 1.0)] * len(start), constraints=constraints,
                     options={"maxiter": 60, "ftol": 1e-4, "eps": 1e-4})
    log.info("budget optimize: %s after %d designs", found.message, len(cache))
    within = bool(np.all(growth(found.x) >= np.log(HEADROOM)))  # the search's caps, up to the true limits
    log.info("budget optimize: objective %.4g -> %.4g, within the limits: %s", objective(start), objective(found.x),
             within)
    best = found.x if within and objective(found.x) < objective(start) else start
    limits = np.array([[max_growth[lv]] for lv in levels]) * before_levels
    steps = STEPS if best is not start else (0.0,)
    for step in steps:  # rounding moves the shares a little: back off towards the configuration's until it holds
        rounded_levels, rounded_queries = (_rounded(design, shares(start + step * (best - start)), free) if step else
                                           (dict(design.level_shares), dict(design.query_shares)))
        after_levels, after_plans = errors_at(design, {k: float(v) for k, v in rounded_levels.items()},
                                              {k: float(v) for k, v in rounded_queries.items()}, prepared)
        improves = np.mean(after_plans[:, 0] ** 2 / reference) < objective(start) or step == 0
        if improves and np.all(after_levels[capped] <= limits[capped]):
            break
    return Tuned(rounded_levels, rounded_queries, before_levels, after_levels, before_plans, after_plans, len(cache))


def _rounded(design: Design, values: tuple[dict[str, float], dict[Key, float]], free: Sequence[Key]
             ) -> tuple[dict[str, Fraction], dict[Key, Fraction]]:
    """Exact shares near ``values``: the level shares, and the free query shares level by level."""
    level_values, query_values = values
    rounded_queries = dict(design.query_shares)
    for lv in dict.fromkeys(k[0] for k in free):
        rounded = round_shares({k[1]: query_values[k] for k in free if k[0] == lv}, QUERY_DENOMINATOR)
        rounded_queries.update({(lv, q): s for q, s in rounded.items()})
    return round_shares(level_values, LEVEL_DENOMINATOR), rounded_queries


def growth_limits(specs: Sequence[str], levels: Sequence[str], default: float) -> dict[str, float]:
    """``--max-growth``: ``F`` for every level, or ``LEVEL=F`` for one (later ones win)."""
    limits = dict.fromkeys(levels, default)
    for spec in specs:
        name, _, value = spec.rpartition("=")
        try:
            factor = float(value)
        except ValueError:
            raise CensusDPError(f"--max-growth: {spec!r} is not F or LEVEL=F") from None
        if not factor >= 1 or factor == float("inf"):
            raise CensusDPError(f"--max-growth: {spec!r}: the factor must be a finite number >= 1")
        if name and name not in limits:
            raise CensusDPError(f"--max-growth: {name!r} is not a level ({', '.join(levels)})")
        limits.update({name: factor} if name else dict.fromkeys(levels, factor))
    return limits
