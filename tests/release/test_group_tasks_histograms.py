"""``group_tasks.chunk_histograms``: a chunk's dense histograms from a group's sorted runs of keys, counted a
bounded slice at a time, equal the histograms of the records counted at once, whatever the runs and the slice."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.release.group_tasks import chunk_histograms


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_records=st.integers(0, 400), n_runs=st.integers(1, 6),
       slice_keys=st.integers(1, 50), n_units=st.integers(1, 12), n_cells=st.integers(1, 5))
def test_a_chunk_counts_every_record_of_its_nodes_once(seed: int, n_records: int, n_runs: int, slice_keys: int,
                                                       n_units: int, n_cells: int) -> None:
    rng = np.random.default_rng(seed)
    units = rng.integers(0, n_units, n_records)
    cells = rng.integers(0, n_cells, n_records)
    # the level's nodes: consecutive units under one node (ancestors non-decreasing, as a tree's are)
    ancestors = np.cumsum(np.concatenate([[0], rng.integers(0, 2, n_units - 1)])).astype(np.int64)
    n_nodes = int(ancestors[-1]) + 1
    unit_offsets = np.concatenate([[0], np.cumsum(np.bincount(ancestors, minlength=n_nodes))]).astype(np.int64)
    truth = np.zeros((n_nodes, n_cells), dtype=np.int64)
    np.add.at(truth, (ancestors[units], cells), 1)
    keys = units * n_cells + cells
    runs = [np.sort(run) for run in np.array_split(keys, n_runs)]  # one sorted run per input batch
    start = int(rng.integers(0, n_nodes))
    stop = int(rng.integers(start + 1, n_nodes + 1))
    counted = chunk_histograms(runs, unit_offsets, ancestors, start, stop, n_cells, slice_keys=slice_keys)
    assert counted.shape == (stop - start, n_cells) and counted.dtype == np.int64
    assert np.array_equal(counted, truth[start:stop])


def test_slices_bound_what_is_counted_at_once(monkeypatch) -> None:  # noqa: ANN001
    """A chunk holding every record is counted in slices of at most ``slice_keys`` (plus one run's remainder)."""
    import censusdp.pipeline.release.group_tasks as groups

    sizes: list[int] = []
    real = np.bincount

    def bincount(values: np.ndarray, minlength: int = 0) -> np.ndarray:
        sizes.append(len(values))
        return real(values, minlength=minlength)

    monkeypatch.setattr(groups.np, "bincount", bincount)
    keys = np.arange(1000, dtype=np.int64)  # one unit per key, one cell
    runs = [keys[:300], keys[300:]]
    ancestors = np.zeros(1000, dtype=np.int64)  # one node holds every unit
    counted = groups.chunk_histograms(runs, np.array([0, 1000]), ancestors, 0, 1, 1, slice_keys=128)
    assert counted.tolist() == [[1000]]
    assert max(sizes) < 2 * 128 and sum(sizes) == 1000
