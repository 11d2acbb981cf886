"""Per-chunk noise streams (``substream_key``, ``substream_source``): a production source never hands key material
on, a test source gives every chunk a reproducible stream of its own (docs/dask.md)."""

from __future__ import annotations

import hashlib
import hmac
import os

import numpy as np
import pytest

from censusdp.pipeline.dp.random_source import (
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
    assert all(s.publishable is False for s in streams)
    draws = [s.uniform_uint64(8) for s in streams]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2])
    assert np.array_equal(substream_source(keys[0]).uniform_uint64(8), draws[0])  # reproducible
    assert streams[0].name == "seeded AES-256-CTR substream (TEST ONLY, not publishable)"  # the manifest's words


def test_a_substream_key_of_another_size_is_refused() -> None:
    for key in (b"", b"x" * 31, b"x" * 33, "x" * 32):
        with pytest.raises(ValueError):
            substream_source(key)  # type: ignore[arg-type]
    assert substream_source(b"x" * 32).uniform_below(7, 3).max() < 7


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_seeded_substream_is_the_same_in_a_forked_worker() -> None:
    """A worker forked after the source was made (Dask's nanny forks) continues the same test stream: only the OS
    source rekeys on fork."""
    key = substream_key(seeded_random_source(3), "persons:block:0")
    source = substream_source(key)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its draws, to the parent
        os.write(write, source.uniform_uint64(4).tobytes())
        os._exit(0)
    os.waitpid(pid, 0)
    child = np.frombuffer(os.read(read, 32), dtype=np.uint64)
    assert np.array_equal(child, substream_source(key).uniform_uint64(4))
