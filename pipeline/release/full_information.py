"""Full-information reconciliation: every level is fitted to the tree's GLS estimates, not to its own measurements
(docs/reconciliation.md).  The exact GLS of the whole tree is streamed first (``postprocess.gls_stream``); each
level then fits the GLS estimate of every target query with weight 1/v, v the mean variance of its free cells.
A function of the noisy measurements, their public σ² and the published invariants: post-processing (Thm 19.25).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.config.reconciliation import ReconciliationMethod
from censusdp.pipeline.config.schema import DETAILED, TOTAL, Query, Schema
from censusdp.pipeline.io.gls_scratch import ScratchCubes
from censusdp.pipeline.io.measurements import ChunkLocation, read_chunk
from censusdp.pipeline.release.run import Release, UniverseRun, stage_output
from censusdp.pipeline.release.runner import DaskRunner, LocalRunner
from censusdp.pipeline.release.targets import (
    LevelTargets,
    LowestSumsJob,
    TargetTerm,
    lowest_children_sums,
    target_answers,
)
from censusdp.postprocess import QueryInvariant, QueryMeasurement
from censusdp.postprocess.gls import GlsInvariant, GlsLevel, GlsQuery, GlsResult, QuerySpec, solve_gls
from censusdp.postprocess.gls_stream import Reader, StreamedGls, StreamLevel, solve_gls_streamed
from censusdp.postprocess.gls_stream_chunk import LowestChunk

PINNED = 1e-9  # a GLS variance at or below this is an invariant's exact value (no weight: the constraint holds it)
GLS_SCRATCH = "gls_scratch"  # under the run's work_dir: the streamed GLS's intermediates, removed before publish

Measured = Sequence[tuple[Query, Fraction, np.ndarray]]  # (query, σ², noisy answers (n_nodes, q_cells))


def spec_of(schema: Schema, query: Query) -> QuerySpec:
    """A query as the GLS sees it: the axes it keeps, in its cell order, and the grouping of each recoded one."""
    factors = [schema.factor(a) for a in query.attributes]
    return QuerySpec(tuple(f.axis for f in factors), tuple(f.group_of for f in factors))


def gls_problem(schema: Schema, parents: Sequence[np.ndarray], measured: Sequence[Measured],
                invariants: Mapping[int, Sequence[QueryInvariant]]) -> list[GlsLevel]:
    """The GLS problem of a tree: every level's noisy measurements and its invariants (published exactly)."""
    levels = []
    for level, parent in enumerate(parents):
        queries = [(spec_of(schema, query), float(sigma2), values) for query, sigma2, values in measured[level]]
        fixed = [(spec_of(schema, schema.parse_query(i.name)), i.values) for i in invariants.get(level, [])]
        levels.append(GlsLevel(parent=parent, queries=[GlsQuery(s.axes, s2, v, s.groups) for s, s2, v in queries],
                               invariants=[GlsInvariant(s.axes, v, s.groups) for s, v in fixed]))
    return levels


def solve_tree(schema: Schema, parents: Sequence[np.ndarray], measured: Sequence[Measured],
               invariants: Mapping[int, Sequence[QueryInvariant]]) -> GlsResult:
    """The exact GLS of every level from its noisy measurements and invariants (``postprocess.gls``)."""
    return solve_gls(gls_problem(schema, parents, measured, invariants), schema.shape)


def target_weight(mean_variance: float) -> Fraction:
    """A target's σ² from the mean variance of its GLS estimate's free cells over the level.  A weight, not a
    budget: any positive value keeps this post-processing; rounded for a compact Fraction."""
    return max(Fraction(mean_variance).limit_denominator(1 << 40), Fraction(1, 1 << 40))


Allocated = Sequence[Sequence[tuple[Query, Fraction]]]  # per level, its measured queries and their σ²
Plan = Sequence[Sequence[tuple[int, int, ChunkLocation]]]  # per level, its chunks (start, stop, where)


def stream_problem(schema: Schema, parents: Sequence[np.ndarray], allocated: Allocated,
                   invariants: Mapping[int, Sequence[QueryInvariant]], plan: Plan, directory: Path
                   ) -> tuple[list[StreamLevel], Reader]:
    """A run's GLS problem as the engine streams it: each level's queries, invariants and chunks, and a chunk reader."""
    located = [{(start, stop): where for start, stop, where in chunks} for chunks in plan]

    def read(level: int, start: int, stop: int) -> tuple[list[np.ndarray], tuple[np.ndarray, ...]]:
        where = located[level][start, stop]
        shapes = [(stop - start, schema.query_cells(q)) for q, _ in allocated[level]]
        return (read_chunk(directory / where.file, where.row_group, shapes),
                tuple(i.values[start:stop] for i in invariants.get(level, [])))

    levels = [StreamLevel(parent=parents[level],
                          queries=[(spec_of(schema, q), float(s2)) for q, s2 in allocated[level]],
                          invariants=[spec_of(schema, schema.parse_query(i.name)) for i in invariants.get(level, [])],
                          chunks=[(start, stop) for start, stop, _ in plan[level]])
              for level in range(len(parents))]
    return levels, read


