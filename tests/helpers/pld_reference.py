"""Independent references for the PLD contract tests: delta(epsilon) by direct summation in mpmath (80 digits),
and the continuous Gaussian's exact curve (Balle & Wang 2018, Thm 8), none of them using pipeline code."""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp


def discrete_gaussian_delta(sigma2s: list[Fraction], epsilon: float, cells: int = 1) -> mp.mpf:
    """delta(epsilon) of the product of N_Z(0, s2) vs N_Z(1, s2), ``cells`` cells per s2, by enumeration of the
    joint loss (feasible for a handful of small sigma2s)."""
    with mp.workdps(80):
        laws: list[dict[mp.mpf, mp.mpf]] = [{mp.mpf(0): mp.mpf(1)}]
        for s2 in sigma2s:
            s = mp.mpf(s2.numerator) / s2.denominator
            z = mp.nsum(lambda o, s=s: mp.exp(-o * o / (2 * s)), [-mp.inf, mp.inf])
            width = int(mp.ceil(14 * mp.sqrt(s))) + 3  # the rest is below 1e-40
            cell = {}
            for o in range(-width, width + 1):
                loss = (1 - 2 * mp.mpf(o)) / (2 * s)
                cell[loss] = mp.exp(-o * o / (2 * s)) / z
            for _ in range(cells):
                law: dict[mp.mpf, mp.mpf] = {}
                for a, pa in laws[-1].items():
                    for b, pb in cell.items():
                        law[a + b] = law.get(a + b, 0) + pa * pb
                laws.append(law)
        e = mp.mpf(epsilon)
        return mp.fsum(p * (1 - mp.exp(e - loss)) for loss, p in laws[-1].items() if loss > e)


def gaussian_delta(rho: float, epsilon: float) -> mp.mpf:
    """delta(epsilon) of the continuous Gaussian with rho = mu^2/2: Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)."""
    with mp.workdps(60):
        mu = mp.sqrt(2 * mp.mpf(rho))
        e = mp.mpf(epsilon)
        return mp.ncdf(mu / 2 - e / mu) - mp.exp(e) * mp.ncdf(-mu / 2 - e / mu)


def gaussian_epsilon(rho: float, delta: float) -> float:
    """epsilon at delta of the continuous Gaussian (to nearest; a reference, not a bound)."""
    with mp.workdps(60):
        return float(mp.findroot(lambda e: gaussian_delta(rho, e) - delta, (0, 200), solver="bisect"))


def discrete_laplace_delta(scales: list[Fraction], epsilon: float, cells: int = 1) -> mp.mpf:
    """delta(epsilon) of the product of the discrete Laplace of each scale against its shift by 1, ``cells`` cells
    per scale: a cell's loss is +1/b with probability 1/(1 + e^(-1/b)) and -1/b otherwise (exact enumeration)."""
    with mp.workdps(80):
        law: dict[mp.mpf, mp.mpf] = {mp.mpf(0): mp.mpf(1)}
        for b in scales:
            unit = mp.mpf(b.denominator) / b.numerator
            q = mp.exp(-unit)
            for _ in range(cells):
                step: dict[mp.mpf, mp.mpf] = {}
                for loss, p in law.items():
                    for move, pm in ((unit, 1 / (1 + q)), (-unit, q / (1 + q))):
                        step[loss + move] = step.get(loss + move, 0) + p * pm
                law = step
        e = mp.mpf(epsilon)
        return mp.fsum(p * (1 - mp.exp(e - loss)) for loss, p in law.items() if loss > e)


def discrete_gaussian_cell(sigma2: Fraction, o: int) -> mp.mpf:
    """P(o) of N_Z(0, sigma2) at 80 digits."""
    with mp.workdps(80):
        s = mp.mpf(sigma2.numerator) / sigma2.denominator
        z = mp.nsum(lambda x: mp.exp(-x * x / (2 * s)), [-mp.inf, mp.inf])
        return mp.exp(-mp.mpf(o) ** 2 / (2 * s)) / z
