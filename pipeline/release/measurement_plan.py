"""The measure stage's plan and where it runs (``postprocess.measure_on``; the trust boundary: docs/dask.md).
``plan_measurement`` turns the tree and the input files into group tasks and the upper levels' task;
``run_measurement`` runs them and lays out every level's measurements in node order.
"""

from __future__ import annotations

import operator
import shutil
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from censusdp.geography.levels import Level
from censusdp.geography.tree import GeoTree
from censusdp.pipeline.budget.allocation import QueryAllocation, allocations_of
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.dp.random_source import RandomSource, substream_key
from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.measurements import ChunkLocation, LevelMeasurementWriter, adopt_part
from censusdp.pipeline.io.microdata import InputFiles, encoded_rows, lowest_lookup
from censusdp.pipeline.release.chunks import level_chunks
from censusdp.pipeline.release.draws import check_claimed, chunk_label
from censusdp.pipeline.release.group_tasks import (
    GroupMeasured,
    GroupTask,
    InputCategoryError,
    LevelPlan,
    UpperTask,
    joined_invariants,
    measure_group,
    measure_upper,
    subtree_chunks,
)
from censusdp.pipeline.release.sealed_tasks import submit_sealed
from censusdp.postprocess import QueryInvariant, QueryMeasurement

PARTS_DIR = "measure-parts"  # inside the run's temporary folder; removed once collected


@dataclass(frozen=True)
class MeasurementPlan:
    partition_level: int
    groups: tuple[GroupTask, ...]
    upper: UpperTask | None


def shared_partition(levels: Sequence[Level], files: Sequence[InputFiles]) -> int:
    """The partition level every universe is measured at, so they share chunks: their own if the same, else 0."""
    found = {partition_level(levels, f) for f in files}
    return found.pop() if len(found) == 1 else 0


def partition_level(levels: Sequence[Level], files: InputFiles) -> int:
    """The level whose nodes the input's partition folders name (``state=01``: the level of width 2), else 0 (one
    group: the whole tree)."""
    widths = {None if part.partition is None else len(part.partition) for part in files.parts}
    if len(widths) != 1 or None in widths:
        return 0
    width = widths.pop()  # a unit-code prefix: a level's code only above every column level
    return next((i for i, level in enumerate(levels)
                 if i > 0 and level.width == width and level.column is None and level.unit_width is None), 0)


def plan_measurement(tree: GeoTree, files: InputFiles, level_plans: Sequence[LevelPlan], rng: RandomSource | None,
                     universe: str, chunk_cells: int, parts_dir: Path | None, partition: int | None = None,
                     limits: tuple[Any, np.ndarray, np.ndarray] | None = None, workers: int = 1) -> MeasurementPlan:
    """Every group's task and the upper levels' task, with each chunk's noise stream key (drawn here, in one fixed
    order, so the plan is the same wherever the tasks run; ``rng`` None: a plan for validation only).  ``limits``:
    the persons-per-unit bounds of every lowest node (``GroupTask.limits``).  With ``workers`` > 1, a group holding
    a large share of the lowest nodes is measured in several tasks (``group_shares``): the same draws, shared out."""
    p = partition_level(tree.levels, files) if partition is None else partition
    n_cells = files.config.schema.n_cells
    if parts_dir is not None:  # the tasks' claims and parts; made once, here: no task creates a folder
        parts_dir.mkdir()
    out_dir = str(parts_dir) if parts_dir is not None else None
    by_node: dict[int, list[int]] = {}
    for index, part in enumerate(files.parts):
        node = 0
        if p > 0:
            node = int(np.searchsorted(tree.geoids[p], part.partition))
            if node >= tree.n_nodes(p) or tree.geoids[p][node] != part.partition:
                raise InputError(str(part.path), "its partition folder names no unit of the geography",
                                 category=InputProblem.GEOGRAPHY)
        by_node.setdefault(node, []).append(index)
    upper = None
    if p > 0:
        upper_tree = GeoTree(levels=tree.levels[:p], geoids=tree.geoids[:p], parent=tree.parent[:p])
        chunks = subtree_chunks(upper_tree, n_cells, chunk_cells)
        keys = _keys(rng, universe, level_plans[:p], chunks, (0,) * p)
        to_groups = GeoTree(levels=tree.levels[:p + 1], geoids=tree.geoids[:p + 1], parent=tree.parent[:p + 1])
        ancestors = tuple(to_groups.ancestor_of_units(level) for level in range(p))  # each group's, per upper level
        upper = UpperTask(tree=upper_tree, group_ancestors=ancestors, schema=files.config.schema,
                          levels=tuple(level_plans[:p]), chunks=chunks, keys=keys, out_dir=out_dir)
    groups: list[GroupTask] = []
    for node in range(tree.n_nodes(p)):  # the root level is one node
        subtree, first = tree.subtree(p, node, node + 1)
        chunks = subtree_chunks(subtree, n_cells, chunk_cells)
        lowest = slice(first[-1], first[-1] + subtree.n_nodes(subtree.depth - 1))
        group_limits = None if limits is None else (limits[0], limits[1][lowest], limits[2][lowest])
        task = GroupTask(index=len(groups), level=p, subtree=subtree, first=first, files=files, limits=group_limits,
                         parts=tuple(by_node.get(node, [])), levels=tuple(level_plans[p:]), chunks=chunks,
                         keys=_keys(rng, universe, level_plans[p:], chunks, first), out_dir=out_dir)
        shares = group_shares(lowest.stop - lowest.start, tree.n_nodes(tree.depth - 1), len(chunks[-1]), workers)
        groups.extend([replace(task, index=task.index + share, share=share, shares=shares) for share in range(shares)])
    return MeasurementPlan(p, tuple(groups), upper)