def estimate(release: Release, run: UniverseRun, runner: LocalRunner | DaskRunner | None = None) -> None:
    """Stage: the tree's GLS from the saved measurements, kept as every level's targets; its lowest level's up pass
    runs as jobs on ``runner``.  Nothing to do with ``level_by_level``."""
    config = run.config
    if config.reconciliation_method is not ReconciliationMethod.FULL_INFORMATION:
        return
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    discard_targets(run)
    schema = run.schema
    directory = run.measurements
    allocated = [[(schema.parse_query(a.query), a.sigma2) for a in run.level_allocations(level)]
                 for level in range(tree.depth)]
    plan = [run.chunk_plan[level] for level in range(tree.depth)]
    levels, read = stream_problem(schema, tree.parent, allocated, run.invariants, plan, directory)
    scratch = run.work_dir / GLS_SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)  # a resumed run's leftovers
    last = tree.depth - 1
    located = {(start, stop): where for start, stop, where in plan[last]}

    def lowest_sums(chunks: Iterator[LowestChunk]) -> Iterator[np.ndarray]:
        jobs = (LowestSumsJob(c, str(directory / located[c.start, c.stop].file), located[c.start, c.stop].row_group,
                              tuple((c.stop - c.start, schema.query_cells(q)) for q, _ in allocated[last]),
                              tuple(i.values[c.start:c.stop] for i in run.invariants.get(last, [])))
                for c in chunks)
        return runner.map(lowest_children_sums, jobs)

    store = ScratchCubes(scratch, schema.shape)
    stream = solve_gls_streamed(levels, schema.shape, read, store, lowest_sums if runner is not None else None)
    for level, terms in enumerate(tree_terms(config, stream, allocated)):
        run.targets[level] = LevelTargets(stream, level, schema.shape, terms, store)


def tree_terms(config: ReleaseConfig, stream: StreamedGls, allocated: Allocated) -> list[tuple[TargetTerm, ...]]:
    """Every level's targets: its measured queries, the queries its passes name, the total and the detailed cells,
    each weighted by the mean variance of its GLS estimate's free cells (none free: no target, the constraints hold
    it); at the lowest level, measured queries keep their own σ² (docs/reconciliation.md)."""
    schema, out = config.schema, []
    for level, spec in enumerate(config.levels):
        measured = {q.name: Fraction(s2) for q, s2 in allocated[level]}
        own = measured if level == len(config.levels) - 1 else {}
        passes = [name for group in config.level_passes(spec.name).l2 for name in group]
        terms = []
        for query in [schema.parse_query(n) for n in dict.fromkeys([*measured, *passes, TOTAL, DETAILED])]:
            query_spec = spec_of(schema, query)
            mean = stream.mean_variance(level, query_spec, PINNED)
            if mean is not None:
                terms.append(TargetTerm(query.name, query_spec, schema.query_matrix(query),
                                        own.get(query.name, target_weight(mean))))
        out.append(tuple(terms))
    return out


def discard_targets(run: UniverseRun) -> None:
    """Forget the GLS targets and remove their scratch files (they must never be published); idempotent."""
    for targets in run.targets.values():
        targets.stream.close()
    run.targets.clear()
    shutil.rmtree(run.work_dir / GLS_SCRATCH, ignore_errors=True)


def tree_targets(config: ReleaseConfig, result: GlsResult, measured: Sequence[Measured],
                 terms: list[tuple[TargetTerm, ...]] | None = None) -> list[tuple[QueryMeasurement, ...]]:
    """Every level's targets with the in-memory GLS's estimates; ``terms``: ``tree_terms`` of the same design
    (computed here if not given; they depend on the design only, not on the measurements)."""
    if terms is None:
        terms = tree_terms(config, result.stream, [[(q, s2) for q, s2, _ in level] for level in measured])
    return [target_answers(result.estimates[level], result.stream.shape, level_terms)
            for level, level_terms in enumerate(terms)]
