"""The exact GLS of ``postprocess.gls`` out of core: memory bounded by a chunk of nodes, not by the tree.  Its
intermediates, rotated cubes in the caller's ``CubeStore``, are public values (post-processing of noisy measurements)
removed by ``close``; the lowest level is never stored (docs/reconciliation.md, "Full-information reconciliation").
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from censusdp.postprocess.gls_algebra import QuerySpec, cell_variance, unrotate
from censusdp.postprocess.gls_stream_chunk import LowestChunk, SubspaceStep, down_step, rotated_chunk, up_step
from censusdp.postprocess.gls_stream_frame import CubeStore, StreamLevel, subspace_frame, tree_frame
from censusdp.postprocess.gls_tree import _sum, children_matrix

# read(level, start, stop) -> (noisy answers per query, invariant values per invariant), each (stop - start, q_cells)
Reader = Callable[[int, int, int], tuple[Sequence[np.ndarray], Sequence[np.ndarray]]]
# the lowest level's up pass: every chunk's job -> its parents' children sums, in chunk order (e.g. run on workers
# that read the chunk's measurements themselves); by default each job is run here with the Reader
LowestSums = Callable[[Iterator[LowestChunk]], Iterable[np.ndarray]]
FINAL = "final"  # the store's kind of x̂, a level's GLS estimates (rotated): what ``estimate`` reads above the lowest
SLICE_CELLS = 1 << 18  # cells per slice of a level above the lowest in the passes: 2 MB a float64 temporary


class StreamedGls:
    """The exact GLS of a tree, both passes solved chunk by chunk at construction; ``store`` closed by ``close`` (or
    a ``with`` block's end, or garbage collection).  ``ValueError`` on unidentifiable cells, invariants that do not
    hold at every level above, and a plan that splits a family or does not cover a level.  ``lowest_sums`` runs the
    lowest level's up pass (e.g. on a runner's workers); ``slice_cells``: the most cells of a slice (memory only)."""

    def __init__(self, levels: Sequence[StreamLevel], shape: Sequence[int], read: Reader, store: CubeStore,
                 lowest_sums: LowestSums | None = None, slice_cells: int = SLICE_CELLS) -> None:
        self._scratch = store
        self._finalizer = weakref.finalize(self, store.close)  # first: a failed check below closes it too
        self._lowest_sums = lowest_sums  # None: run here (not a bound method: no cycle keeps the store open)
        self._slice_cells = slice_cells
        try:
            self.levels = list(levels)
            frame = tree_frame(self.levels, shape)
            self.shape, self.sizes, self.bases, self.subsets = frame.shape, frame.sizes, frame.bases, frame.subsets
            self._read = read
            self._frames = [subspace_frame(self.levels, frame, subset) for subset in self.subsets]
            self._up_pass()
            self._down_pass()
        except BaseException:
            self.close()
            raise

    @property
    def depth(self) -> int:
        return len(self.levels)

    def _steps(self, level: int, start: int, stop: int) -> tuple[SubspaceStep, ...]:
        return tuple(SubspaceStep(subset, frame.info[level], frame.free[level], tuple(frame.maps[level]),
                                  frame.phi_of(level, start, stop))
                     for subset, frame in zip(self.subsets, self._frames, strict=True))

    def _up(self, level: int, start: int, stop: int, noisy: Sequence[np.ndarray], values: Sequence[np.ndarray],
            below: np.ndarray) -> np.ndarray:
        """z̃ (rotated) of nodes [start, stop) above the lowest level, from their data and children sums Σz̃."""
        spec = self.levels[level]
        cube, exact = rotated_chunk(level, spec.queries, spec.invariants, self.bases, noisy, values, stop - start)
        terms = [(f.free[level + 1], (f.free[level + 1].T @ f.free[level]).T @ f.bar_inv[level][start:stop])
                 for f in self._frames]  # per subspace: N of the level below, Mᵀ Φ̄⁻¹
        return up_step(cube, exact, self._steps(level, start, stop), self.bases, below, terms)

    def _parents(self, level: int, start: int, stop: int) -> tuple[int, int, np.ndarray]:
        parent = self.levels[level].parent[start:stop]
        first = int(parent[0])
        return first, int(parent[-1]) + 1, parent - first

    def _above(self, level: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """What the down step of nodes [start, stop) needs of their parents: each node's parent among them, and
        their x̂ - Σz̃ (rotated) and Φ̄⁻¹ on every subspace."""
        first, last, local = self._parents(level, start, stop)
        gap = self._scratch.read(FINAL, level - 1, first, last) - self._scratch.read("sum", level - 1, first, last)
        return local, gap, tuple(frame.bar_inv[level - 1][first:last] for frame in self._frames)

    def lowest_chunk(self, start: int, stop: int, *, with_parents: bool = True) -> LowestChunk:
        """One chunk of the lowest level as a job; ``with_parents`` (after the passes): with what ``estimate`` needs."""
        level = self.depth - 1
        spec = self.levels[level]
        local = gap = None
        bar_inv: tuple[np.ndarray, ...] = ()
        if level > 0 and with_parents:
            local, gap, bar_inv = self._above(level, start, stop)
        elif level > 0:
            local = self._parents(level, start, stop)[2]
        return LowestChunk(level, start, stop, tuple(self.bases), tuple(spec.queries), tuple(spec.invariants),
                           self._steps(level, start, stop), local, gap, bar_inv)

    def _up_pass(self) -> None:
        lowest = self.depth - 1
        chunks = self.levels[lowest].chunks
        if lowest == 0:  # a one-level tree: nothing to store; each chunk is read and checked once
            for start, stop in chunks:
                self.lowest_chunk(start, stop).up(*self._read(lowest, start, stop))
            return
        jobs = (self.lowest_chunk(start, stop, with_parents=False) for start, stop in chunks)
        results = (self._lowest_sums(jobs) if self._lowest_sums is not None
                   else (job.children_sums(*self._read(job.level, job.start, job.stop)) for job in jobs))
        # in chunk order, so "sum" is written front to back; one result per chunk, with a row per parent
        for (start, stop), sums in zip(chunks, results, strict=True):
            first, last, _ = self._parents(lowest, start, stop)
            if np.shape(sums) != (last - first, *self.shape):
                raise ValueError(f"lowest level, nodes {start}:{stop}: the children sums have the wrong shape")
            self._scratch.write("sum", lowest - 1, sums)
        for level in range(lowest - 1, -1, -1):
            for start, stop in self.levels[level].chunks:
                noisy, values = self._read(level, start, stop)
                for lo, hi in self._slices(level, start, stop):
                    rows = slice(lo - start, hi - start)
                    up = self._up(level, lo, hi, [answers[rows] for answers in noisy], [v[rows] for v in values],
                                  self._scratch.read("sum", level, lo, hi))
                    self._scratch.write("up", level, up)
                    if level > 0:
                        first, last, local = self._parents(level, lo, hi)
                        self._scratch.write("sum", level - 1, _sum(children_matrix(local, last - first), up))
                del noisy, values  # before the next chunk's read, not after it: no two chunks' arrays at once

    def _slices(self, level: int, start: int, stop: int) -> Iterator[tuple[int, int]]:
        rows = max(1, self._slice_cells // max(1, int(np.prod(self.shape))))
        return family_slices(self.levels[level].parent if level > 0 else None, start, stop, rows)

    def _down_pass(self) -> None:
        lowest = self.depth - 1
        if lowest == 0:
            return
        self._scratch.rename("up", FINAL, 0)  # the root's subtree is the whole tree
        for level in range(1, lowest):
            for start, stop in self.levels[level].chunks:
                for lo, hi in self._slices(level, start, stop):
                    local, gap, bar_inv = self._above(level, lo, hi)
                    up = self._scratch.read("up", level, lo, hi)
                    self._scratch.write(FINAL, level, down_step(up, gap, local, self._steps(level, lo, hi), bar_inv,
                                                                self.bases))
            self._scratch.remove("up", level)
            self._scratch.remove("sum", level - 1)  # the lowest level's parents keep theirs
        for frame in self._frames:
            frame.drop_upper()  # only the lowest level's down step remains to be done

    def estimate(self, level: int, start: int, stop: int) -> np.ndarray:
        """(stop - start, C) GLS estimates of nodes [start, stop) of a level: whole chunks (one at the lowest level)."""
        if level < self.depth - 1:
            return unrotate(self._scratch.read(FINAL, level, start, stop), self.bases)
        return self.lowest_chunk(start, stop).estimate(*self._read(level, start, stop))

    def _classes(self, level: int, spec: QuerySpec | None, start: int, stop: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``cell_variance`` of nodes [start, stop), clipped at 0 (exact zeros of invariants may come out as -1e-16);
        at the lowest level, of their parents (the same for all the children of one parent), with each node's
        parent among them."""
        spec = QuerySpec(tuple(range(len(self.shape)))) if spec is None else spec
        local = None
        if level < self.depth - 1:
            covariances = [frame.covariance[level][start:stop] for frame in self._frames]
        elif level == 0:  # a one-level tree: one covariance for all its nodes
            covariances = [frame.covariance[0] for frame in self._frames]
            local = np.zeros(stop - start, dtype=np.int64)
        else:
            first, last, local = self._parents(level, start, stop)
            covariances = [frame.covariance[level][first:last] for frame in self._frames]
        by_class, index = cell_variance(covariances, self.subsets, self.bases, spec)
        return np.maximum(by_class, 0.0), index, local

    def variance_classes(self, level: int, spec: QuerySpec | None, start: int, stop: int
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Variances of nodes [start, stop)'s estimates of a query's cells (None: the detailed cells), by class:
        (stop - start, n_classes) and each cell's class.  Without a recode every cell of a node has one class."""
        by_class, index, local = self._classes(level, spec, start, stop)
        return (by_class if local is None else by_class[local]), index

    def variance(self, level: int, spec: QuerySpec | None, start: int, stop: int) -> np.ndarray:
        """(stop - start, q_cells) variances of each node's estimates of a query's cells (None: the detailed cells)."""
        by_class, index = self.variance_classes(level, spec, start, stop)
        return by_class[:, index]

    def chunk_estimates(self, level: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """(start, stop, estimates (stop - start, C)) of every chunk of a level's plan, in node order."""
        for start, stop in self.levels[level].chunks:
            yield start, stop, self.estimate(level, start, stop)

    def mean_variance(self, level: int, spec: QuerySpec | None, above: float = 0.0) -> float | None:
        """The mean, over a level's nodes and a query's cells, of the variances strictly above ``above`` (None
        when there are none: every cell fixed by invariants) — without forming the (n_nodes, q_cells) array."""
        n = self.sizes[level]
        by_class, index, local = self._classes(level, spec, 0, n)
        cells = np.bincount(index, minlength=by_class.shape[1]).astype(float)  # query cells per class
        if local is not None:
            nodes = np.bincount(local, minlength=by_class.shape[0]).astype(float)  # children per parent
        else:
            nodes = np.full(by_class.shape[0], n / by_class.shape[0])
        weight = np.where(by_class > above, nodes[:, None] * cells[None, :], 0.0)
        total = weight.sum()
        return float((weight * by_class).sum() / total) if total else None

    def close(self) -> None:
        """Close the store (idempotent)."""
        self._finalizer()

    def __enter__(self) -> StreamedGls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def family_slices(parent: np.ndarray | None, start: int, stop: int, rows: int) -> Iterator[tuple[int, int]]:
    """Nodes [start, stop) (whole families; ``parent``: each node's parent, non-decreasing, or None at the root)
    as consecutive slices of whole families of at most ``rows`` nodes, or of one larger family, in order.  The
    passes' results are the whole chunk's up to floating-point summation order (docs/reconciliation.md)."""
    lo = start
    while lo < stop:
        hi = min(stop, lo + rows)
        if parent is not None and hi < stop:  # back to the start of the family cut in two, or on to its end
            family = int(parent[hi])
            back = lo + int(np.searchsorted(parent[lo:hi], family))
            hi = back if back > lo else lo + int(np.searchsorted(parent[lo:stop], family, side="right"))
        yield lo, hi
        lo = hi


# the engine's entry point: building the stream solves the tree
solve_gls_streamed = StreamedGls
