"""Fast exact discrete Gaussian sampling by inversion against certified CDF tables, with lazy refinement.

X = min{k : U* < F(k)} for U* uniform on [0, 1) is exactly N_Z(0, sigma2), F its CDF.  A table holds integers
L_k <= F(k) 2^64 <= H_k (``pipeline.dp.cdf``); a sample draws U, the first 64 bits of U*, and decides X by
1. the guide table, when every U of its cell (U's top bits) is on the same side of every boundary's bounds;
2. else a binary search, when U is outside every boundary's bounds;
3. else ``_refine``: fresh 64-bit digits of U*, decided against ever finer enclosures (``CdfEnclosure.locate``).
Every branch returns the same X for the same U*, so the law is exact (docs/sampling.md).  The discrete Laplace's
tables (``pipeline.dp.laplace_table``) share this machinery and the LRU: a table's ``law`` names its CDF.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from censusdp.pipeline.dp.cdf import CdfEnclosure, LaplaceCdf, cdf_enclosure, laplace_cdf, laplace_difference_enclosure
from censusdp.pipeline.dp.random_source import RandomSource

TABLE_PREC = 128  # enclosure precision the 64-bit tables are rounded from (widths ~2^-126: L, H differ by 1)
TABLE_CACHE_BYTES = 40 << 20  # LRU caps; a table for sigma2 <= 10^6 is <= 1.5 MB; caches together < 64 MB
ENCLOSURE_CACHE_BYTES = 16 << 20  # an enclosure bigger than this is used once and not kept
_CHUNK = 1 << 16  # samples per pass: temporaries stay in L2
_MAX_ROUNDS = 15
GUIDE_BYTES = 1 << 20  # larger guides fall out of L2/L3-friendly sizes and get slower, not faster


@dataclass(frozen=True, eq=False)
class CdfTable:
    """Boundaries t = 0 .. 2K+1 stand for F(t - K - 1); low[t] <= F 2^64 <= high_m1[t] + 1; guide by top bits."""

    parameter: Fraction | tuple[Fraction, int]  # the law's: sigma2, the Laplace scale, or (scale, W)
    kmax: int
    low: np.ndarray  # uint64, nondecreasing
    high_m1: np.ndarray  # uint64, nondecreasing (H - 1, so that H = 2^64 fits)
    guide: np.ndarray  # smallest int dtype holding +-(K+1): X for a pure cell, the dtype's minimum otherwise
    shift: np.uint64  # 64 - guide bits
    law: str = "gaussian"  # the CDF enclosed: "gaussian" (parameter = sigma2), "laplace" (the scale), or
    # "laplace_difference" ((scale, W)): see pipeline.dp.laplace_table

    @property
    def nbytes(self) -> int:
        return self.low.nbytes + self.high_m1.nbytes + self.guide.nbytes

    @property
    def sentinel(self) -> int:
        """The guide value of an impure cell: below -(K+1), so never a sample the guide could hold."""
        return int(np.iinfo(self.guide.dtype).min)


def _guide(low: np.ndarray, high_m1: np.ndarray, kmax: int, bits: int, dtype: type) -> np.ndarray:
    """Guide table: cell c = [c 2^s, (c+1) 2^s - 1], s = 64 - bits, is pure when #{H <= start} == #{L <= end}, for
    then every U in it has #{H <= U} >= #{H <= start} = #{L <= end} >= #{L <= U} >= #{H <= U} (L <= H): one i."""
    s = np.uint64(64 - bits)
    start = np.arange(1 << bits, dtype=np.uint64) << s
    end = start | ((np.uint64(1) << s) - np.uint64(1))
    i = np.searchsorted(high_m1, start, side="left")  # #{H - 1 < start} = #{H <= start}
    j = np.searchsorted(low, end, side="right")  # #{L <= end}
    pure = (i == j) & (i > 0) & (i < low.size)
    return np.where(pure, i.astype(np.int64) - (kmax + 1), np.iinfo(dtype).min).astype(dtype)


