"""Measurement as tasks over groups of whole subtrees, on the driver or on Dask workers (docs/dask.md: what a task
reads, keeps and returns, and what bounds its memory).  Every chunk draws from its own stream (``substream_key``).
Guarantee: that of ``release.noisy_measurements`` (Thm 19.37(iii) with CKS20 Thm 4 per query and level; nodes are
disjoint, Prop. 19.30), whichever process draws a chunk's noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.budget.allocation import QueryAllocation
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.dp.random_source import substream_source
from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.histograms import compact_counts
from censusdp.pipeline.io.measurements import LevelMeasurementWriter
from censusdp.pipeline.io.microdata import InputFiles, encoded_rows, lowest_lookup
from censusdp.pipeline.release.chunks import level_chunks
from censusdp.pipeline.release.draws import UPPER, claim_draw, group_name, part_name
from censusdp.pipeline.release.noisy_measurements import level_invariants, measure_level
from censusdp.postprocess import QueryInvariant, QueryMeasurement

LevelPlan = tuple[str, tuple[QueryAllocation, ...], tuple[str, ...]]  # level name, its allocations, invariant queries


@dataclass(frozen=True)
class GroupTask:
    """One group: a node of the partition level (or the root) and its subtree, or a share of its chunks (a large
    group is shared out among several tasks, each reading the group's records and measuring its own chunks); public
    values only."""

    index: int  # the task's number, in node order (shares of a group are consecutive): names its claim and parts
    level: int
    subtree: GeoTree  # the group's nodes and their descendants
    first: tuple[int, ...]  # each subtree level's first node in the whole tree
    files: InputFiles  # the release's inputs (paths and configuration); ``parts`` are this group's
    parts: tuple[int, ...]  # indices into files.parts holding this group's records
    levels: tuple[LevelPlan, ...]  # per subtree level
    chunks: tuple[tuple[tuple[int, int], ...], ...]  # per subtree level: node ranges (subtree indices)
    keys: tuple[tuple[bytes | None, ...], ...]  # per subtree level and chunk: its noise stream (None: OS CSPRNG)
    out_dir: str | None  # where a worker writes its measurement parts; None: the caller's writers (the driver)
    # the persons-per-unit bounds (matrix, lower, upper) of its lowest nodes, from published values: data that break
    # one are refused, by category, once every group is measured
    limits: tuple[Any, np.ndarray, np.ndarray] | None = None
    share: int = 0  # which of the group's ``shares`` this task measures (``share_chunks``); share 0's total is kept
    shares: int = 1

    def __repr__(self) -> str:
        return (f"GroupTask(index={self.index}, level={self.level}, nodes={self.first[0]}+{self.subtree.n_nodes(0)}, "
                f"share={self.share}/{self.shares})")


def share_chunks(chunks: Sequence[tuple[int, int]], share: int, shares: int) -> list[int]:
    """The indices of the level's ``chunks`` that ``share`` of ``shares`` measures: contiguous, about a
    ``shares``-th of the level's nodes each (a chunk goes to the share its middle node falls in)."""
    if not chunks:
        return []
    first, total = chunks[0][0], max(1, chunks[-1][1] - chunks[0][0])
    return [i for i, (start, stop) in enumerate(chunks)
            if min(shares - 1, shares * (start + stop - 2 * first) // (2 * total)) == share]


@dataclass(frozen=True)
class GroupMeasured:
    """What a group's task hands back: public values only (the total histogram travels separately)."""

    index: int
    parts: tuple[str | None, ...]  # per subtree level: the part file written (None: written to the caller's writers)
    plans: tuple[tuple[tuple[int, int, int], ...], ...]  # per subtree level: (start, stop, row group), whole-tree nodes
    invariants: tuple[tuple[QueryInvariant, ...], ...]  # per subtree level: values of the group's nodes, published
    # below the root, the partition level's noisy answers, written by the caller in whole families (not in plans)
    top: tuple[QueryMeasurement, ...] = ()
    rules_broken: bool = False  # a lowest node's records break a persons-per-unit rule (GroupTask.limits)


class InputCategoryError(InputError):
    """A value check failed inside a measurement task: only the category leaves the task."""

    def __init__(self, category: InputProblem) -> None:
        super().__init__("(input)", "a value check failed", category=category)


def group_keys(files: InputFiles, task: GroupTask) -> list[np.ndarray]:
    """Every record of the group as an int64 key (unit index in the subtree x cells + cell), in sorted runs of one
    input batch each (confidential), never joined: that would hold the group twice while it was built."""
    n_cells = files.config.schema.n_cells
    units = lowest_lookup(files.config, task.subtree.geoids[-1])
    return [np.sort(batch.units.astype(np.int64) * n_cells + batch.cells)
            for part in task.parts for batch in encoded_rows(files, part, units)]


SLICE_KEYS = 1 << 20  # keys histogrammed at a time: a chunk of an upper level can hold the whole group's records


def chunk_histograms(runs: Sequence[np.ndarray], unit_offsets: np.ndarray, ancestors: np.ndarray, start: int,
                     stop: int, n_cells: int, *, slice_keys: int = SLICE_KEYS) -> np.ndarray:
    """Dense detailed histograms (stop - start, n_cells) of nodes [start, stop) of a level (confidential), counted
    ``slice_keys`` at a time from ``group_keys``' runs: the transient is bounded whatever the group's size."""
    lo_key, hi_key = unit_offsets[start] * n_cells, unit_offsets[stop] * n_cells
    size = (stop - start) * n_cells
    flat: np.ndarray | None = None  # the first slice's counts, the others added in place: one chunk-sized array
    pending: list[np.ndarray] = []
    held = 0  # keys in pending

    def count() -> None:
        nonlocal flat, held
        units, cells = np.divmod(np.concatenate(pending), n_cells)
        counted = np.bincount((ancestors[units] - start) * n_cells + cells, minlength=size)
        pending.clear()
        held = 0
        if flat is None:
            flat = counted.astype(np.int64, copy=False)
        else:
            flat += counted

    for run in runs:
        lo, hi = (int(i) for i in np.searchsorted(run, [lo_key, hi_key]))
        for a in range(lo, hi, slice_keys):
            pending.append(run[a:min(hi, a + slice_keys)])
            held += len(pending[-1])
            if held >= slice_keys:
                count()
    if pending:
        count()
    if flat is None:  # no record in the chunk's nodes
        flat = np.zeros(size, dtype=np.int64)
    return flat.reshape(stop - start, n_cells)


def measure_group(task: GroupTask, writers: dict[str, LevelMeasurementWriter] | None = None
                  ) -> tuple[GroupMeasured, np.ndarray | None]:
    """Measure every level of one group (its share's chunks); returns the public result and the group's total
    histogram (confidential, for ``measure_upper``; share 0's only).  Writing its own parts, the task first claims
    its draw: one attempt per run draws."""
    attempt = claim_draw(task.out_dir, group_name(task.index)) if task.out_dir is not None else None
    files, schema = task.files, task.files.config.schema
    category = None
    try:
        runs = group_keys(files, task)
    except InputError as error:  # the row and file stay here: raised outside the handler, category only
        category = error.category
    if category is not None:
        raise InputCategoryError(category)
    n_cells, tree = schema.n_cells, task.subtree
    parts: list[str | None] = []
    plans, invariants, top = [], [], []
    broken = False
    for level, (name, allocations, invariant_queries) in enumerate(task.levels):
        mine = share_chunks(task.chunks[level], task.share, task.shares)
        returned = level == 0 and task.level > 0  # the partition level below the root: handed back, not written
        writer, part = (None, None) if returned or not mine else _writer(task, name, writers, attempt)
        parts.append(part)
        ancestors, unit_offsets = tree.ancestor_of_units(level), tree.unit_offsets(level)
        plan, level_invariants_parts = [], []
        for start, stop, key in ((*task.chunks[level][i], task.keys[level][i]) for i in mine):
            histograms = chunk_histograms(runs, unit_offsets, ancestors, start, stop, n_cells)
            if task.limits is not None and level == len(task.levels) - 1:  # checked, and measured all the same
                matrix, lower, upper = task.limits
                answers = np.asarray(histograms @ matrix.T.toarray(), dtype=np.int64)
                broken |= bool(np.any(answers < lower[start:stop]) or np.any(answers > upper[start:stop]))
            noisy = measure_level(schema, histograms, allocations, substream_source(key))
            level_invariants_parts.append(level_invariants(schema, histograms, invariant_queries))
            del histograms
            if returned:
                top.append(noisy)
            else:
                row_group = writer.write_chunk(tree.geoids[level][start:stop], noisy, [a.rho for a in allocations])
                plan.append((task.first[level] + start, task.first[level] + stop, row_group))
            del noisy
        if part is not None:  # the task's own part file
            writer.close()
        plans.append(tuple(plan))
        invariants.append(tuple(joined_invariants(level_invariants_parts)))
    total = (sum((np.bincount(run % n_cells, minlength=n_cells) for run in runs), np.zeros(n_cells, dtype=np.int64))
             if task.share == 0 else None)
    top_joined = tuple(replace(q[0], noisy=np.concatenate([m.noisy for m in q])) for q in zip(*top, strict=True))
    return GroupMeasured(task.index, tuple(parts), tuple(plans), tuple(invariants), top_joined, broken), total


def _writer(task: GroupTask, name: str, writers: dict[str, LevelMeasurementWriter] | None, attempt: str | None
            ) -> tuple[LevelMeasurementWriter, str | None]:
    if writers is not None:
        return writers[name], None
    if task.out_dir is None or attempt is None:
        raise ValueError("a group task needs the caller's writers or an output folder")
    writer = LevelMeasurementWriter(Path(task.out_dir), name, part_name(task.index, attempt, name))
    return writer, str(writer.path)


def joined_invariants(parts: Sequence[Sequence[QueryInvariant]]) -> list[QueryInvariant]:
    """Consecutive node ranges' invariants (the same queries, in order) as one per query over all their nodes."""
    # int32 throughout where every piece fits; one piece that does not makes the whole int64 (numpy's promotion)
    return [replace(pieces[0], values=np.concatenate([compact_counts(piece.values) for piece in pieces]))
            for pieces in zip(*parts, strict=True)]


@dataclass(frozen=True)
class UpperTask:
    """The levels above the partition level: their tree, each group's ancestor node in each, chunks and keys."""

    tree: GeoTree
    group_ancestors: tuple[np.ndarray, ...]  # per upper level: each group's node
    schema: Schema
    levels: tuple[LevelPlan, ...]
    chunks: tuple[tuple[tuple[int, int], ...], ...]
    keys: tuple[tuple[bytes | None, ...], ...]
    out_dir: str | None = None  # the run's parts folder where the task runs on a worker: its draw is claimed there


UpperChunk = tuple[list[QueryMeasurement], list[QueryInvariant]]


def measure_upper(task: UpperTask, totals: Sequence[np.ndarray]) -> list[list[UpperChunk]]:
    """Every level above the partition level measured from the groups' totals (a worker first claims its draw)."""
    if task.out_dir is not None:
        claim_draw(task.out_dir, UPPER)
    schema = task.schema
    stacked = np.stack(totals) if totals else np.zeros((0, schema.n_cells), dtype=np.int64)
    out = []
    for level, (_, allocations, invariant_queries) in enumerate(task.levels):
        histograms_all = np.zeros((task.tree.n_nodes(level), schema.n_cells), dtype=np.int64)
        np.add.at(histograms_all, task.group_ancestors[level], stacked)
        level_out = []
        for (start, stop), key in zip(task.chunks[level], task.keys[level], strict=True):
            histograms = histograms_all[start:stop]
            noisy = measure_level(schema, histograms, allocations, substream_source(key))
            level_out.append((noisy, level_invariants(schema, histograms, invariant_queries)))
        out.append(level_out)
        del histograms_all
    return out


def subtree_chunks(tree: GeoTree, n_cells: int, chunk_cells: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every level's chunks of whole parents, inside one (sub)tree."""
    return tuple(tuple(level_chunks(tree, level, n_cells, chunk_cells)) for level in range(tree.depth))