def group_shares(group_units: int, all_units: int, lowest_chunks: int, workers: int) -> int:
    """How many tasks measure a group of ``group_units`` of the ``all_units`` lowest nodes: one, or with several
    workers enough that no task holds much more than a ``2 * workers``-th of the nodes, at most one per worker and
    per lowest chunk (each task reads the group's records, so a share costs one more reading of them)."""
    if workers <= 1 or all_units == 0:
        return 1
    return max(1, min(workers, lowest_chunks, -(-2 * workers * group_units // all_units)))


def _keys(rng: RandomSource | None, universe: str, levels: Sequence[LevelPlan],
          chunks: Sequence[Sequence[tuple[int, int]]], first: Sequence[int]) -> tuple[tuple[bytes | None, ...], ...]:
    """Each chunk's stream key, labelled by what decides which counts its draws land on (``chunk_label``)."""
    return tuple(tuple(substream_key(rng, chunk_label(universe, name, allocations, offset + start, offset + stop))
                       if rng is not None else None for start, stop in level_chunks)
                 for (name, allocations, _), level_chunks, offset in zip(levels, chunks, first, strict=True))


def validate_group(task: GroupTask) -> tuple[InputProblem | None, bool]:
    """Every value check of a group's records, nothing kept: the first failure's category (or None), any record seen."""
    seen = False
    try:
        units = lowest_lookup(task.files.config, task.subtree.geoids[-1])
        for part in task.parts:
            for batch in encoded_rows(task.files, part, units):
                seen = seen or len(batch.cells) > 0
    except InputError as error:
        return error.category, seen
    return None, seen


@dataclass
class Measured:
    """What the driver keeps of a measurement: per level, the chunk plan and the invariants (public)."""

    chunk_plan: dict[int, list[tuple[int, int, ChunkLocation]]]
    invariants: dict[int, list[QueryInvariant]]
    rules_broken: bool = False  # some group's records break a persons-per-unit rule


def run_measurement(plan: MeasurementPlan, level_plans: Sequence[LevelPlan], tree: GeoTree, directory: Path,
                    runner: Any, on_workers: bool, n_cells: int, chunk_cells: int) -> Measured:
    """Run the plan's tasks and lay out every level's measurements in node order (workers' parts moved in place)."""
    for name, _, _ in level_plans:  # a failed attempt's leftovers (a resumable run never measures again)
        shutil.rmtree(directory / name, ignore_errors=True)
        (directory / f"{name}.parquet").unlink(missing_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    writers = {name: LevelMeasurementWriter(directory, name) for name, _, _ in level_plans}
    p = plan.partition_level
    plans: dict[int, list[tuple[int, int, ChunkLocation]]] = {level: [] for level in range(tree.depth)}
    invariant_parts: dict[int, list[tuple[QueryInvariant, ...]]] = {level: [] for level in range(tree.depth)}
    broken = False

    def write(level: int, start: int, stop: int, noisy: Sequence[QueryMeasurement]) -> None:
        name, allocations, _ = level_plans[level]
        row_group = writers[name].write_chunk(tree.geoids[level][start:stop], noisy, [a.rho for a in allocations])
        plans[level].append((start, stop, ChunkLocation(writers[name].file, row_group)))

    try:
        results, upper = (dask_measure(runner, plan.groups, plan.upper) if on_workers
                          else _on_driver(plan, writers))
        tops = []
        parts_dir = plan.groups[0].out_dir if plan.groups else None
        for measured in results:
            broken |= measured.rules_broken
            if measured.top:
                tops.append(measured.top)
            for offset, (level_plan, part) in enumerate(zip(measured.plans, measured.parts, strict=True)):
                level, name = p + offset, level_plans[p + offset][0]
                if level_plan:  # a worker's part file joins its level's folder; else the driver's writer has them
                    file = (adopt_part(directory, name, measured.index,
                                       check_claimed(parts_dir, measured.index, Path(part)))
                            if part else writers[name].file)
                    plans[level].extend((start, stop, ChunkLocation(file, row_group))
                                        for start, stop, row_group in level_plan)
                if measured.invariants[offset]:  # a share without a chunk of this level has none
                    invariant_parts[level].append(measured.invariants[offset])
        if tops:  # the partition level, in chunks of whole families (its nodes' answers came back one by one)
            for start, stop in level_chunks(tree, p, n_cells, chunk_cells):
                write(p, start, stop, [replace(q[0], noisy=np.concatenate([m.noisy for m in q]))
                                       for q in zip(*tops[start:stop], strict=True)])
        for level, chunks in enumerate(upper() if upper is not None else []):
            for (start, stop), (noisy, chunk_invariants) in zip(plan.upper.chunks[level], chunks, strict=True):
                write(level, start, stop, noisy)
                invariant_parts[level].append(tuple(chunk_invariants))
    finally:
        for writer in writers.values():
            writer.close()
        if plan.groups and plan.groups[0].out_dir is not None:
            shutil.rmtree(plan.groups[0].out_dir, ignore_errors=True)
    invariants = {level: joined_invariants(parts) for level, parts in invariant_parts.items()}
    return Measured(plans, invariants, broken)


def _on_driver(plan: MeasurementPlan, writers: dict[str, LevelMeasurementWriter]) -> tuple[list[GroupMeasured], Any]:
    results = [measure_group(task, writers) for task in plan.groups]
    upper, totals = plan.upper, [total for _, total in results if total is not None]
    return [measured for measured, _ in results], (lambda: measure_upper(upper, totals)) if upper is not None else None


def dask_measure(runner: Any, groups: Sequence[GroupTask], upper: UpperTask | None
                 ) -> tuple[Iterator[GroupMeasured], Callable[[], Any] | None]:
    """The groups' tasks on the runner's workers, at most ``runner.window`` uncollected (the first ones in this
    process while a local cluster starts, where ``DaskRunner.driver_takes_next``); the public half of each result
    comes back in group order, and the total histograms go from the workers straight into the upper levels' task."""
    totals: list[Any] = []
    upper_future: list[Any] = []

    def results() -> Iterator[GroupMeasured]:
        pending: deque[Any] = deque()  # futures, or the results the driver computed
        window = None  # asked once the cluster is up (an existing cluster's is a question to its scheduler)
        try:
            for task in groups:
                if runner.driver_takes_next():
                    measured, total = measure_group(task)
                    pending.append(_Done(measured))
                    if task.share == 0:
                        totals.append(total)  # a value: the upper task's list takes values and futures alike
                    continue
                client = runner.client
                future = submit_sealed(client, measure_group, task)
                pending.append(client.submit(operator.itemgetter(0), future, pure=False))
                if task.share == 0:  # the group's total histogram: its first share's
                    totals.append(client.submit(operator.itemgetter(1), future, pure=False))
                del future  # released once both halves are taken: the scheduler forgets the task and its subtree
                window = window or runner.window
                if len(pending) >= window:
                    yield pending.popleft().result()
            if upper is not None:
                upper_future.append(submit_sealed(runner.client, measure_upper, upper, list(totals)))
            totals.clear()
            while pending:
                yield pending.popleft().result()
        except InputCategoryError:
            for future in (*pending, *upper_future, *(t for t in totals if not isinstance(t, np.ndarray))):
                future.cancel()
            raise

    return results(), (lambda: upper_future[0].result()) if upper is not None else None


@dataclass(frozen=True)
class _Done:
    """A result the driver computed itself, held where a future would be."""

    value: Any

    def result(self) -> Any:
        return self.value

    def cancel(self) -> None:
        pass


def level_plans_of(config: ReleaseConfig, allocations: Sequence[QueryAllocation]) -> list[LevelPlan]:
    """Per level: its name, its queries' allocations and the queries published exactly there (invariants)."""
    return [(spec.name, tuple(allocations_of(allocations, spec.name)),
             tuple(i.query.name for i in config.invariants if spec.name in i.levels)) for spec in config.levels]
