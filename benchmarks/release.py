"""End-to-end release time and peak memory at a given size, without Prefect (stage by stage) or with it.

    python benchmarks/release.py --persons 100000 [--prefect]

Synthesises a state (pl94 preset), then times each stage of the release and reports peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from pipeline import release as stages
from pipeline.commands import preset_text
from pipeline.config_load import load_config
from pipeline.random_source import system_random_source
from pipeline.synth import write_synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        micro, geo = write_synthetic(args.persons, args.seed, folder / "data")
        synth_s = time.perf_counter() - started
        text = preset_text("pl94").replace('path = "microdata.parquet"', f'path = "{micro}"')
        (folder / "pl94.toml").write_text(text.replace('geography = "geography.parquet"', f'geography = "{geo}"'))
        config = load_config(folder / "pl94.toml")
        timings: dict[str, float] = {}

        def timed(name: str, fn, *a) -> None:  # noqa: ANN001
            t = time.perf_counter()
            fn(*a)
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t

        run = stages.start_release(config, folder / "runs", system_random_source())
        timed("read + tree + histograms", stages.read_inputs, run)
        assert run.tree is not None
        nodes = {lv.name: run.tree.n_nodes(i) for i, lv in enumerate(config.levels)}
        for level, spec in enumerate(config.levels):
            timed(f"measure {spec.name}", stages.measure, run, level)
        for level, spec in enumerate(config.levels):
            timed(f"reconcile {spec.name}", stages.reconcile, run, level)
        timed("publish", stages.publish, run)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print(f"persons={args.persons:,} nodes={nodes} synth={synth_s:.1f}s")
    print("| stage | seconds |\n|---|---|")
    for name, seconds in timings.items():
        print(f"| {name} | {seconds:.2f} |")
    print(f"| total release | {sum(timings.values()):.2f} |")
    print(f"peak RSS: {peak_gb:.2f} GB")


if __name__ == "__main__":
    main()
