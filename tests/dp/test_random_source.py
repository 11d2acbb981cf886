"""Tests of pipeline.dp.random_source: exact uniformity, determinism of the test source, freshness of the
production source, and the flags the manifest relies on."""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from censusdp.pipeline.dp import random_source
from censusdp.pipeline.dp.random_source import RandomSource, seeded_random_source, system_random_source
from tests.helpers import cks_reference

ALPHA = cks_reference.ALPHA


def _equal_bins_pvalue(values: np.ndarray, bound: int, n_bins: int) -> float:
    """Chi-square p-value of values in [0, bound) over n_bins bins with exact integer edges."""
    edges = np.array([-(-j * bound // n_bins) for j in range(n_bins + 1)], dtype=object)
    probs = np.array([int(edges[j + 1] - edges[j]) / bound for j in range(n_bins)])
    idx = np.searchsorted(edges[1:-1].astype(np.int64), values, side="right")
    obs = np.bincount(idx, minlength=n_bins)
    return float(stats.chisquare(obs, probs * values.size).pvalue)


# bound 3: tiny; 3*2^30: 32-bit path rejecting 25%; 2^32 + 1: 64-bit path; 3*2^60 + 12345: 64-bit path
# where plain modulo would be biased by 20%.
BOUNDS = [3, 3 * 2**30, 2**32 + 1, 3 * 2**60 + 12345]


@pytest.mark.parametrize("bound", BOUNDS)
def test_uniform_below_is_uniform(bound: int) -> None:
    x = seeded_random_source(21).uniform_below(bound, 300_000)
    assert x.dtype == np.int64 and x.min() >= 0 and x.max() < bound
    assert _equal_bins_pvalue(x, bound, min(bound, 16)) > ALPHA


@pytest.mark.parametrize("bound", [BOUNDS[1], BOUNDS[3]])  # 2^32 + 1: bias ~2^-32, invisible
def test_power_modulo_without_rejection_is_caught(bound: int) -> None:
    """The naive x % bound (no rejection) is biased for these bounds; the same test must see it."""
    words = seeded_random_source(22).uniform_uint64(300_000)
    if bound < 2**32:
        words = words & np.uint64(2**32 - 1)
    x = (words % np.uint64(bound)).astype(np.int64)
    assert _equal_bins_pvalue(x, bound, 16) < ALPHA


def test_uniform_uint64_bytes_are_uniform() -> None:
    w = seeded_random_source(23).uniform_uint64(200_000)
    for shift in (0, 56):
        assert (
            _equal_bins_pvalue(((w >> np.uint64(shift)) & np.uint64(255)).astype(np.int64), 256, 256) > ALPHA
        )


def test_seeded_source_is_the_documented_aes_ctr_stream() -> None:
    key = hashlib.sha256(b"42").digest()
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(80))
    assert np.array_equal(seeded_random_source(42).uniform_uint64(10), np.frombuffer(stream, dtype="<u8"))


def test_seeded_source_is_deterministic_and_chunking_invariant() -> None:
    a, b = seeded_random_source(7), seeded_random_source(7)
    whole = a.uniform_uint64(300_000)  # crosses the 1 MiB buffer boundary
    parts = np.concatenate([b.uniform_uint64(5), b.uniform_uint64(200_000), b.uniform_uint64(99_995)])
    assert np.array_equal(whole, parts)
    assert np.array_equal(
        seeded_random_source(7).uniform_below(999, 50), seeded_random_source(7).uniform_below(999, 50)
    )
    assert not np.array_equal(
        seeded_random_source(8).uniform_uint64(4), seeded_random_source(7).uniform_uint64(4)
    )


def test_system_source_is_fresh_each_time() -> None:
    assert not np.array_equal(
        system_random_source().uniform_uint64(4), system_random_source().uniform_uint64(4)
    )


def test_flags_and_names() -> None:
    prod, test = system_random_source(), seeded_random_source(3)
    assert isinstance(prod, RandomSource) and isinstance(test, RandomSource)
    assert prod.publishable is True and "os.urandom" in prod.name
    assert test.publishable is False and "TEST ONLY" in test.name and "seed=3" in test.name


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs a plain POSIX fork")
def test_system_source_rekeys_after_fork() -> None:
    src = system_random_source()
    src.uniform_uint64(1)  # fill the buffer before forking
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next words and leave without running pytest's teardown
        os.write(write, src.uniform_uint64(4).tobytes())
        os._exit(0)
    os.waitpid(pid, 0)
    child = np.frombuffer(os.read(read, 32), dtype=np.uint64)
    os.close(read)
    os.close(write)
    assert not np.array_equal(child, src.uniform_uint64(4))


def test_system_source_rekeys_periodically(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random_source, "_REKEY_BYTES", 1)
    src = system_random_source()
    src.uniform_uint64(1)
    first = src._encryptor
    src.uniform_uint64(2 * random_source._CHUNK_BYTES // 8)
    assert src._encryptor is not first


@pytest.mark.parametrize(("bound", "size"), [(0, 1), (2**62 + 1, 1), (True, 1), (2.0, 1), (5, -1), (5, 1.5)])
def test_validation(bound: object, size: object) -> None:
    with pytest.raises(ValueError, match="bound|size"):
        seeded_random_source(1).uniform_below(bound, size)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        seeded_random_source(1.5)  # type: ignore[arg-type]


def test_edge_bounds() -> None:
    src = seeded_random_source(4)
    assert not src.uniform_below(1, 10).any()
    assert src.uniform_below(2**62, 1000).max() < 2**62
    assert src.uniform_below(5, 0).shape == (0,)
