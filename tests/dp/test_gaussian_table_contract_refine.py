"""Contract tests of the table sampler (pipeline.dp.gaussian_table), continued: refinement of undecided samples
(one further 64-bit digit per undecided sample per round, beyond the table on both sides, 15 rounds at most) and
the two LRU caches.  Exact and deterministic, against mpmath (``tests.helpers.table_reference``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from censusdp.pipeline.dp import gaussian_table as nt
from censusdp.pipeline.dp.cdf import CdfEnclosure, LaplaceCdf, cdf_enclosure
from tests.helpers.table_reference import (
    MASK,
    ScriptedSource,
    digits,
    gaussian_cdf,
    invert,
    laplace_cdf,
)

# ---- refinement -----------------------------------------------------------------------------------------


def undecided_at(prec: int, enc: CdfEnclosure | LaplaceCdf, k: int) -> int:
    """A prec-bit value inside the enclosure of F(k) (so ``locate`` cannot decide it at prec bits)."""
    v = enc.lo(k)
    assert enc.locate(v, prec) is None
    return v


@pytest.mark.parametrize("law", ["gaussian", "laplace"])
def test_refine_over_three_rounds(law: str, fresh_caches: None) -> None:
    """U* chosen inside the 128- and 192-bit enclosures of boundaries: rounds 1 and 2 leave them undecided, so
    they take digits 1, 2 and 3; others finish earlier.  Each round draws one digit per undecided sample."""
    param = Fraction(7, 3)
    cdf = gaussian_cdf(param, range(-60, 61)) if law == "gaussian" else laplace_cdf(param, range(-400, 401))
    enc = (lambda p: cdf_enclosure(param, p)) if law == "gaussian" else (lambda p: LaplaceCdf(param, p))
    e128, e192 = enc(128), enc(192)
    v2 = undecided_at(128, e128, 1)  # undecided after round 1
    v3 = undecided_at(192, e192, -2)  # undecided after rounds 1 and 2
    assert e128.locate(v3 >> 64, 128) is None
    r = digits(15, 12)
    us = [v2 >> 64, 5 << 60, v3 >> 128, (1 << 63) + 12345]
    script = [v2 & MASK, r[0], (v3 >> 64) & MASK, r[1],  # round 1: one digit for each of the four samples
              r[2], v3 & MASK,  # round 2: the first and third, still undecided at 128 bits
              r[3]]  # round 3: the third, still undecided at 192 bits
    rounds = [[0, 1, 2, 3], [0, 2], [2]]  # samples undecided in each round (the 2nd and 4th finish in round 1)
    rng = ScriptedSource(script)
    x = nt._refine(param, np.array(us, dtype=np.uint64), rng, law)
    assert rng.requests == [len(rd) for rd in rounds] and rng.left == 0 and x.dtype == np.int64
    expected = [invert(cdf, (v2 << 64) | r[2], 192), invert(cdf, (5 << 124) | r[0], 128),
                invert(cdf, (v3 << 64) | r[3], 256), invert(cdf, (((1 << 63) + 12345) << 64) | r[1], 128)]
    assert x.tolist() == expected
    keys = set(nt._enclosures)
    if law == "gaussian":
        assert {(param, 128), (param, 192), (param, 256)} <= keys
    else:
        assert {("laplace", param, 128), ("laplace", param, 192), ("laplace", param, 256)} <= keys


def test_refine_beyond_the_table_on_both_sides(fresh_caches: None) -> None:
    s2 = Fraction(1, 2)
    cdf = gaussian_cdf(s2, range(-40, 41))
    r = digits(16, 2)
    rng = ScriptedSource([r[0] >> 20, MASK - (r[1] >> 20)])
    x = nt._refine(s2, np.array([0, MASK], dtype=np.uint64), rng)
    assert rng.requests == [2]
    assert x.tolist() == [invert(cdf, r[0] >> 20, 128), invert(cdf, (MASK << 64) | (MASK - (r[1] >> 20)), 128)]
    assert x[0] < -5 and x[1] > 5


def test_refine_gives_up_after_fifteen_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Useless enclosures never decide: 15 rounds of one digit each, then ArithmeticError naming the law."""
    def useless(sigma2: Fraction, prec: int, law: str = "gaussian") -> CdfEnclosure:
        return CdfEnclosure(sigma2, prec, [0, 0], [1 << prec, 1 << prec])

    monkeypatch.setattr(nt, "_enclosure", useless)
    rng = ScriptedSource(digits(17, 15))
    with pytest.raises(ArithmeticError, match="laplace"):
        nt._refine(Fraction(1), np.array([2**63], dtype=np.uint64), rng, "laplace")
    assert rng.requests == [1] * 15 and nt._MAX_ROUNDS == 15


