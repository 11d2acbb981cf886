"""A level's reconciliation as chunk tasks (public values only), made lazily in chunk order so only the runner's
window of them is ever in memory.  With full information a task computes its nodes' GLS targets where it runs;
with ``level_by_level`` it reads the level's own measurements and those of the only-child levels below.
"""

from __future__ import annotations

from collections.abc import Iterator

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.config.reconciliation import ReconciliationMethod
from censusdp.pipeline.dp.random_source import system_random_source
from censusdp.pipeline.release.full_information import discard_targets
from censusdp.pipeline.release.lowest_parts import LowestOutputs, LowestPart
from censusdp.pipeline.release.only_child import chain_measurements
from censusdp.pipeline.release.persons_units import LevelBounds, level_rules
from censusdp.pipeline.release.reconcile_chunk import ChunkTask
from censusdp.pipeline.release.run import Release, UniverseRun, stage_output
from censusdp.pipeline.release.support import structural_zero_mask
from censusdp.pipeline.release.targets import LevelTargets


def chunk_tasks(release: Release, run: UniverseRun, level: int, outputs: LowestOutputs | None = None,
                bounds: LevelBounds | None = None) -> Iterator[ChunkTask]:
    """The level's reconciliation tasks, made as they are walked (``outputs``: the lowest outputs its tasks write)."""
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    full = run.config.reconciliation_method is ReconciliationMethod.FULL_INFORMATION
    targets = run.targets.get(level) if full else None
    if full and not (targets and targets.terms):
        raise stage_output(None, f"the GLS targets of level {run.config.levels[level].name} (the estimate stage)")
    return _make_tasks(release, run, level, tree, targets, outputs, bounds)


def _make_tasks(release: Release, run: UniverseRun, level: int, tree: GeoTree, targets: LevelTargets | None,
                outputs: LowestOutputs | None, bounds: LevelBounds | None) -> Iterator[ChunkTask]:
    config = run.config
    name = config.levels[level].name
    queries = tuple((a.query, a.sigma2) for a in run.level_allocations(level))
    zeros = structural_zero_mask(config)
    # rounding ties are broken at random (post-processing: any source will do), from the run's CSPRNG or the OS's
    tie_source = release.rng if release.rng.can_draw else system_random_source()
    # level_by_level: the only-child levels below measured the same nodes again
    chain = [] if targets is not None else chain_measurements(run, level)
    passes = config.level_passes(name)
    lowest = level == tree.depth - 1
    lowest_targets = targets is not None and lowest
    rules = level_rules(config, None, zeros) if outputs is not None and release.units is not None else None
    units_outputs = run.lowest_outputs if run is not release.persons and lowest else None
    for index, (start, stop, located) in enumerate(run.chunk_plan[level]):
        parent_counts = parent_index = None
        if level > 0:
            parents = tree.parent[level][start:stop]
            parent_counts = run.counts[level - 1][int(parents[0]): int(parents[-1]) + 1]
            parent_index = parents - parents[0]
        geoids = tree.geoids[level][start:stop]
        yield ChunkTask(level=name, start=start, stop=stop, measurements_path=str(run.measurements / located.file),
                        first_row_group=located.row_group, queries=queries, schema=run.schema,
                        parent_counts=parent_counts, parent_index=parent_index,
                        invariants=tuple((i.name, i.values[start:stop]) for i in run.invariants.get(level, [])),
                        structural_zeros=zeros, solver=config.solver, tie_seed=int(tie_source.uniform_uint64(1)[0]),
                        chain_measurements=tuple((label, q, s2, v[start:stop]) for label, q, s2, v in chain),
                        stored_targets=targets.stored(start, stop) if targets is not None and not lowest else None,
                        gls_chunk=targets.stream.lowest_chunk(start, stop) if lowest_targets else None,
                        target_terms=targets.terms if lowest_targets else (), passes=passes.l2,
                        tolerance=float(passes.tolerance), rounding=tuple(q.name for q in passes.rounding),
                        lowest_part=LowestPart(outputs, index, geoids) if outputs is not None else None,
                        bound=bounds.chunk(start, stop) if bounds is not None else None, rules=rules,
                        units_part=LowestPart(units_outputs, index, geoids) if units_outputs is not None else None)
    if targets is not None and lowest:  # every level's targets are made: the scratch files go before publish
        discard_targets(run)
