"""Fast exact discrete Laplace sampling: the Gaussian's certified-table inversion applied to P(x) ~ exp(-|x|/b).

A closed-form CDF (``pipeline.dp.cdf``) and ``gaussian_table``'s machinery: one table up to ``DIRECT_MAX_SCALE``, above
it X = W A + D from two small tables (``sample_split``).  Why both are exact: docs/sampling.md.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from censusdp.pipeline.dp import gaussian_table as noise_table
from censusdp.pipeline.dp.cdf import laplace_g_bounds
from censusdp.pipeline.dp.random_source import RandomSource

TAIL_BITS = 32  # the table covers all but <= 2^-(TAIL_BITS - 1) of the mass
DIRECT_MAX_SCALE = Fraction(256)  # one table up to here; above, X = W A + D from two small tables
_INT64_MAX = (1 << 63) - 1
_CHUNK = 1 << 15


def _default_kmax(scale: Fraction) -> int:
    """Least K >= 0 with q^(K+1) <= 2^-TAIL_BITS, i.e. K+1 >= TAIL_BITS ln 2 b, rounded up (ln 2 < 0.6932): only
    the table's length depends on it, any K is exact."""
    return max(int(-(-TAIL_BITS * Fraction(6932, 10000) * scale // 1)) - 1, 0)


def build_laplace_table(scale: Fraction, *, widen: int = 0, kmax: int | None = None) -> noise_table.CdfTable:
    """The table for scale b, as ``gaussian_table.build_table`` (``widen`` and ``kmax`` for tests)."""
    kmax = _default_kmax(scale) if kmax is None else kmax
    prec = noise_table.TABLE_PREC
    g_lo, g_hi = laplace_g_bounds(scale, prec, kmax + 1)  # G(m), m = 1 .. K+1
    full, sh = 1 << prec, prec - 64
    # boundary t = 0 .. 2K+1 is F(t - K - 1): F(-m) = G(m) for m = K+1 .. 1, then F(k) = 1 - G(k+1), k = 0 .. K
    lo = g_lo[::-1] + [full - h for h in g_hi]
    hi = g_hi[::-1] + [full - g for g in g_lo]
    low = [max((x >> sh) - widen, 0) for x in lo]
    high_m1 = [min(max(-(-x >> sh), 1) + widen, 1 << 64) - 1 for x in hi]  # 1 <= H <= 2^64
    return noise_table.table_from_bounds(
        scale, kmax, np.array(low, dtype=np.uint64), np.array(high_m1, dtype=np.uint64), law="laplace"
    )


def build_difference_table(scale: Fraction, width: int, *, widen: int = 0) -> noise_table.CdfTable:
    """The table of D = R1 - R2 (``cdf.laplace_difference_enclosure``) on its whole support, |d| < W; F(W - 1) = 1
    exactly, so its L is capped at 2^64 - 1 (still <= F 2^64) and a U equal to it is refined."""
    enc = noise_table._enclosure((scale, width), noise_table.TABLE_PREC, "laplace_difference")
    kmax, sh, top = width - 1, noise_table.TABLE_PREC - 64, (1 << 64) - 1
    ks = range(-kmax - 1, kmax + 1)
    low = [min(max((enc.lo(k) >> sh) - widen, 0), top) for k in ks]
    high_m1 = [min(max(-(-enc.hi(k) >> sh), 1) + widen, 1 << 64) - 1 for k in ks]
    return noise_table.table_from_bounds(
        (scale, width), kmax, np.array(low, dtype=np.uint64), np.array(high_m1, dtype=np.uint64),  # type: ignore[arg-type]
        law="laplace_difference",
    )


def split_width(scale: Fraction) -> int:
    """W for scale > ``DIRECT_MAX_SCALE``: ~sqrt(TAIL_BITS ln 2 b), which balances the two tables' lengths."""
    return max(math.isqrt(int(TAIL_BITS * Fraction(6932, 10000) * scale)), 2)


def get_laplace_table(scale: Fraction) -> noise_table.CdfTable:
    """The cached direct table for this scale (the LRU and byte cap shared with the Gaussian tables)."""
    return noise_table.cached_table(("laplace", scale), lambda key: build_laplace_table(key[1]))


def get_difference_table(scale: Fraction, width: int) -> noise_table.CdfTable:
    return noise_table.cached_table(
        ("laplace_difference", scale, width), lambda key: build_difference_table(key[1], key[2])
    )


def sample_split(scale: Fraction, width: int, size: int, rng: RandomSource, *, tables=None) -> np.ndarray:
    """X = W A + D with A ~ Lap_Z(scale / W) and D = R1 - R2 independent: exactly Lap_Z(scale) (docs/sampling.md).
    ``tables`` (tests only) replaces the two cached tables."""
    a_table, d_table = tables or (get_laplace_table(scale / width), get_difference_table(scale, width))
    out = np.empty(size, dtype=np.int64)
    chunk_n = min(size, _CHUNK)
    ga = np.empty(chunk_n, dtype=a_table.guide.dtype)
    gd = np.empty(chunk_n, dtype=d_table.guide.dtype)
    cells = np.empty(chunk_n, dtype=np.uint64)
    limit = (_INT64_MAX - width) // width
    for start in range(0, size, _CHUNK):
        n = min(_CHUNK, size - start)
        u = rng.uniform_uint64(2 * n)  # U of A, then U of D: independent
        ua, ud = u[:n], u[n:]
        chunk = out[start : start + n]
        np.right_shift(ua, a_table.shift, out=cells[:n])
        np.take(a_table.guide, cells[:n].view(np.int64), out=ga[:n], mode="clip")  # branch 1 for A
        np.right_shift(ud, d_table.shift, out=cells[:n])
        np.take(d_table.guide, cells[:n].view(np.int64), out=gd[:n], mode="clip")  # branch 1 for D
        np.multiply(ga[:n], width, out=chunk, dtype=np.int64)  # in int64: |guide value| W <= (K_A + 1) W < 2^62
        chunk += gd[:n]
        bad_a = np.flatnonzero(ga[:n] == a_table.sentinel)
        bad_d = np.flatnonzero(gd[:n] == d_table.sentinel)
        if bad_a.size == 0 and bad_d.size == 0:
            continue
        a = ga[:n].astype(np.int64)
        d = gd[:n].astype(np.int64)
        a[bad_a] = noise_table.resolve_impure(a_table, ua[bad_a], rng)
        d[bad_d] = noise_table.resolve_impure(d_table, ud[bad_d], rng)
        if int(np.abs(a).max()) > limit:
            raise OverflowError("a discrete Laplace draw does not fit in int64")
        np.multiply(a, width, out=chunk)
        chunk += d
    return out


def sample_laplace_table(scale: Fraction, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` iid exact draws of P(x) ~ exp(-|x|/scale) by inversion (docs/sampling.md: why exact)."""
    if scale <= DIRECT_MAX_SCALE:
        return noise_table.sample_table(get_laplace_table(scale), size, rng)
    return sample_split(scale, split_width(scale), size, rng)
