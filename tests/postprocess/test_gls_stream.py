"""The streamed GLS (``postprocess.gls_stream``) equals ``solve_gls``, chunk by chunk, with bounded scratch use."""

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.io.gls_scratch import ScratchCubes
from censusdp.postprocess.gls import solve_gls
from censusdp.postprocess.gls_stream import StreamLevel, family_slices, solve_gls_streamed
from censusdp.postprocess.gls_stream_chunk import LowestChunk
from tests.helpers.gls_problems import as_stream, make_problem

PINNED = 1e-9


def _spy_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every cube the stream writes to its store, as (kind, level, rows), in order."""
    written: list[tuple[str, int, int]] = []
    real_write = ScratchCubes.write

    def spy(self: ScratchCubes, kind: str, level: int, cube: np.ndarray) -> None:
        written.append((kind, level, cube.shape[0]))
        real_write(self, kind, level, cube)

    monkeypatch.setattr(ScratchCubes, "write", spy)
    return written


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    np.testing.assert_allclose(actual, expected, rtol=1e-8, atol=1e-8 * scale)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 4), with_invariants=st.booleans(),
       recoded=st.booleans(), most=st.integers(1, 4), slice_nodes=st.sampled_from([0, 1, 2, 3, 1000]))
def test_the_streamed_gls_equals_solve_gls(tmp_path_factory: pytest.TempPathFactory, seed: int, depth: int,
                                           with_invariants: bool, recoded: bool, most: int, slice_nodes: int) -> None:
    """Whatever the slices of the levels above the lowest (0: under one node's cells, so one family a slice)."""
    rng = np.random.default_rng(seed)  # test-only
    shape, _, _, levels = make_problem(rng, depth, with_invariants, recoded, most)
    try:
        dense = solve_gls(levels, shape)
    except ValueError:  # not identifiable: the stream refuses it too
        plan, read = as_stream(rng, levels)
        with pytest.raises(ValueError):
            solve_gls_streamed(plan, shape, read, ScratchCubes(tmp_path_factory.mktemp("refused"), shape))
        return
    plan, read = as_stream(rng, levels)
    scratch = tmp_path_factory.mktemp("scratch")
    measured = [q.spec for level in levels for q in level.queries]  # (a recode must coarsen the run's groups)
    slice_cells = max(1, slice_nodes * int(np.prod(shape)))
    with solve_gls_streamed(plan, shape, read, ScratchCubes(scratch, shape), slice_cells=slice_cells) as stream:
        for level, spec in enumerate(plan):
            query = measured[int(rng.integers(len(measured)))]
            for start, stop in spec.chunks:
                _close(stream.estimate(level, start, stop), dense.estimates[level][start:stop])
                _close(stream.variance(level, None, start, stop), dense.variance(level)[start:stop])
                _close(stream.variance(level, query, start, stop), dense.variance(level, query)[start:stop])
            for q in (None, query):
                variance = dense.variance(level, q)
                free = variance[variance > PINNED]
                mean = stream.mean_variance(level, q, PINNED)
                assert (mean is None) == (free.size == 0)
                if mean is not None:
                    assert mean == pytest.approx(free.mean(), rel=1e-8)
    assert not any(scratch.iterdir())


def test_the_lowest_level_is_never_stored_and_is_read_again_per_estimate(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)  # test-only
    shape, _, _, levels = make_problem(rng, 4, with_invariants=True)
    plan, read = as_stream(rng, levels)
    reads: Counter[tuple[int, int, int]] = Counter()

    def counting(level: int, start: int, stop: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        reads[level, start, stop] += 1
        return read(level, start, stop)

    written = _spy_writes(monkeypatch)
    stream = solve_gls_streamed(plan, shape, counting, ScratchCubes(tmp_path, shape))
    lowest = len(plan) - 1
    assert {level for _, level, _ in written} == set(range(lowest))  # every level above, never the lowest
    # z̃ and Σz̃ of every level above the lowest, and x̂ of every level but the root (whose x̂ is its z̃)
    sizes = [spec.chunks[-1][1] for spec in plan]
    for kind, first in (("up", 0), ("sum", 0), ("final", 1)):
        assert {lv: sum(n for k, lv_, n in written if k == kind and lv_ == lv) for lv in range(first, lowest)} == {
            lv: sizes[lv] for lv in range(first, lowest)}
    assert set(reads) == {(lv, a, b) for lv, spec in enumerate(plan) for a, b in spec.chunks}
    assert set(reads.values()) == {1}  # each chunk read once by the two passes
    files = sorted(p.name for p in tmp_path.rglob("*.f64"))
    assert files == sorted([f"final-{lv}.f64" for lv in range(lowest)] + [f"sum-{lowest - 1}.f64"])
    start, stop = plan[lowest].chunks[-1]
    stream.estimate(lowest, start, stop)
    assert reads[lowest, start, stop] == 2
    stream.close()
    stream.close()
    assert not any(tmp_path.iterdir())


def test_scratch_is_removed_when_a_read_fails(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)  # test-only
    shape, _, _, levels = make_problem(rng, 3, with_invariants=False)
    plan, read = as_stream(rng, levels)

    def failing(level: int, start: int, stop: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if level == 1:
            raise OSError("unreadable")
        return read(level, start, stop)

    with pytest.raises(OSError):
        solve_gls_streamed(plan, shape, failing, ScratchCubes(tmp_path, shape))
    assert not any(tmp_path.iterdir())


def test_a_plan_that_splits_a_family_or_leaves_a_gap_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)  # test-only
    shape, _, _, levels = make_problem(rng, 2, with_invariants=False, most=4)
    plan, read = as_stream(rng, levels)
    lowest = plan[-1]
    n = len(lowest.parent)
    inside = [i for i in range(1, n) if lowest.parent[i] == lowest.parent[i - 1]]
    assert inside  # this seed's tree has a family of several children
    split = StreamLevel(lowest.parent, lowest.queries, lowest.invariants, [(0, inside[0]), (inside[0], n)])
    with pytest.raises(ValueError, match="splits"):
        solve_gls_streamed([plan[0], split], shape, read, ScratchCubes(tmp_path, shape))
    gap = StreamLevel(lowest.parent, lowest.queries, lowest.invariants, [(0, n - 1)])
    with pytest.raises(ValueError):
        solve_gls_streamed([plan[0], gap], shape, read, ScratchCubes(tmp_path, shape))
    assert not list(tmp_path.rglob("*.f64"))


def test_the_lowest_level_runs_as_self_contained_jobs(tmp_path: Path) -> None:
    """The lowest level's up pass runs through ``lowest_sums`` (a runner's workers in a release) and its estimates
    through ``lowest_chunk``: pickled jobs that need only the chunk's own measurements give ``solve_gls``'s answer."""
    rng = np.random.default_rng(3)  # test-only
    shape, _, _, levels = make_problem(rng, 4, with_invariants=True)
    plan, read = as_stream(rng, levels)
    dense = solve_gls(levels, shape)
    lowest = len(plan) - 1
    ran: list[tuple[int, int]] = []

    def elsewhere(chunks: Iterator[LowestChunk]) -> Iterator[np.ndarray]:
        for chunk in chunks:
            job = pickle.loads(pickle.dumps(chunk))
            assert job.parent_gap is None  # the up pass needs no parent
            ran.append((job.start, job.stop))
            yield job.children_sums(*read(lowest, job.start, job.stop))

    with solve_gls_streamed(plan, shape, read, ScratchCubes(tmp_path, shape), elsewhere) as stream:
        assert ran == [tuple(c) for c in plan[lowest].chunks]
        for start, stop in plan[lowest].chunks:
            job = pickle.loads(pickle.dumps(stream.lowest_chunk(start, stop)))
            _close(job.estimate(*read(lowest, start, stop)), dense.estimates[lowest][start:stop])
        for level in range(lowest):
            for start, stop in plan[level].chunks:
                _close(stream.estimate(level, start, stop), dense.estimates[level][start:stop])
    with pytest.raises(ValueError, match="not attached"):
        dataclasses.replace(job, parent_gap=None).estimate(*read(lowest, job.start, job.stop))


def test_a_lowest_up_pass_that_returns_too_few_sums_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)  # test-only
    shape, _, _, levels = make_problem(rng, 3, with_invariants=False)
    plan, read = as_stream(rng, levels)

    def short(chunks: Iterator[LowestChunk]) -> Iterator[np.ndarray]:
        for chunk in list(chunks)[:-1]:
            yield chunk.children_sums(*read(chunk.level, chunk.start, chunk.stop))

    with pytest.raises(ValueError, match="shorter"):  # at once, not when the level above reads a row never written
        solve_gls_streamed(plan, shape, read, ScratchCubes(tmp_path, shape), short)
    assert not any(tmp_path.iterdir())


@settings(max_examples=200, deadline=None)
@given(families=st.lists(st.integers(1, 6), min_size=1, max_size=30), rows=st.integers(1, 12), data=st.data())
def test_family_slices_cut_between_families_only(families: list[int], rows: int, data: st.DataObject) -> None:
    parent = np.repeat(np.arange(len(families)), families)
    bounds = np.concatenate([[0], np.cumsum(families)])
    first = data.draw(st.integers(0, len(families) - 1))  # a chunk of whole families
    last = data.draw(st.integers(first + 1, len(families)))
    start, stop = int(bounds[first]), int(bounds[last])
    slices = list(family_slices(parent, start, stop, rows))
    assert [lo for lo, _ in slices] == [start] + [hi for _, hi in slices[:-1]]  # consecutive, in order
    assert slices[-1][1] == stop and all(hi > lo for lo, hi in slices)
    for lo, hi in slices:
        assert hi == stop or parent[hi] != parent[hi - 1]  # no family cut in two
        assert hi - lo <= rows or parent[lo] == parent[hi - 1]  # within the bound, or one family
        # no slice stops short of the bound where the next family would have fitted
        assert hi == stop or hi - lo + int(np.sum(parent == parent[hi])) > rows
    assert list(family_slices(None, 0, 5, 2)) == [(0, 2), (2, 4), (4, 5)]  # the root level: no families


def test_the_passes_above_the_lowest_level_go_slice_by_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With slices of one node's cells, every z̃ and x̂ written above the lowest level is one family (or the root
    level's one node); the estimates are the whole chunks' (``test_the_streamed_gls_equals_solve_gls``)."""
    rng = np.random.default_rng(5)  # test-only
    shape, _, _, levels = make_problem(rng, 4, with_invariants=True)
    plan, read = as_stream(rng, levels)
    written = _spy_writes(monkeypatch)
    lowest = len(plan) - 1
    with solve_gls_streamed(plan, shape, read, ScratchCubes(tmp_path, shape), slice_cells=1):
        pass
    for level in range(1, lowest):
        families = np.bincount(plan[level].parent)
        sizes = [n for kind, lv, n in written if kind in ("up", "final") and lv == level]
        assert sorted(sizes) == sorted(2 * [int(f) for f in families if f])  # one write per family and pass
        assert len(plan[level].chunks) < len(sizes)  # (so chunks were sliced)


def test_a_chunks_arrays_are_freed_before_the_next_chunk_is_read(tmp_path: Path) -> None:
    """Above the lowest level the up pass drops a chunk's measurements (and the slices' views of them) before it
    reads the next chunk: the driver never holds two chunks' data at once."""
    import weakref

    rng = np.random.default_rng(9)  # test-only
    shape, _, _, levels = make_problem(rng, 4, with_invariants=True)
    plan, read = as_stream(rng, levels)
    alive: list[weakref.ref[np.ndarray]] = []
    checked: list[int] = []

    def tracked(level: int, start: int, stop: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if level < len(plan) - 1:  # the levels the up pass reads itself
            checked.append(sum(ref() is not None for ref in alive))
        noisy, values = read(level, start, stop)
        noisy, values = [a.copy() for a in noisy], [v.copy() for v in values]  # arrays of this read alone
        alive[:] = [weakref.ref(a) for a in [*noisy, *values]]
        return noisy, values

    with solve_gls_streamed(plan, shape, tracked, ScratchCubes(tmp_path, shape), slice_cells=1):
        pass
    assert len(checked) > 2 and checked[1:] == [0] * (len(checked) - 1), checked


def test_scratch_rows_are_read_back_by_range_and_a_short_file_is_refused(tmp_path: Path) -> None:
    from censusdp.pipeline.io.gls_scratch import read_rows

    store = ScratchCubes(tmp_path, (2, 3))
    cube = np.arange(4 * 6, dtype=np.float64).reshape(4, 2, 3)
    store.write("final", 1, cube[:3])
    store.write("final", 1, cube[3:])
    assert store.written("final", 1) == 4 and store.written("final", 0) == 0
    np.testing.assert_array_equal(read_rows(store.path("final", 1), 1, 3, (2, 3)), cube[1:3])
    np.testing.assert_array_equal(store.read("final", 1, 0, 4), cube)
    with pytest.raises(ValueError, match="not written"):
        read_rows(store.path("final", 1), 2, 5, (2, 3))
    store.close()
