"""Uniform random bits for the noise samplers: the OS CSPRNG in production, a seeded stream in tests.

Their only source (never ``numpy.random``): AES-256-CTR keyed and rekeyed from ``os.urandom``, or by a seed in tests
(never publishable; docs/sampling.md).  ``uniform_below`` is exact (rejection sampling).  Not thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Protocol, runtime_checkable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MAX_BOUND = 1 << 62  # largest bound for uniform_below; keeps results and bound*K arithmetic inside int64
_CHUNK_BYTES = 1 << 20  # keystream is produced 1 MiB at a time: one AES call per block, not per sample
_REKEY_BYTES = 1 << 30  # production source: fresh OS key after this much output


@runtime_checkable
class RandomSource(Protocol):
    """A source of independent uniform random integers (the samplers' only randomness)."""

    name: str  # for the manifest, e.g. "AES-256-CTR keyed by os.urandom ..." or "seeded ... (TEST ONLY ...)"
    publishable: bool  # True only for the OS-CSPRNG-backed source
    can_draw: bool  # False for a stand-in of a run whose noise was already drawn (post-processing re-runs)

    def uniform_uint64(self, size: int) -> np.ndarray:
        """``size`` independent integers, uniform on [0, 2^64), dtype uint64."""
        ...

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        """``size`` independent integers, exactly uniform on [0, bound), dtype int64; 1 <= bound <= 2^62."""
        ...

    def bind(self, secret: bytes) -> None:
        """Called once per release before any draw with a secret of the run; a seeded source re-keys from it."""
        ...


class _AesCtrSource:
    """AES-256-CTR keystream served from a 1 MiB buffer; rekeys from ``os.urandom`` if ``rekey_from_os``."""

    can_draw = True

    def __init__(self, key: bytes, name: str, publishable: bool, rekey_from_os: bool,
                 seed: int | None = None) -> None:
        self.name = name
        self.publishable = publishable
        self._rekey_from_os = rekey_from_os
        self._seed = seed
        self._zeros = bytes(_CHUNK_BYTES)
        self._scratch = bytearray(_CHUNK_BYTES + 15)  # update_into needs block_size - 1 spare bytes
        self._set_key(key)

    def _set_key(self, key: bytes) -> None:
        # Counter starts at zero; every key is used for one stream only, so the counter never repeats.
        self._encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
        self._words = np.empty(0, dtype="<u8")
        self._pos = 0
        self._since_key = 0
        self._pid = os.getpid()

    def bind(self, secret: bytes) -> None:
        """A seeded stream becomes HMAC-SHA256(secret, seed)-keyed: reproducible, not predictable from its seed."""
        if self._seed is None:
            return
        self._set_key(hmac.new(secret, str(self._seed).encode("ascii"), hashlib.sha256).digest())
        self.name = (f"seeded AES-256-CTR, seed={self._seed}, keyed by the ledger's secret and the data's "
                     "fingerprint (TEST ONLY, not publishable)")

    def _refill(self) -> None:
        if self._rekey_from_os and (os.getpid() != self._pid or self._since_key >= _REKEY_BYTES):
            # after a fork the child would replay the parent's keystream; rekeying also bounds the output per key
            self._set_key(os.urandom(32))
        self._encryptor.update_into(self._zeros, self._scratch)
        self._words = np.frombuffer(self._scratch, dtype="<u8", count=_CHUNK_BYTES // 8)
        self._pos = 0
        self._since_key += _CHUNK_BYTES

    def uniform_uint64(self, size: int) -> np.ndarray:
        size = _check_size(size)
        if self._rekey_from_os and os.getpid() != self._pid:
            self._pos = len(self._words)  # discard bytes buffered before a fork
        out = np.empty(size, dtype=np.uint64)
        filled = 0
        while filled < size:
            if self._pos == len(self._words):
                self._refill()
            take = min(size - filled, len(self._words) - self._pos)
            out[filled : filled + take] = self._words[self._pos : self._pos + take]
            self._pos += take
            filled += take
        return out

    def _uniform_uint32(self, size: int) -> np.ndarray:
        # Half the bytes of uint64 draws; used when bound <= 2^32, as in nearly every call the samplers make.
        words = self.uniform_uint64((size + 1) // 2)
        return words.view("<u4")[:size].astype(np.uint32)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        bound = _check_bound(bound)
        size = _check_size(size)
        if bound == 1:
            return np.zeros(size, dtype=np.int64)
        if bound & (bound - 1) == 0:  # power of two: masking is exact, nothing to reject
            return (self.uniform_uint64(size) & np.uint64(bound - 1)).astype(np.int64)
        bits, draw = (32, self._uniform_uint32) if bound <= 1 << 32 else (64, self.uniform_uint64)
        dtype = np.uint32 if bits == 32 else np.uint64
        # accept x < limit, the largest multiple of bound <= 2^bits (rejects < 1/4): x % bound is exactly uniform
        limit = dtype((1 << bits) - (1 << bits) % bound)  # < 2^bits because bound is not a power of two
        out = np.empty(size, dtype=np.int64)
        filled = 0
        while filled < size:
            x = draw(size - filled)
            x = x[x < limit]
            out[filled : filled + x.size] = x % dtype(bound)
            filled += x.size
        return out


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got {size!r}")
    return int(size)


def _check_bound(bound: int) -> int:
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or not 1 <= bound <= MAX_BOUND:
        raise ValueError(f"bound must be an integer in [1, 2^62], got {bound!r}")
    return int(bound)


def system_random_source() -> RandomSource:
    """The production source: AES-256-CTR keyed (and periodically rekeyed) from ``os.urandom``."""
    return _AesCtrSource(
        os.urandom(32),
        name="AES-256-CTR keystream keyed by os.urandom(32) (OS CSPRNG), rekeyed every 1 GiB and on fork",
        publishable=True,
        rekey_from_os=True,
    )


def substream_key(source: RandomSource, label: str) -> bytes | None:
    """The key of an independent stream for one chunk of a release's noise (``label`` names the chunk), or None.

    A publishable source never hands key material on: None means a fresh ``system_random_source()`` wherever the
    chunk is measured.  A test source returns HMAC-SHA256(32 bytes it draws, label), the same on any worker."""
    if source.publishable:
        return None
    return hmac.new(source.uniform_uint64(4).tobytes(), label.encode(), hashlib.sha256).digest()


def substream_source(key: bytes | None) -> RandomSource:
    """The source of one chunk (``substream_key``): the OS CSPRNG for None, else a seeded stream (TESTS ONLY)."""
    if key is None:
        return system_random_source()
    if not isinstance(key, bytes) or len(key) != 32:
        raise ValueError("a substream key is 32 bytes")
    return _AesCtrSource(key, name="seeded AES-256-CTR substream (TEST ONLY, not publishable)", publishable=False,
                         rekey_from_os=False)


def seeded_random_source(seed: int) -> RandomSource:
    """A deterministic AES-256-CTR stream keyed by SHA-256(str(seed)). TESTS ONLY: never publishable."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    key = hashlib.sha256(str(int(seed)).encode("ascii")).digest()
    return _AesCtrSource(
        key,
        name=f"seeded AES-256-CTR, seed={int(seed)} (TEST ONLY, not publishable)",
        publishable=False,
        rekey_from_os=False,
        seed=int(seed),
    )
