"""Noise throughput, side by side in one run on one core: the exact discrete Gaussian (table inversion, the
production path), its CKS20 reference path, the inexact np.rint(normal) baseline, and OpenDP 0.16's exact
``make_gaussian`` when it is installed (pip install opendp==0.16.0; optional).  Also times table building.

    python benchmarks/noise.py [--size 2000000] [--repeat 5] [--opendp-size 20000] [--cpu 0]

Prints a markdown table of samples per second (best of --repeat; ours and np.rint alternate within each
repeat so that machine load hits both alike) and the issue-3 targets: >= 20 M/s, >= 0.5x np.rint(normal),
>= 300x OpenDP.  Then the exact discrete Laplace rows: the table path (production) against its CKS20 path
and np.rint of a numpy float Laplace sample (inexact: a speed reference only), target >= 20 M/s.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from censusdp.pipeline.dp import gaussian_table as noise_table
from censusdp.pipeline.dp import laplace_table as noise_laplace_table
from censusdp.pipeline.dp.noise import (
    LAPLACE_TABLE_MAX_SCALE,
    sample_discrete_gaussian,
    sample_discrete_gaussian_cks,
    sample_discrete_laplace,
    sample_discrete_laplace_cks,
)
from censusdp.pipeline.dp.random_source import system_random_source

SIGMA2 = ["1/20", "1/2", "5", "7/3", "50", "500", "1000003/7", "1000000"]
LAPLACE_SCALES = ["1/20", "1/2", "1", "7/3", "100", "256", "1000", "10000", "1000000", "10000001"]


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
    laplace_rows(args.size, args.repeat, rng, baseline_rng)


def laplace_rows(size: int, repeat: int, rng, baseline_rng) -> None:
    """Exact discrete Laplace (table inversion, the production path) against its CKS20 path and the inexact
    np.rint(numpy Laplace) baseline, same run; target >= 20 M/s for scales 1/20 .. 10^4."""
    print(
        "| Laplace scale | path | tables build (ms) | tables (KiB) | ours (M/s) | CKS path (M/s) | ours/CKS "
        "| np.rint(laplace), inexact (M/s) | ours/rint | target >= 20 M/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for text in LAPLACE_SCALES:
        scale = Fraction(text)
        noise_table.clear_caches()
        build = timed(lambda s=scale: sample_discrete_laplace(s, 1, rng=rng))
        kib = sum(t.nbytes for t in noise_table._tables.values()) / 1024
        if scale > LAPLACE_TABLE_MAX_SCALE:
            path = "CKS (above table range)"
        else:
            path = "direct table" if scale <= noise_laplace_table.DIRECT_MAX_SCALE else "split W A + D"
        b = float(scale)
        ours, rint = best_rates(
            [
                lambda s=scale: sample_discrete_laplace(s, size, rng=rng),
                lambda b=b: np.rint(baseline_rng.laplace(0.0, b, size)).astype(np.int64),
            ],
            size,
            repeat,
        )
        cks_size = max(size // 4, 1)
        (cks,) = best_rates([lambda s=scale, n=cks_size: sample_discrete_laplace_cks(s, n, rng=rng)], cks_size, 2)
        met = ("met" if ours >= 20e6 else "NOT met") if scale <= 10**4 else "- (outside 1/20 .. 10^4)"
        print(
            f"| {text} | {path} | {build * 1e3:.1f} | {kib:.0f} | {ours / 1e6:.1f} | {cks / 1e6:.2f} "
            f"| {ours / cks:.1f}x | {rint / 1e6:.1f} | {ours / rint:.2f} | {met} |"
        )


if __name__ == "__main__":
    main()
