from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.config.schema import Attribute, Schema


def schema_of(sizes: list[int]) -> Schema:
    return Schema(tuple(Attribute(f"a{i}", f"A{i}", tuple(str(v) for v in range(n))) for i, n in enumerate(sizes)))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_marginal_equals_query_matrix_product(sizes: list[int], data: st.DataObject) -> None:
    schema = schema_of(sizes)
    keep = data.draw(st.permutations(schema.names).map(lambda p: p[: data.draw(st.integers(0, len(p)))]))
    name = " * ".join(keep) if keep else "total"
    query = schema.parse_query(name)
    rng = np.random.default_rng(len(sizes))  # test-only
    hist = rng.integers(0, 5, size=(3, schema.n_cells))
    by_sum = schema.marginal(query, hist)
    by_matrix = (schema.query_matrix(query) @ hist.T).T
    assert np.array_equal(by_sum, by_matrix)
    assert by_sum.sum() == hist.sum()


def test_query_cells_follow_the_named_order() -> None:
    schema = schema_of([2, 3])
    hist = np.zeros((1, 6), dtype=np.int64)
    hist[0, np.ravel_multi_index((1, 2), (2, 3))] = 7  # a0 = 1, a1 = 2
    swapped = schema.marginal(schema.parse_query("a1 * a0"), hist)
    assert swapped.reshape(3, 2)[2, 1] == 7
    labels = schema.cell_labels(schema.parse_query("a1 * a0"))
    assert labels[0][np.ravel_multi_index((2, 1), (3, 2))] == "2"


def test_unknown_attribute_is_named() -> None:
    schema = schema_of([2])
    try:
        schema.parse_query("a0 * nope")
    except ValueError as error:
        assert "nope" in str(error)
    else:
        raise AssertionError("expected ValueError")
