"""Contract tests of pipeline.dp.random_source: every output is checked against an independent model of the
documented construction, so they are exact (no statistics).

- The keystream is AES-256-CTR with a zero counter, keyed by SHA-256(str(seed)) for a seeded source, by
  HMAC-SHA256(secret, str(seed)) once bound, and by successive ``os.urandom(32)`` keys for the production
  source, which rekeys at the first 1 MiB refill after ``_REKEY_BYTES`` bytes and after a fork (both forced
  here by monkeypatching ``os.urandom``, ``os.getpid`` and ``_REKEY_BYTES``).
- ``uniform_below`` is exact rejection sampling of those words (masking for powers of two, 32-bit halves of
  the words for bounds <= 2^32), modelled below in plain Python; a word equal to the rejection limit is fed in
  directly to check the boundary.
- Validation errors name the offending parameter in full.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from censusdp.pipeline.dp import random_source
from censusdp.pipeline.dp.random_source import MAX_BOUND, seeded_random_source, system_random_source

CHUNK_WORDS = random_source._CHUNK_BYTES // 8


def aes_words(key: bytes, n: int, skip: int = 0) -> np.ndarray:
    """Words skip .. skip + n - 1 of the AES-256-CTR keystream of ``key`` (counter block 0), little-endian."""
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(8 * (skip + n)))
    return np.frombuffer(stream, dtype="<u8")[skip:].astype(np.uint64)


def seed_key(seed: int) -> bytes:
    return hashlib.sha256(str(seed).encode("ascii")).digest()


class StreamModel:
    """Plain-Python model of ``uniform_uint64`` / ``uniform_below`` over a given word stream."""

    def __init__(self, words: np.ndarray) -> None:
        self.words = [int(w) for w in words]
        self.pos = 0

    def u64(self, n: int) -> list[int]:
        out = self.words[self.pos : self.pos + n]
        assert len(out) == n, "model ran out of words"
        self.pos += n
        return out

    def u32(self, n: int) -> list[int]:
        """(n + 1) // 2 words, each split into its low then high 32-bit half; an odd n drops the last high half."""
        halves = [h for w in self.u64((n + 1) // 2) for h in (w & 0xFFFFFFFF, w >> 32)]
        return halves[:n]

    def below(self, bound: int, n: int) -> list[int]:
        if bound == 1:
            return [0] * n
        if bound & (bound - 1) == 0:
            return [w % bound for w in self.u64(n)]
        bits = 32 if bound <= 1 << 32 else 64
        draw = self.u32 if bits == 32 else self.u64
        limit = (1 << bits) - (1 << bits) % bound  # largest multiple of bound that is <= 2^bits
        out: list[int] = []
        while len(out) < n:
            out += [x % bound for x in draw(n - len(out)) if x < limit]
        return out


# ---- the seeded stream -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 7, -3, np.int64(12), 2**70])
def test_seeded_stream_is_aes_ctr_keyed_by_sha256_of_the_seed(seed: int) -> None:
    """Across several 1 MiB refills and in uneven pieces, the words are exactly the documented keystream."""
    n = 2 * CHUNK_WORDS + 5000
    expected = aes_words(seed_key(int(seed)), n)
    src = seeded_random_source(seed)
    sizes = [1, 0, 4, CHUNK_WORDS - 6, 2, 3, CHUNK_WORDS - 1, n - 2 * CHUNK_WORDS - 3]
    parts = [src.uniform_uint64(k) for k in sizes]
    assert sum(sizes) == n
    assert all(p.dtype == np.uint64 for p in parts)
    assert np.array_equal(np.concatenate(parts), expected)


def test_seeded_source_never_rekeys_and_ignores_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded source is a pure function of its seed: no rekeying after _REKEY_BYTES, and the same stream in a
    forked child (os.getpid changes) as in the parent."""
    monkeypatch.setattr(random_source, "_REKEY_BYTES", 1)
    src = seeded_random_source(5)
    first = src.uniform_uint64(10)
    pid = random_source.os.getpid()
    monkeypatch.setattr(random_source.os, "getpid", lambda: pid + 1)
    rest = src.uniform_uint64(3 * CHUNK_WORDS)
    assert np.array_equal(np.concatenate([first, rest]), aes_words(seed_key(5), 10 + 3 * CHUNK_WORDS))


def test_bind_rekeys_a_seeded_source_from_the_secret() -> None:
    """After bind(secret) the stream is AES-CTR keyed by HMAC-SHA256(secret, str(seed)), from its start."""
    src = seeded_random_source(9)
    src.uniform_uint64(3)
    src.bind(b"ledger-key|fingerprint")
    key = hmac.new(b"ledger-key|fingerprint", b"9", hashlib.sha256).digest()
    assert np.array_equal(src.uniform_uint64(CHUNK_WORDS + 10), aes_words(key, CHUNK_WORDS + 10))
    assert src.name == ("seeded AES-256-CTR, seed=9, keyed by the ledger's secret and the data's fingerprint "
                        "(TEST ONLY, not publishable)")
    assert src.publishable is False


def test_names_and_flags_are_exact() -> None:
    """The manifest prints these names verbatim."""
    assert seeded_random_source(42).name == "seeded AES-256-CTR, seed=42 (TEST ONLY, not publishable)"
    prod = system_random_source()
    assert prod.name == (
        "AES-256-CTR keystream keyed by os.urandom(32) (OS CSPRNG), rekeyed every 1 GiB and on fork"
    )
    assert prod.publishable is True


# ---- the production source, with os.urandom and os.getpid made observable ------------------------------


def fake_urandom(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Replace os.urandom by a deterministic function; returns the list of keys it has handed out."""
    given: list[bytes] = []
    counter = itertools.count()

    def urandom(n: int) -> bytes:
        key = hashlib.sha512(b"key %d" % next(counter)).digest()[:n]
        given.append(key)
        return key

    monkeypatch.setattr(random_source.os, "urandom", urandom)
    return given


def expected_production_stream(keys: list[bytes], refills: int, rekey_bytes: int) -> np.ndarray:
    """The documented rule: at each refill, rekey first if the current key has produced >= rekey_bytes."""
    chunks, key_index, since, used = [], 0, 0, 0
    for _ in range(refills):
        if since >= rekey_bytes:
            key_index, since, used = key_index + 1, 0, 0
        chunks.append(aes_words(keys[key_index], CHUNK_WORDS, skip=used * CHUNK_WORDS))
        since += random_source._CHUNK_BYTES
        used += 1
    return np.concatenate(chunks)


@pytest.mark.parametrize("rekey_chunks", [1, 2, 3])
@pytest.mark.parametrize("extra_bytes", [0, 1])
def test_production_source_rekeys_after_rekey_bytes(
    monkeypatch: pytest.MonkeyPatch, rekey_chunks: int, extra_bytes: int
) -> None:
    keys = fake_urandom(monkeypatch)
    rekey_bytes = rekey_chunks * random_source._CHUNK_BYTES + extra_bytes
    monkeypatch.setattr(random_source, "_REKEY_BYTES", rekey_bytes)
    src = system_random_source()
    refills = 6
    got = np.concatenate([src.uniform_uint64(CHUNK_WORDS // 2) for _ in range(2 * refills)])
    assert all(len(k) == 32 for k in keys)
    assert np.array_equal(got, expected_production_stream(keys, refills, rekey_bytes))


def test_production_source_keeps_one_key_below_rekey_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real 1 GiB threshold, many calls in one process read one keystream: no rekey, nothing dropped."""
    keys = fake_urandom(monkeypatch)
    src = system_random_source()
    got = np.concatenate([src.uniform_uint64(k) for k in (3, 1, 0, CHUNK_WORDS, 7, CHUNK_WORDS - 5)])
    assert len(keys) == 1
    assert np.array_equal(got, aes_words(keys[0], 2 * CHUNK_WORDS + 6))


def test_production_source_bind_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = fake_urandom(monkeypatch)
    src = system_random_source()
    a = src.uniform_uint64(4)
    src.bind(b"secret")
    b = src.uniform_uint64(4)
    assert len(keys) == 1 and np.array_equal(np.concatenate([a, b]), aes_words(keys[0], 8))
    assert src.name.startswith("AES-256-CTR keystream keyed by os.urandom(32)")


def test_production_source_after_fork_drops_its_buffer_and_rekeys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child (new pid) must not replay the parent's buffered words nor continue its keystream: it starts a
    fresh os.urandom key, then keeps it for later calls in the same child."""
    keys = fake_urandom(monkeypatch)
    src = system_random_source()
    parent = src.uniform_uint64(3)
    pid = random_source.os.getpid()
    monkeypatch.setattr(random_source.os, "getpid", lambda: pid + 1)
    child = [src.uniform_uint64(4), src.uniform_uint64(CHUNK_WORDS)]
    assert len(keys) == 2
    assert np.array_equal(parent, aes_words(keys[0], 3))
    assert np.array_equal(np.concatenate(child), aes_words(keys[1], CHUNK_WORDS + 4))


# ---- uniform_below: exact rejection sampling of the stream ----------------------------------------------

BOUNDS = [1, 2, 3, 5, 6, 7, 1000, 2**31 + 1, 3 * 2**30, 2**32 - 1, 2**32, 2**32 + 1, 2**40,
          3 * 2**60 + 12345, 2**62 - 1, 2**62]


@pytest.mark.parametrize("bound", BOUNDS)
def test_uniform_below_is_the_documented_rejection_rule(bound: int) -> None:
    src = seeded_random_source(31)
    model = StreamModel(aes_words(seed_key(31), 40_000))
    for n in (1, 7, 2000, 0, 3, 1001):
        got = src.uniform_below(bound, n)
        assert got.dtype == np.int64 and got.shape == (n,)
        assert got.tolist() == model.below(bound, n)
    # and the stream is left exactly where the model left it
    assert src.uniform_uint64(2).tolist() == model.u64(2)


def scripted(values: list[int], dtype: type = np.uint64) -> Callable[[int], np.ndarray]:
    """A draw function handing out ``values`` in order, so that chosen words reach uniform_below."""
    it: Iterator[int] = iter(values)

    def draw(n: int) -> np.ndarray:
        return np.array([next(it) for _ in range(n)], dtype=dtype)

    return draw


@pytest.mark.parametrize(
    ("bound", "method", "bits"),
    [(3, "_uniform_uint32", 32), (3 * 2**30, "_uniform_uint32", 32), (2**32 - 1, "_uniform_uint32", 32),
     (2**32 + 1, "uniform_uint64", 64), (3 * 2**60 + 12345, "uniform_uint64", 64)],
)
def test_uniform_below_rejects_exactly_from_the_limit(
    monkeypatch: pytest.MonkeyPatch, bound: int, method: str, bits: int
) -> None:
    """limit = 2^bits - (2^bits mod bound): the words limit - 1, 0 and 1 are kept (as (limit - 1) mod bound, 0
    and 1), limit and 2^bits - 1 are rejected."""
    limit = (1 << bits) - (1 << bits) % bound
    src = seeded_random_source(1)
    words = [limit, limit - 1, (1 << bits) - 1, 0, limit, 1]
    monkeypatch.setattr(src, method, scripted(words, np.uint32 if bits == 32 else np.uint64))
    assert src.uniform_below(bound, 3).tolist() == [(limit - 1) % bound, 0, 1]


def test_uniform_below_masks_powers_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    src = seeded_random_source(1)
    words = [2**64 - 1, 2**63 + 5, 12345]
    monkeypatch.setattr(src, "uniform_uint64", scripted(words * 3))
    for bound in (2, 2**32, 2**62):
        assert src.uniform_below(bound, 3).tolist() == [w % bound for w in words]


# ---- validation: errors name the parameter ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("bound", "size", "message"),
    [
        (0, 1, "bound must be an integer in [1, 2^62], got 0"),
        (-5, 1, "bound must be an integer in [1, 2^62], got -5"),
        (MAX_BOUND + 1, 1, f"bound must be an integer in [1, 2^62], got {MAX_BOUND + 1}"),
        (True, 1, "bound must be an integer in [1, 2^62], got True"),
        (2.0, 1, "bound must be an integer in [1, 2^62], got 2.0"),
        ("3", 1, "bound must be an integer in [1, 2^62], got '3'"),
        (5, -1, "size must be an integer >= 0, got -1"),
        (5, 1.0, "size must be an integer >= 0, got 1.0"),
        (5, False, "size must be an integer >= 0, got False"),
        (5, None, "size must be an integer >= 0, got None"),
    ],
)
def test_uniform_below_validation_names_the_parameter(bound: object, size: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        seeded_random_source(1).uniform_below(bound, size)  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize("size", [-1, 2.0, True, "3"])
def test_uniform_uint64_validation_names_size(size: object) -> None:
    with pytest.raises(ValueError) as info:
        seeded_random_source(1).uniform_uint64(size)  # type: ignore[arg-type]
    assert str(info.value) == f"size must be an integer >= 0, got {size!r}"


@pytest.mark.parametrize("seed", [1.0, "7", True, None])
def test_seed_validation_names_seed(seed: object) -> None:
    with pytest.raises(ValueError) as info:
        seeded_random_source(seed)  # type: ignore[arg-type]
    assert str(info.value) == f"seed must be an integer, got {seed!r}"


def test_edge_values_are_accepted() -> None:
    src = seeded_random_source(2)
    assert src.uniform_below(np.int64(1), np.int64(4)).tolist() == [0, 0, 0, 0]
    assert src.uniform_below(1, 5).dtype == np.int64
    assert src.uniform_below(MAX_BOUND, 0).dtype == np.int64
    assert src.uniform_below(np.uint64(6), 0).shape == (0,)
    assert src.uniform_uint64(0).dtype == np.uint64
    assert src.uniform_below(MAX_BOUND, 3).max() < MAX_BOUND