def table_from_bounds(
    sigma2: Fraction, kmax: int, low: np.ndarray, high_m1: np.ndarray, law: str = "gaussian"
) -> CdfTable:
    """A table from bounds of the CDF ``law`` names (``sigma2`` is its parameter), which ``_refine`` continues."""
    if law not in _ENCLOSURES:
        raise ValueError(f"unknown law {law!r}")
    low = np.ascontiguousarray(low, dtype=np.uint64)
    high_m1 = np.ascontiguousarray(high_m1, dtype=np.uint64)
    if low.size != 2 * kmax + 2 or high_m1.size != low.size or kmax < 0:
        raise ValueError("need 2 kmax + 2 boundaries")
    if np.any(low[1:] < low[:-1]) or np.any(high_m1[1:] < high_m1[:-1]):
        raise ValueError("boundary bounds must be nondecreasing")
    dtype = next(t for t in (np.int16, np.int32, np.int64) if np.iinfo(t).max > kmax + 1)
    cap = (GUIDE_BYTES // np.dtype(dtype).itemsize).bit_length() - 1
    bits = min(max(int(low.size).bit_length() + 6, 10), cap)  # ~64 cells per boundary, guide <= GUIDE_BYTES
    guide = _guide(low, high_m1, kmax, bits, dtype)
    return CdfTable(sigma2, kmax, low, high_m1, guide, np.uint64(64 - bits), law)


def build_table(sigma2: Fraction, *, widen: int = 0, kmax: int | None = None) -> CdfTable:
    """The table for sigma2: L = floor(lo / 2^64), H = ceil(hi / 2^64) from a ``TABLE_PREC``-bit enclosure, K the
    least k >= 0 with G(K+1) <= 2^-64 surely.  ``widen`` and ``kmax`` (tests only) keep the bounds valid."""
    enc = _enclosure(sigma2, TABLE_PREC)
    scale = TABLE_PREC - 64
    if kmax is None:
        kmax = next((k for k in range(enc.jmax + 1) if enc.g_hi[k] <= 1 << scale), enc.jmax)
    kmax = min(kmax, enc.jmax)
    ks = range(-kmax - 1, kmax + 1)
    low = [max((enc.lo(k) >> scale) - widen, 0) for k in ks]
    high_m1 = [min(max(-(-enc.hi(k) >> scale), 1) + widen, 1 << 64) - 1 for k in ks]  # 1 <= H <= 2^64
    return table_from_bounds(sigma2, kmax, np.array(low, dtype=np.uint64), np.array(high_m1, dtype=np.uint64))


_lock = threading.Lock()
_tables: OrderedDict[Fraction, CdfTable] = OrderedDict()
_enclosures: OrderedDict[tuple, CdfEnclosure | LaplaceCdf] = OrderedDict()
_ENCLOSURES = {"gaussian": cdf_enclosure, "laplace": laplace_cdf, "laplace_difference": laplace_difference_enclosure}


def _enclosure(sigma2: Fraction, prec: int, law: str = "gaussian") -> CdfEnclosure | LaplaceCdf:
    """``cdf_enclosure`` (or ``laplace_cdf``) through a small LRU (the table's one is reused by refinement)."""
    key = (sigma2, prec) if law == "gaussian" else (law, sigma2, prec)
    with _lock:
        if key in _enclosures:
            _enclosures.move_to_end(key)
            return _enclosures[key]
    enc = _ENCLOSURES[law](sigma2, prec)
    with _lock:
        _enclosures[key] = enc
        while _enclosures and sum(e.nbytes for e in _enclosures.values()) > ENCLOSURE_CACHE_BYTES:
            _enclosures.popitem(last=False)
    return enc


def get_table(sigma2: Fraction) -> CdfTable:
    """The cached table for sigma2, built on first use; least recently used tables beyond the byte cap go."""
    return cached_table(sigma2, build_table)


def cached_table(key: object, build) -> CdfTable:
    """``build(key)`` through the one table LRU of every law (keys: sigma2, or a tuple naming the law)."""
    with _lock:
        if key in _tables:
            _tables.move_to_end(key)
            return _tables[key]
    table = build(key)
    with _lock:
        _tables[key] = table
        while len(_tables) > 1 and sum(t.nbytes for t in _tables.values()) > TABLE_CACHE_BYTES:
            _tables.popitem(last=False)
    return table


def clear_caches() -> None:
    with _lock:
        _tables.clear()
        _enclosures.clear()


def _refine(sigma2: Fraction, u: np.ndarray, rng: RandomSource, law: str = "gaussian") -> np.ndarray:
    """Finish the samples 64 bits did not decide (branch 3): each round appends 64 fresh bits and decides anew."""
    values = [int(x) for x in u]
    out = np.empty(len(values), dtype=np.int64)
    todo = list(range(len(values)))
    for rnd in range(1, _MAX_ROUNDS + 1):
        bits = 64 * (rnd + 1)
        enc = _enclosure(sigma2, bits) if law == "gaussian" else _enclosure(sigma2, bits, law)
        digits = rng.uniform_uint64(len(todo))
        left = []
        for pos, digit in zip(todo, digits, strict=True):
            values[pos] = (values[pos] << 64) | int(digit)
            x = enc.locate(values[pos], bits)
            if x is None:
                left.append(pos)
            else:
                out[pos] = x
        todo = left
        if not todo:
            return out
    raise ArithmeticError(f"discrete {law} refinement did not converge (probability < 2^-900)")


def sample_table(table: CdfTable, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` iid exact draws of the table's law by inversion, in chunks of ``_CHUNK`` (temporaries in cache)."""
    out = np.empty(size, dtype=np.int64)
    cells = np.empty(min(size, _CHUNK), dtype=np.uint64)
    guide, shift, sentinel = table.guide, table.shift, table.sentinel
    found = np.empty(min(size, _CHUNK), dtype=guide.dtype)
    for start in range(0, size, _CHUNK):
        n = min(_CHUNK, size - start)
        u = rng.uniform_uint64(n)
        chunk = out[start : start + n]
        np.right_shift(u, shift, out=cells[:n])
        np.take(guide, cells[:n].view(np.int64), out=found[:n], mode="clip")  # branch 1 (indices < 2^g)
        chunk[...] = found[:n]
        impure = np.flatnonzero(found[:n] == sentinel)
        if impure.size == 0:
            continue
        chunk[impure] = resolve_impure(table, u[impure], rng)
    return out


def resolve_impure(table: CdfTable, uu: np.ndarray, rng: RandomSource) -> np.ndarray:
    """X for U's whose guide cell is impure: branch 2 (binary search), else branch 3 (``_refine``)."""
    low, high_m1 = table.low, table.high_m1
    i = np.searchsorted(high_m1, uu, side="left")  # branch 2: #{H <= U}
    ok = (i > 0) & (i < low.size)
    ok[ok] = uu[ok] < low[i[ok]]
    x = i.astype(np.int64) - (table.kmax + 1)
    if not ok.all():  # branch 3
        x[~ok] = _refine(table.parameter, uu[~ok], rng, table.law)
    return x
