"""The invariants the driver holds for a whole level are int32 where they fit (``io.histograms.compact_counts``);
their published file and every sum of them stay int64."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from censusdp.pipeline.io.histograms import compact_counts
from censusdp.pipeline.io.measurements import INVARIANTS_FILE, write_invariants
from censusdp.pipeline.release.group_tasks import joined_invariants
from censusdp.postprocess import QueryInvariant

INT32 = np.iinfo(np.int32)


@settings(max_examples=100, deadline=None)
@given(values=arrays(np.int64, st.tuples(st.integers(0, 6), st.integers(1, 3)),
                     elements=st.integers(-(2**40), 2**40)))
def test_values_are_kept_exactly_and_narrowed_only_when_they_fit(values: np.ndarray) -> None:
    compact = compact_counts(values)
    np.testing.assert_array_equal(compact, values)
    fits = values.size == 0 or (values.min() >= INT32.min and values.max() <= INT32.max)
    assert compact.dtype == (np.int32 if fits else np.int64)


def test_the_bounds_of_int32_decide() -> None:
    assert compact_counts(np.array([[INT32.max, INT32.min]], dtype=np.int64)).dtype == np.int32
    assert compact_counts(np.array([[INT32.max + 1]], dtype=np.int64)).dtype == np.int64
    assert compact_counts(np.array([[INT32.min - 1]], dtype=np.int64)).dtype == np.int64


def test_joined_invariants_are_compact_and_their_file_and_sums_int64(tmp_path: Path) -> None:
    matrix = sp.identity(2, format="csr")
    pieces = [[QueryInvariant("q", matrix, np.full((3, 2), 2**30, dtype=np.int64))],
              [QueryInvariant("q", matrix, np.full((4, 2), 2**30, dtype=np.int64))]]
    (joined,) = joined_invariants(pieces)
    assert joined.values.dtype == np.int32 and joined.values.shape == (7, 2)
    assert int(joined.values.sum()) == 14 * 2**30  # numpy sums int32 in int64: no wrap
    geoids = np.array([f"{i:02d}" for i in range(7)])
    write_invariants(tmp_path, [("block", geoids, [joined])])
    table = pq.read_table(tmp_path / INVARIANTS_FILE)
    assert str(table.schema.field("value").type) == "int64"
    assert table.column("value").to_pylist() == [2**30] * 14
    wide = [[QueryInvariant("q", matrix, np.full((1, 2), 2**31, dtype=np.int64))]] + pieces
    assert joined_invariants(wide)[0].values.dtype == np.int64  # a piece that does not fit keeps every value


def test_only_integer_counts_are_compacted() -> None:
    import pytest

    with pytest.raises(TypeError, match="integer counts"):
        compact_counts(np.array([1.5, 2.0]))
