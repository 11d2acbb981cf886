"""Certified privacy-loss distributions (PLD): epsilon(delta) of the composed release, exactly bounded from above.

The release's loss is the independent sum of the exact losses of the ``cells`` cells a person moves in every query.
A distribution is integers c_j with true mass at (offset + j) * step <= c_j 2^-BITS, and a bound on the mass at
+infinity; every step only moves a loss up or enlarges a mass, so delta(epsilon) is never below the true value
(why this is the worst case over neighbours, and sound: docs/accounting.md).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from flint import arb, ctx, fmpq, fmpz_poly

from censusdp.pipeline.directed_rounding import float_up

BITS = 96  # masses are integers at scale 2^-BITS; each rounding up adds < 2^-96 per entry to delta
PREC = 160  # arb working precision in bits (balls, so precision only affects tightness, never validity)
TAIL_Z = 12  # a cell's noise is enumerated over |o| <= 12 sigma + 2: the rest (< 1e-31) is put at +infinity
GRID_POINTS = 2**14  # at least this many points (at most twice) on the loss grid between floor and cap
FLOOR_Z, CAP_Z = 10, 14  # floor and cap of the grid, in standard deviations of the total loss around its mean
# ``epsilon_pld`` doubles the cap until at most this share of delta is at +infinity
INFINITE_SHARE = Fraction(1, 16)
HALVINGS = 10  # bisections of rho_for_epsilon_pld's bracket [lo, 2 lo]: 2^-10 < 1e-3, its documented tolerance
SEARCH_STEPS = 40  # halvings (or doublings) of rho_for_epsilon_pld's start before it gives up: a factor 2^40
MIN_DELTA = 2.0**-80  # masses are kept at 2^-BITS, each rounded up: no curve holds a smaller delta (None at once)


@dataclass(frozen=True)
class GaussianNoise:
    """One cell of a discrete Gaussian query, N_Z(0, sigma2), sigma2 an exact public Fraction."""

    sigma2: Fraction


@dataclass(frozen=True)
class LaplaceNoise:
    """One cell of a discrete Laplace query, P(o) proportional to exp(-|o|/scale), scale an exact Fraction."""

    scale: Fraction


Noise = GaussianNoise | LaplaceNoise


@dataclass(frozen=True)
class _Lattice:
    """One group of identical cells: mass <= c_s 2^-BITS at loss (top - 2 s) * unit, and <= infinite at +inf."""

    masses: fmpz_poly
    infinite: int
    top: int
    unit: Fraction

    def loss(self, s: int) -> Fraction:
        return (self.top - 2 * s) * self.unit


@dataclass(frozen=True)
class PrivacyCurve:
    """A certified upper bound on delta(epsilon) of a composition: masses c_j 2^-BITS at (offset + j) * step."""

    step: Fraction
    offset: int
    masses: tuple[int, ...]
    infinite: int
    cut: bool = False  # whether the cap moved finite losses to +infinity (else only the lattices' tails are there)

    def delta(self, epsilon: Fraction | float) -> float:
        """delta(epsilon) rounded up: 2^-BITS (infinite + sum_{l_j > epsilon} c_j (1 - e^(epsilon - l_j)))."""
        eps = _fraction(epsilon, "epsilon")
        first = max(0, math.floor(eps / self.step) + 1 - self.offset)  # first j with l_j > epsilon
        with ctx.workprec(PREC):
            total = arb(self.infinite + sum(self.masses[first:])) - arb(_fmpq(eps)).exp() * self._weighted(first)
            return min(1.0, _float_up((total / arb(2) ** BITS).upper()))

    def epsilon(self, delta: float) -> float:
        """The smallest epsilon >= 0 with delta(epsilon) <= ``delta``, rounded up; ValueError below the floor.  On
        [l_{i-1}, l_i] the bound is 2^-BITS (infinite + A_i - e^epsilon B_i), A_i = sum_{j >= i} c_j and
        B_i = sum_{j >= i} c_j e^(-l_j); floats only propose the segment, ``delta`` certifies the answer."""
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
            raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
        scaled = Fraction(delta) * 2**BITS
        if self.infinite >= scaled:
            raise ValueError(f"delta = {delta:g} is at or below the curve's mass at infinity")
        for i in range(self._propose(float(delta)), len(self.masses) + 1):
            top = _float_up(arb(_fmpq((self.offset + i) * self.step)).upper())  # l_i, where segment i ends
            with ctx.workprec(PREC):
                a = arb(self.infinite + sum(self.masses[i:])) - arb(_fmpq(scaled))
                b = self._weighted(i)
                solved = _float_up((a / b).log().upper()) if i < len(self.masses) and a > 0 and b > 0 else top
            eps = max(0.0, min(solved, top))  # the bound is decreasing: the segment's end bounds its root
            if self.delta(eps) <= delta:
                return eps
        raise AssertionError("no grid point meets delta")  # unreachable: past the last mass only infinity is left

    def _propose(self, delta: float) -> int:
        """The first segment whose end meets delta by floats (a proposal only: ``epsilon`` certifies it)."""
        masses = np.array([float(c) for c in self.masses]) * 2.0**-BITS
        grid = (self.offset + np.arange(len(masses))) * float(self.step)
        lo, hi = 0, len(masses)
        while lo < hi:
            mid = (lo + hi) // 2
            value = self.infinite * 2.0**-BITS + float(np.sum(masses[mid:] * -np.expm1(grid[mid] - grid[mid:])))
            lo, hi = (lo, mid) if value <= delta else (mid + 1, hi)
        return max(0, lo - 1)

    def _weighted(self, first: int) -> arb:
        """sum_{j >= first} c_j e^(-l_j) as a ball (its lower end is what delta subtracts)."""
        total = arb(0)
        if first >= len(self.masses):
            return total
        factor = arb(_fmpq(-self.step)).exp()
        term = arb(_fmpq(-(self.offset + first) * self.step)).exp()
        for c in self.masses[first:]:
            total += term * c
            term *= factor
        return total


def _fraction(value: Fraction | float | int, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (Fraction, float, int)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return Fraction(value)


def _fmpq(value: Fraction) -> fmpq:
    return fmpq(value.numerator, value.denominator)


def _float_up(value: arb) -> float:
    """The smallest float >= an exact arb point (an arb's upper end)."""
    mantissa, exponent = value.mid().man_exp()
    return float_up(Fraction(int(mantissa)) * Fraction(2) ** int(exponent))


def _ceil_scaled(value: arb) -> int:
    """ceil(2^BITS * upper end of ``value``): a mass rounded up onto the integer scale."""
    mantissa, exponent = (value * arb(2) ** BITS).upper().mid().man_exp()
    m, e = int(mantissa), int(exponent)
    return m << e if e >= 0 else -((-m) >> -e)  # -floor(-x) = ceil(x)


def _rescale(poly: fmpz_poly, extra: int) -> fmpz_poly:
    """Coefficients at scale 2^-(BITS + extra) back to 2^-BITS, each rounded UP (ceil)."""
    # per coefficient (fmpz_poly's // divides polynomials): -((-c) >> e) = -floor(-c / 2^e) = ceil(c / 2^e)
    return fmpz_poly([-((-c) >> extra) for c in poly.coeffs()])


def _power(poly: fmpz_poly, k: int) -> fmpz_poly:
    """poly^k (k-fold convolution) by repeated squaring, rescaled (up) after each product."""
    result: fmpz_poly | None = None
    while k:
        if k & 1:
            result = poly if result is None else _rescale(result * poly, BITS)
        k >>= 1
        if k:
            poly = _rescale(poly * poly, BITS)
    assert result is not None  # k >= 1
    return result


def _gaussian_lattice(sigma2: Fraction, copies: int) -> _Lattice:
    """``copies`` independent cells of N_Z(0, sigma2) against N_Z(1, sigma2) (CKS20; the pair of one shifted cell):
    loss (copies - 2 S)/(2 sigma2), S the sum of the o's.  A mass w(o)/Z is bounded by upper(w)/lower(Z_T), Z_T <= Z
    the partial sum over |o| <= T; the tail beyond (a geometric series) goes to +infinity for each cell."""
    t = math.ceil(TAIL_Z * math.sqrt(sigma2)) + 2
    with ctx.workprec(PREC):
        half = arb(_fmpq(1 / (2 * sigma2)))
        weights = [(-(half * o * o)).exp() for o in range(t + 2)]
        partial = (weights[0] + 2 * sum(weights[1:t + 1], arb(0))).lower()  # lower end: masses are rounded up
        cell = [_ceil_scaled(weights[abs(o)] / partial) for o in range(-t, t + 1)]
        ratio = (-(half * (2 * t + 3))).exp()
        tail = _ceil_scaled(2 * weights[t + 1] / (1 - ratio) / partial)
    return _Lattice(_power(fmpz_poly(cell), copies), copies * tail, copies * (1 + 2 * t), 1 / (2 * sigma2))


def _laplace_lattice(scale: Fraction, copies: int) -> _Lattice:
    """``copies`` cells of the discrete Laplace against its shift by 1 (Thm 19.14 on Z): each loss is +1/scale with
    probability 1/(1 + q), q = e^(-1/scale), else -1/scale, so the sum is binomial."""
    with ctx.workprec(PREC):
        q = arb(_fmpq(-1 / scale)).exp()
        down, up = q / (1 + q), 1 / (1 + q)
        masses = [_ceil_scaled(arb(math.comb(copies, s)) * down**s * up ** (copies - s)) for s in range(copies + 1)]
    return _Lattice(fmpz_poly(masses), 0, copies, 1 / scale)


def _moments(lattice: _Lattice) -> tuple[float, float]:
    """Mean and variance of a group's loss, in floats: they only place the grid (tightness, not validity)."""
    coeffs = lattice.masses.coeffs()
    p = np.array([float(c) for c in coeffs]) * 2.0**-BITS
    loss = (lattice.top - 2.0 * np.arange(len(coeffs))) * float(lattice.unit)
    mean = float(np.sum(p * loss) / np.sum(p))
    return mean, float(np.sum(p * (loss - mean) ** 2) / np.sum(p))


@dataclass(frozen=True)
class _Part:
    """A partial composition on the grid: mass <= c_j 2^-BITS at (offset + j) step, and <= infinite at +inf."""

    offset: int
    masses: fmpz_poly
    infinite: int
    cut: bool = False  # some finite loss was moved above the cap, to +infinity


def _on_grid(lattice: _Lattice, step: Fraction, floor: int, cap: int) -> _Part:
    """A group's lattice moved onto the grid, every loss rounded UP to the next grid point (j = ceil(loss/step)),
    clamped UP to the floor; losses above the cap go to +infinity."""
    ratio = lattice.unit / step
    bins: dict[int, int] = {}
    infinite, cut = lattice.infinite, False
    for s, c in enumerate(lattice.masses.coeffs()):
        j = max(floor, -((-(lattice.top - 2 * s) * ratio.numerator) // ratio.denominator))
        if j > cap:
            infinite += int(c)
            cut = cut or c > 0
        else:
            bins[j] = bins.get(j, 0) + int(c)
    if not bins:
        return _Part(floor, fmpz_poly([]), infinite, cut)
    low = min(bins)
    return _Part(low, fmpz_poly([bins.get(j, 0) for j in range(low, max(bins) + 1)]), infinite, cut)


def _convolve(a: _Part, b: _Part, floor: int, cap: int) -> _Part:
    """The sum of two independent parts: exact product, rescaled UP; below the floor clamped UP onto it, above
    the cap moved to +infinity (a loss only ever moves up).  Mass at infinity: union bound, a + b."""
    masses, offset, infinite = _rescale(a.masses * b.masses, BITS), a.offset + b.offset, a.infinite + b.infinite
    if offset < floor:
        below = masses.truncate(floor - offset)
        masses, offset = masses.right_shift(floor - offset) + fmpz_poly([below(1)]), floor
    keep = cap - offset + 1
    if keep <= 0:  # every partial sum lies above the cap
        above = int(masses(1))
        return _Part(floor, fmpz_poly([]), infinite + above, a.cut or b.cut or above > 0)
    above = int(masses.right_shift(keep)(1)) if masses.length() > keep else 0
    return _Part(offset, masses.truncate(keep), infinite + above, a.cut or b.cut or above > 0)


def privacy_curve(noises: Sequence[Noise], *, cells: int, widen: int = 0) -> PrivacyCurve:
    """The certified curve of the composition of ``noises`` (one per level x query), each moving ``cells`` cells
    by 1 (``Neighbouring``: replace-one moves 2, add-remove 1; 0 means no change and an empty curve).  Groups of
    identical noises go on a grid over [mean - FLOOR_Z sd, mean + 2^widen CAP_Z sd] of the total loss, convolved
    smallest first; any cap gives a valid curve (what lies above goes to +infinity)."""
    if isinstance(cells, bool) or not isinstance(cells, int) or cells < 0:
        raise ValueError(f"cells must be an integer >= 0, got {cells!r}")
    if isinstance(widen, bool) or not isinstance(widen, int) or widen < 0:
        raise ValueError(f"widen must be an integer >= 0, got {widen!r}")
    groups: dict[Noise, int] = {}
    for i, noise in enumerate(noises):
        _check_noise(noise, f"noises[{i}]")
        groups[noise] = groups.get(noise, 0) + cells
    lattices = [_gaussian_lattice(n.sigma2, k) if isinstance(n, GaussianNoise) else _laplace_lattice(n.scale, k)
                for n, k in sorted(groups.items(), key=repr) if k]
    if not lattices:
        return PrivacyCurve(Fraction(1), 0, (), 0)
    moments = [_moments(lattice) for lattice in lattices]
    mean, sd = sum(m for m, _ in moments), math.sqrt(sum(v for _, v in moments))
    low, high = mean - max(FLOOR_Z * sd, 1.0), mean + max(CAP_Z * sd, 1.0) * 2**widen
    step = Fraction(2) ** -math.ceil(math.log2(GRID_POINTS / (high - low)))  # a power of 2: nearby rhos share it
    floor, cap = math.floor(low / step), math.ceil(high / step)
    parts = [_on_grid(lattice, step, floor, cap) for lattice in lattices]
    heap = [(p.masses.length(), i, p) for i, p in enumerate(parts)]
    heapq.heapify(heap)
    counter = len(heap)
    while len(heap) > 1:
        (_, _, a), (_, _, b) = heapq.heappop(heap), heapq.heappop(heap)
        part = _convolve(a, b, floor, cap)
        heapq.heappush(heap, (part.masses.length(), counter, part))
        counter += 1
    part = heap[0][2]
    return PrivacyCurve(step, part.offset, tuple(int(c) for c in part.masses.coeffs()), part.infinite, part.cut)


def _check_noise(noise: Noise, name: str) -> None:
    value = noise.sigma2 if isinstance(noise, GaussianNoise) else getattr(noise, "scale", None)
    if not isinstance(noise, (GaussianNoise, LaplaceNoise)) or not isinstance(value, Fraction) or value <= 0:
        raise ValueError(f"{name} must be a GaussianNoise or LaplaceNoise with a positive Fraction parameter")


def epsilon_pld(noises: Sequence[Noise], delta: float, *, cells: int) -> float | None:
    """epsilon at ``delta`` of the composed noises by their certified privacy curve, rounded up; None when no cap
    puts at most INFINITE_SHARE of ``delta`` at +infinity (``accountants.epsilon_pld_of`` then states another
    figure).  Never raises for a valid ``delta``.  The cap doubles (docs/accounting.md) until it cuts nothing off:
    finitely many times, since partial sums are bounded and the grid's step grows 2^14 times slower than the cap."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    if delta < MIN_DELTA:
        return None
    allowed = Fraction(delta) * INFINITE_SHARE * 2**BITS
    widen = 0
    while True:
        curve = privacy_curve(noises, cells=cells, widen=widen)
        if curve.infinite <= allowed:
            return curve.epsilon(delta)
        if not curve.cut:  # only the lattices' own tails are at +infinity: no cap holds less
            return None
        widen += 1


def delta_pld(noises: Sequence[Noise], epsilon: Fraction | float, *, cells: int) -> float:
    """delta at ``epsilon`` of the composed noises by their certified privacy curve, rounded up."""
    return privacy_curve(noises, cells=cells).delta(epsilon)


def rho_for_epsilon_pld(epsilon: float, delta: float, noises_for: Callable[[Fraction], Sequence[Noise]], *,
                        cells: int, start: Fraction) -> Fraction:
    """A rho on a dyadic grid whose noises ``noises_for(rho)`` have a certified PLD epsilon <= ``epsilon`` at
    ``delta`` (rounded DOWN): where that epsilon grows with rho, less than a relative 2^-HALVINGS < 1e-3 below the
    largest admissible rho.  ``ValueError`` when no rho is admissible within SEARCH_STEPS halvings of ``start``
    (the CKS20 answer) or ``delta`` is below MIN_DELTA: the caller then says to use CKS20.  By bisection of
    [lo, 2 lo]; the certified epsilon is not monotone in rho (docs/accounting.md), so it may stop below the largest
    admissible rho, never above: every rho it keeps was checked by ``epsilon_pld``, the figure reports use."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon > 0:
        raise ValueError(f"epsilon must be a number > 0, got {epsilon!r}")

    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not MIN_DELTA <= delta < 1:
        raise ValueError(f"delta must be a number in [{MIN_DELTA:g}, 1) for a certified target, got {delta!r}")

    def admissible(rho: Fraction) -> bool:
        certified = epsilon_pld(noises_for(rho), delta, cells=cells)
        return certified is not None and certified <= epsilon

    lo = Fraction(2) ** math.floor(math.log2(start))
    for _ in range(SEARCH_STEPS):
        if admissible(lo):
            break
        lo /= 2
    else:
        raise ValueError(f"no rho within 2^-{SEARCH_STEPS} of the start has a certified epsilon <= {epsilon:g} at "
                         f"delta = {delta:g}")
    for _ in range(SEARCH_STEPS):
        if not admissible(2 * lo):
            break
        lo *= 2
    width = lo
    for _ in range(HALVINGS):
        width /= 2
        if admissible(lo + width):
            lo += width
    return lo  # admissible(lo) was checked, admissible(lo + width) failed (or was 2 lo, which failed)
