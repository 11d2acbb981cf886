"""What a local cluster's start costs a release, alternated run by run (this machine is noisy):

- how long a ``dask-local:2`` cluster takes to be ready while the driver computes (the charge's fingerprint, here a
  busy loop of the same length), with the runner's switch interval while it starts and with Python's default;
- how long the first task of a release's kind (a measurement module's function) waits on a fresh cluster,
  submitted sealed (``pipeline.release.sealed_tasks``) and plainly (the scheduler then imports what it names).

    python benchmarks/cluster_start.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from censusdp.pipeline.release import runner as runner_module
from censusdp.pipeline.release.group_tasks import joined_invariants
from censusdp.pipeline.release.runner import DaskRunner
from censusdp.pipeline.release.sealed_tasks import submit_sealed


def ready_s(busy_s: float, switch_s: float) -> float:
    """Seconds until the cluster is ready, the driver busy for ``busy_s`` meanwhile."""
    default = runner_module.STARTING_SWITCH_S
    runner_module.STARTING_SWITCH_S = switch_s
    try:
        started = time.perf_counter()
        runner = DaskRunner("dask-local:2")
        count = 0
        while time.perf_counter() - started < busy_s:
            count += 1
        runner.client  # noqa: B018 - waits for the start
        seconds = time.perf_counter() - started
        runner.close()
        return seconds
    finally:
        runner_module.STARTING_SWITCH_S = default


def first_task_s(sealed: bool) -> float:
    """Seconds the first task of a release module's function takes on a fresh, ready cluster."""
    runner = DaskRunner("dask-local:2")
    try:
        client = runner.client
        started = time.perf_counter()
        if sealed:
            submit_sealed(client, joined_invariants, []).result()
        else:
            client.submit(joined_invariants, [], pure=False).result()
        return time.perf_counter() - started
    finally:
        runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=float, default=1.5, help="seconds the driver computes while the cluster starts")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"ready, runner's switch interval": [], "ready, Python's default (5 ms)": [],
                                       "first task, sealed": [], "first task, plain": []}
    for _ in range(args.rounds):
        results["ready, runner's switch interval"].append(ready_s(args.busy, runner_module.STARTING_SWITCH_S))
        results["ready, Python's default (5 ms)"].append(ready_s(args.busy, sys.getswitchinterval()))
        results["first task, sealed"].append(first_task_s(True))
        results["first task, plain"].append(first_task_s(False))
    print(f"| measure ({args.rounds} rounds, driver busy {args.busy} s) | runs (s) | median (s) |\n|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
