"""Noise throughput, side by side in one run on one core: the exact discrete Gaussian (table inversion, the
production path), its CKS20 reference path, the inexact np.rint(normal) baseline, and OpenDP 0.16's exact
``make_gaussian`` when it is installed (pip install opendp==0.16.0; optional).  Also times table building.

    python benchmarks/noise.py [--size 2000000] [--repeat 5] [--opendp-size 20000] [--cpu 0]

Prints a markdown table of samples per second (best of --repeat; ours and np.rint alternate within each
repeat so that machine load hits both alike) and the issue-3 targets: >= 20 M/s, >= 0.5x np.rint(normal),
>= 300x OpenDP.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from pipeline import noise_table
from pipeline.noise import sample_discrete_gaussian, sample_discrete_gaussian_cks, sample_discrete_laplace
from pipeline.random_source import system_random_source

SIGMA2 = ["1/20", "1/2", "5", "7/3", "50", "500", "1000003/7", "1000000"]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_rates(fns: list[Callable[[], object]], size: int, repeat: int) -> list[float]:
    """Samples/s of each fn, best of ``repeat``, the fns interleaved within each repeat."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timed(fn))
    return [size / b for b in best]


def opendp_sampler(sigma2: Fraction, size: int) -> Callable[[], object] | None:
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
    meas = dp.m.make_gaussian(*space, scale=float(sigma2) ** 0.5)  # speed comparison only
    data = [0] * size
    return lambda: meas(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opendp-size", type=int, default=20_000, help="OpenDP is slow: fewer samples")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core (default: the first allowed)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0)) if args.cpu is None else args.cpu
        os.sched_setaffinity(0, {cpu})
        where = f"pinned to cpu {cpu}"
    else:
        where = "not pinned"
    rng = system_random_source()
    baseline_rng = np.random.default_rng()  # benchmark only: the inexact baseline being compared against
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {platform.machine()}, {platform.processor() or platform.platform()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, {where}, load {load:.2f}; "
        f"size={args.size:,}, best of {args.repeat}"
    )
    print()
    print(
        "| sigma² | table build (ms) | table (KiB) | ours (M/s) | np.rint(normal) (M/s) | ours/rint "
        "| CKS path (M/s) | OpenDP (k/s) | ours/OpenDP | targets |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for text in SIGMA2:
        sigma2 = Fraction(text)
        noise_table.clear_caches()
        build = timed(lambda s=sigma2: noise_table.get_table(s))
        kib = noise_table.get_table(sigma2).nbytes / 1024
        sigma = float(sigma2) ** 0.5
        ours, rint = best_rates(
            [
                lambda s=sigma2: sample_discrete_gaussian(s, args.size, rng=rng),
                lambda s=sigma: np.rint(baseline_rng.normal(0, s, args.size)).astype(np.int64),
            ],
            args.size,
            args.repeat,
        )
        cks_size = max(args.size // 10, 1)
        (cks,) = best_rates([lambda s=sigma2, n=cks_size: sample_discrete_gaussian_cks(s, n, rng=rng)], cks_size, 1)
        odp = opendp_sampler(sigma2, args.opendp_size)
        odp_rate = best_rates([odp], args.opendp_size, 1)[0] if odp else None
        odp_cells = f"{odp_rate / 1e3:.1f} | {ours / odp_rate:,.0f}x" if odp_rate else "not installed | -"
        ok = ours >= 20e6 and ours >= 0.5 * rint and (odp_rate is None or ours >= 300 * odp_rate)
        print(
            f"| {text} | {build * 1e3:.1f} | {kib:.0f} | {ours / 1e6:.1f} | {rint / 1e6:.1f} | {ours / rint:.2f} "
            f"| {cks / 1e6:.2f} | {odp_cells} | {'met' if ok else 'NOT met'} |"
        )
    print()
    print("| Laplace scale | exact discrete Laplace (M/s) |")
    print("|---|---|")
    for text in ["1", "7/3", "100"]:
        (rate,) = best_rates(
            [lambda s=Fraction(text): sample_discrete_laplace(s, args.size, rng=rng)], args.size, args.repeat
        )
        print(f"| {text} | {rate / 1e6:.2f} |")


if __name__ == "__main__":
    main()
