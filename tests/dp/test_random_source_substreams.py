"""Per-chunk noise streams (``substream_key``, ``substream_source``): a production source never hands key material
on, a test source gives every chunk a reproducible stream of its own (docs/dask.md)."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import pytest

from pipeline.dp.random_source import (
    seeded_random_source,
    substream_key,
    substream_source,
    system_random_source,
)


def test_a_publishable_source_never_hands_on_key_material() -> None:
    source = system_random_source()
    assert substream_key(source, "persons:block:0") is None
    chunk = substream_source(None)
    assert chunk.publishable and chunk.can_draw
    # each None is a fresh OS key: two chunk sources do not repeat each other
    assert not np.array_equal(substream_source(None).uniform_uint64(4), substream_source(None).uniform_uint64(4))


def test_a_test_source_gives_each_chunk_its_own_reproducible_stream() -> None:
    first, again = seeded_random_source(5), seeded_random_source(5)
    labels = ["persons:block:0", "persons:block:40", "units:block:0"]
    keys = [substream_key(first, label) for label in labels]
    assert keys == [substream_key(again, label) for label in labels]  # same seed, same plan order
    assert len(set(keys)) == 3 and all(isinstance(k, bytes) and len(k) == 32 for k in keys)
    # the key is HMAC-SHA256(32 bytes drawn from the source, label)
    reference = seeded_random_source(5)
    drawn = reference.uniform_uint64(4).tobytes()
    assert keys[0] == hmac.new(drawn, labels[0].encode(), hashlib.sha256).digest()
    # the label matters: the same draw under another label gives another key
    other = seeded_random_source(5)
    assert substream_key(other, labels[1]) != keys[0]
    streams = [substream_source(k) for k in keys]
    assert all(not s.publishable for s in streams)
    draws = [s.uniform_uint64(8) for s in streams]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2])
    assert np.array_equal(substream_source(keys[0]).uniform_uint64(8), draws[0])  # reproducible
    assert "TEST ONLY" in streams[0].name


def test_a_substream_key_of_another_size_is_refused() -> None:
    for key in (b"", b"x" * 31, b"x" * 33, "x" * 32):
        with pytest.raises(ValueError):
            substream_source(key)  # type: ignore[arg-type]
    assert substream_source(b"x" * 32).uniform_below(7, 3).max() < 7
