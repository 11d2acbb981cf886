"""The first-order solver against cvxpy (Clarabel) on every batch a release gives it: objective values and time.

    python benchmarks/solver_agreement.py --data DATA [--preset pl94] [--no-units]

Runs a release in one process (``runner = "local"``); each batch the first-order solver takes is solved again by
cvxpy with the same terms and sum constraints (no bounds: the first-order problem has none), and the two
objectives sum_q w_q ||K_q x - y_q||^2 are compared. Prints, for blocks of fewer and of at least 900 variables on
average (``auto`` left the smaller to Clarabel before this was measured), the batches, the largest relative excess
of the first-order objective over Clarabel's (negative: the first-order point is the better one), and the seconds
each solver took; and the batches it gave back to cvxpy, with the seconds it spent on them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from censusdp.postprocess import first_order
from censusdp.postprocess.least_squares import Equalities, Term, solve

BENCHMARKS = Path(__file__).resolve().parent


def objective(terms: list[Term], x: np.ndarray) -> float:
    return float(sum(t.weight * np.sum((t.matrix @ x - t.target) ** 2) for t in terms))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--no-units", action="store_true")
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    solve_first = first_order.solve

    def both(terms: list[Term], batch: object) -> tuple[np.ndarray | None, dict]:
        tick = time.perf_counter()
        x, info = solve_first(terms, batch)
        first_seconds = time.perf_counter() - tick
        if x is None:  # given back to cvxpy (ill-conditioned, or not certified): its time is the cost of trying
            rows[f"given back: {info.get('status', 'limit')}"].append((np.nan, first_seconds, 0.0))
        else:
            tick = time.perf_counter()
            sums = Equalities(batch.sum_matrix, batch.sum_rhs, np.ones(batch.sum_rhs.size, dtype=bool))
            reference = solve(terms, [sums], batch.n_vars, ("CLARABEL",))
            seconds = time.perf_counter() - tick
            if reference.x is not None:
                f_first, f_reference = objective(terms, x), objective(terms, reference.x)
                size = "< 900" if batch.n_vars < 900 * batch.n_blocks else ">= 900"
                rows[size].append(((f_first - f_reference) / max(f_reference, 1e-300), first_seconds, seconds))
        return x, info

    first_order.solve = both
    release = [sys.executable, str(BENCHMARKS / "release.py"), "--data", str(args.data), "--runner", "local",
               "--preset", args.preset, *(["--no-units"] if args.no_units else [])]
    sys.argv = release[1:]
    import runpy

    runpy.run_path(str(BENCHMARKS / "release.py"), run_name="__main__")
    print("| variables per block | batches | largest relative excess of the first-order objective | "
          "first-order s | Clarabel s |")
    print("|---|---|---|---|---|")
    for size, found in sorted(rows.items()):
        excess = max((r[0] for r in found), default=np.nan)
        print(f"| {size} | {len(found)} | {excess:.2e} | {sum(r[1] for r in found):.2f} | "
              f"{sum(r[2] for r in found):.2f} |")


if __name__ == "__main__":
    main()
