"""Noise throughput, side by side in one run: exact discrete Gaussian (ours), the inexact np.rint(normal)
baseline, and OpenDP's exact sampler when it is installed (pip install opendp; optional).

    python benchmarks/noise.py [--size 2000000] [--repeat 3]

Prints a markdown table of samples per second (best of --repeat) for each sigma².
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from pipeline.noise import sample_discrete_gaussian, sample_discrete_laplace
from pipeline.random_source import system_random_source

SIGMA2 = ["1/20", "1/2", "5", "7/3", "50", "500", "1000003/7", "1000000"]


def best_rate(fn: Callable[[], object], size: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return size / best


def opendp_sampler(sigma2: Fraction, size: int) -> Callable[[], object] | None:
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
    meas = dp.m.make_gaussian(*space, scale=float(sigma2) ** 0.5)
    data = [0] * size
    return lambda: meas(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--opendp-size", type=int, default=20_000, help="OpenDP is slow: fewer samples")
    args = parser.parse_args()
    rng = system_random_source()
    baseline_rng = np.random.default_rng()  # test-only: the inexact baseline being compared against
    print(f"machine: {platform.machine()}, {platform.python_version()}, size={args.size:,}, best of {args.repeat}")
    print("| sigma² | exact discrete Gaussian (M/s) | np.rint(normal) (M/s) | ratio | OpenDP (k/s) | vs OpenDP |")
    print("|---|---|---|---|---|---|")
    for text in SIGMA2:
        sigma2 = Fraction(text)
        ours = best_rate(lambda s=sigma2: sample_discrete_gaussian(s, args.size, rng=rng), args.size, args.repeat)
        sigma = float(sigma2) ** 0.5
        rint = best_rate(lambda s=sigma: np.rint(baseline_rng.normal(0, s, args.size)).astype(np.int64),
                         args.size, args.repeat)
        odp = opendp_sampler(sigma2, args.opendp_size)
        odp_rate = best_rate(odp, args.opendp_size, 1) if odp else None
        odp_cells = f"{odp_rate / 1e3:.1f} | {ours / odp_rate:.0f}x" if odp_rate else "not installed | -"
        print(f"| {text} | {ours / 1e6:.2f} | {rint / 1e6:.2f} | {ours / rint:.2f} | {odp_cells} |")
    print()
    print("| Laplace scale | exact discrete Laplace (M/s) |")
    print("|---|---|")
    for text in ["1", "7/3", "100"]:
        rate = best_rate(lambda s=Fraction(text): sample_discrete_laplace(s, args.size, rng=rng), args.size,
                         args.repeat)
        print(f"| {text} | {rate / 1e6:.2f} |")


if __name__ == "__main__":
    main()