def test_refine_refuses_a_source_returning_the_wrong_count(fresh_caches: None) -> None:
    rng = ScriptedSource(digits(18, 10), extra=1)
    with pytest.raises(ValueError):
        nt._refine(Fraction(7, 3), np.array([int(nt.build_table(Fraction(7, 3)).low[5])], dtype=np.uint64), rng)


# ---- the two LRU caches ---------------------------------------------------------------------------------


def test_enclosure_cache_keys_and_reuse(fresh_caches: None) -> None:
    a = nt._enclosure(Fraction(5), 128)
    assert nt._enclosure(Fraction(5), 128) is a and isinstance(a, CdfEnclosure) and a.prec == 128
    b = nt._enclosure(Fraction(5), 128, "laplace")
    assert isinstance(b, LaplaceCdf) and (b.scale, b.prec) == (Fraction(5), 128)
    c = nt._enclosure((Fraction(5), 3), 64, "laplace_difference")
    assert c.sigma2 == (Fraction(5), 3)
    assert list(nt._enclosures) == [(Fraction(5), 128), ("laplace", Fraction(5), 128),
                                    ("laplace_difference", (Fraction(5), 3), 64)]
    assert nt._enclosure(Fraction(5), 128, "laplace") is b
    assert list(nt._enclosures)[-1] == ("laplace", Fraction(5), 128)  # a hit moves to the end


def test_enclosure_cache_cap_is_inclusive_and_lru(monkeypatch: pytest.MonkeyPatch, fresh_caches: None) -> None:
    a, b, c = Fraction(5), Fraction(6), Fraction(11, 2)
    sizes = {s: cdf_enclosure(s, 128).nbytes for s in (a, b, c)}
    assert sizes[c] <= sizes[b]
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", sizes[a] + sizes[b])
    nt._enclosure(a, 128)
    nt._enclosure(b, 128)
    assert list(nt._enclosures) == [(a, 128), (b, 128)]  # exactly at the cap: both kept
    nt._enclosure(a, 128)  # a is now the most recent
    nt._enclosure(c, 128)
    assert list(nt._enclosures) == [(a, 128), (c, 128)]  # the least recently used (b) went
    assert sum(e.nbytes for e in nt._enclosures.values()) <= nt.ENCLOSURE_CACHE_BYTES
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", 10)  # bigger than the cap: used once, not kept
    nt.clear_caches()
    e = nt._enclosure(Fraction(5), 128)
    assert isinstance(e, CdfEnclosure) and len(nt._enclosures) == 0


def test_table_cache_cap_is_inclusive_and_lru(monkeypatch: pytest.MonkeyPatch, fresh_caches: None) -> None:
    s5, s6, s11 = Fraction(5), Fraction(6), Fraction(11, 2)
    sizes = {s: nt.build_table(s).nbytes for s in (s5, s6, s11)}
    assert sizes[s11] <= sizes[s6]
    monkeypatch.setattr(nt, "TABLE_CACHE_BYTES", sizes[s5] + sizes[s6])
    a = nt.get_table(s5)
    assert nt.get_table(s5) is a and a.parameter == s5
    nt.get_table(s6)
    assert list(nt._tables) == [s5, s6]  # exactly at the cap: both kept
    nt.get_table(s5)
    nt.get_table(s11)
    assert list(nt._tables) == [s5, s11]  # the least recently used (6) went
    monkeypatch.setattr(nt, "TABLE_CACHE_BYTES", 10)  # one table over the cap is still kept (the newest)
    nt.get_table(s6)
    assert list(nt._tables) == [s6]
    built: list[object] = []
    got = nt.cached_table(("other", 1), lambda key: built.append(key) or a)
    assert got is a and built == [("other", 1)] and list(nt._tables) == [("other", 1)]
