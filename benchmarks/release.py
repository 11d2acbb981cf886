"""End-to-end release time and peak memory at a given size, without Prefect (stage by stage) or with it.

    python benchmarks/release.py --persons 100000 [--runner dask-local:2]

Synthesises a state (pl94 preset), then times each stage of the release (without Prefect) and reports the
driver's own CPU seconds per stage (with Dask, the serial share that more workers do not shorten), the driver's
peak RSS (overall, and after each stage: where it jumps, that stage set it) and the detailed cells reconciled per
second at each level.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import system_random_source
from censusdp.pipeline.release import stages
from censusdp.pipeline.synth.population import SyntheticFiles, write_synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runner", help='override postprocess.runner: "local", "dask-local:N" (default: the '
                        'configuration\'s, "auto": every core)')
    parser.add_argument("--cluster", type=int, metavar="N", help="start a Dask scheduler and N one-thread workers as "
                        "processes of their own (as on a real cluster) and run on them: the driver's CPU column is "
                        "then the driver's alone (with dask-local:N it includes the nannies' in-process work)")
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--reconciliation", choices=["full_information", "level_by_level"], default=None,
                        help="override the preset's postprocess.reconciliation")
    parser.add_argument("--no-units", action="store_true", help="the persons only (the preset's [units] left out)")
    parser.add_argument("--data", type=Path, help="use a synthetic dataset already written (censusdp synth): its "
                        "microdata and units (files or partitioned folders) and geography.parquet; the peak RSS "
                        "then is the release's alone")
    parser.add_argument("--chunk-cells", type=int, help="override postprocess.chunk_cells")
    parser.add_argument("--profile", metavar="STAGE", action="append", default=[],
                        help='profile a stage as the table names it (e.g. "reconcile block"; repeatable) and print '
                        'its 40 costliest functions (cumulative)')
    args = parser.parse_args()
    tree_memory = _TreeMemory()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as cluster, tree_memory:
        folder = Path(tmp)
        if args.cluster:
            args.runner = _external_cluster(cluster, args.cluster, folder)
        os.environ["CENSUSDP_LEDGER"] = str(folder / "ledger.sqlite")  # never the installation's ledger
        started = time.perf_counter()
        files = _existing(args.data) if args.data else write_synthetic(args.persons, args.seed, folder / "data")
        synth_s = time.perf_counter() - started
        text = preset_text(args.preset).replace('path = "microdata.parquet"', f'path = "{files.microdata}"')
        text = text.replace("[units]\n", f'[units]\npath = "{files.units}"\n')
        text = text.replace('cap_rho = ', 'cap_rho = "1000" # ')
        (folder / "config.toml").write_text(text.replace('geography = "geography.parquet"',
                                                         f'geography = "{files.geography}"'))
        overrides: dict[str, object] = {}
        if args.reconciliation:
            overrides["postprocess.reconciliation"] = args.reconciliation
        if args.no_units:
            overrides["units"] = None
        if args.chunk_cells:
            overrides["postprocess.chunk_cells"] = args.chunk_cells
        config = load_config(folder / "config.toml", overrides)
        if args.runner:
            config = dataclasses.replace(config, runner=args.runner)
        timings: dict[str, float] = {}
        peaks: dict[str, float] = {}  # the driver's peak RSS (GB) once the stage is done: where it jumps, that stage
        stage_peaks: dict[str, float] = {}  # the driver's peak RSS within the stage (Linux: VmHWM reset before it)
        after: dict[str, float] = {}  # the driver's RSS at the stage's end: what it leaves to the next
        tree_peaks: dict[str, float] = {}  # the process tree's summed RSS at its peak within the stage
        cpu: dict[str, float] = {}  # the driver's own CPU seconds (all its threads): its serial share of a stage
        tree_cpu: dict[str, float] = {}  # the whole process tree's: over the wall time, the cores the stage used

        def timed(stage: stages.Stage, function, call_args: tuple) -> object:  # noqa: ANN001
            release = call_args[0]
            universe = call_args[1] if stage.per_universe else release.persons
            level = f" {config.levels[call_args[2]].name}" if stage.per_level else ""
            name = f"{stage.name}{'' if universe is release.persons else ' (units)'}{level}"
            profiler = cProfile.Profile() if name in args.profile else None
            _reset_peak()
            tree_memory.stage_peak_gb = 0.0
            tree_memory.sample()
            t, used, tree_used = time.perf_counter(), _cpu_seconds(), _tree_cpu_seconds()
            if profiler is not None:
                profiler.enable()
            result = function(*call_args)
            if profiler is not None:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t
            cpu[name] = cpu.get(name, 0.0) + _cpu_seconds() - used
            tree_cpu[name] = tree_cpu.get(name, 0.0) + _tree_cpu_seconds() - tree_used
            # the stage's own peak (resetting the kernel's high-water mark resets ru_maxrss too: the running
            # maximum is kept here)
            own = _status_gb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
            stage_peaks[name] = max(stage_peaks.get(name, 0.0), own)
            peaks[name] = max([own, *peaks.values()])
            after[name] = _status_gb("VmRSS") or float("nan")
            tree_memory.sample()
            tree_peaks[name] = max(tree_peaks.get(name, 0.0), tree_memory.stage_peak_gb)
            return result

        run = stages.start_release(config, folder / "runs", system_random_source())
        stages.run_stages(run, call=timed)
        tree = run.persons.tree
        assert tree is not None
        nodes = {lv.name: tree.n_nodes(i) for i, lv in enumerate(config.levels)}
    peak_gb = max([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, *peaks.values()])
    # a local Dask cluster's worker processes are this process's children (ended by now): the largest one's peak
    child_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
    n_cells = config.schema.n_cells
    persons = args.persons if not args.data else _records(files.microdata)  # --data: what the files hold
    print(f"persons={persons:,} preset={args.preset} units={config.units is not None} "
          f"reconciliation={config.reconciliation_method} "
          f"runner={run.manifest_extra.get('runner')} ({config.runner}) nodes={nodes} synth={synth_s:.1f}s")
    print("| stage | seconds | driver CPU (s) | process tree's CPU (s) | detailed cells/s | peak RSS after (GB) "
          "| stage's peak / RSS at its end (GB) | process tree's peak (GB) |\n|---|---|---|---|---|---|---|---|")
    for name, seconds in timings.items():
        persons_level = name.startswith(("reconcile ", "measure ")) and "(units)" not in name
        level = name.split(" ")[-1] if persons_level else None  # the rate counts the persons' detailed cells
        rate = f"{nodes[level] * n_cells / seconds:,.0f}" if level in nodes and seconds > 0 else ""
        print(f"| {name} | {seconds:.2f} | {cpu[name]:.2f} | {tree_cpu[name]:.2f} | {rate} | {peaks[name]:.2f} | "
              f"{stage_peaks[name]:.2f} / {after[name]:.2f} | {tree_peaks[name]:.2f} |")
    print(f"| total release | {sum(timings.values()):.2f} | {sum(cpu.values()):.2f} | {sum(tree_cpu.values()):.2f} |")
    print(f"peak RSS: {peak_gb:.3f} GB (this process); largest child process (a Dask worker): {child_gb:.3f} GB")
    print(f"the process tree's peak RSS (this process and all its descendants, summed every "
          f"{_TreeMemory.interval_s} s; shared pages counted in each): {tree_memory.peak_gb:.3f} GB")


class _TreeMemory(threading.Thread):
    """Samples the summed RSS of this process and all its descendants (a local cluster's scheduler, nannies' workers,
    an external cluster's processes): the machine's memory for the release, not one process's. A sum of RSS counts
    pages shared between processes once per process, so it errs high."""

    interval_s = 0.2

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_gb = 0.0
        self.stage_peak_gb = 0.0  # reset by the caller at each stage's start
        self._done = threading.Event()

    def __enter__(self) -> _TreeMemory:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        total = _tree_sum(lambda process: process.memory_info().rss)
        self.peak_gb = max(self.peak_gb, total / 1024**3)
        self.stage_peak_gb = max(self.stage_peak_gb, total / 1024**3)


def _external_cluster(stack: contextlib.ExitStack, workers: int, folder: Path) -> str:
    """A scheduler and ``workers`` workers (with their nannies) started as ``dask`` commands; their address."""
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")},  # the driver's own setting
           "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH": "0"}
    address_file = folder / "scheduler.json"
    command = [sys.executable, "-m", "dask"]
    log = stack.enter_context((folder / "cluster.log").open("w"))
    processes = [subprocess.Popen([*command, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(address_file)], env=env, stdout=log, stderr=log)]
    stack.callback(lambda: [(p.terminate(), p.wait()) for p in reversed(processes)])
    deadline = time.monotonic() + 120
    while not address_file.exists() or not address_file.stat().st_size:
        if time.monotonic() > deadline or processes[0].poll() is not None:
            raise RuntimeError(f"the scheduler did not start: {folder / 'cluster.log'}")
        time.sleep(0.2)
    time.sleep(0.5)  # the file is written in one go, but give its writer time to finish
    processes.append(subprocess.Popen([*command, "worker", "--scheduler-file", str(address_file), "--nworkers",
                                       str(workers), "--nthreads", "1", "--no-dashboard"], env=env, stdout=log,
                                      stderr=log))
    from distributed import Client

    with Client(scheduler_file=str(address_file)) as client:
        client.wait_for_workers(workers, timeout=120)
        return client.scheduler.address


def _reset_peak() -> None:
    """Reset the kernel's high-water mark of this process's RSS (Linux: ``clear_refs`` 5), so the next VmHWM is
    one stage's own peak; elsewhere a no-op (a stage's peak is then the process's so far)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _status_gb(field: str) -> float | None:
    """A memory field of /proc/self/status (kB) in GB, or None where there is none."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    values = [line.split()[1] for line in lines if line.startswith(field + ":")]
    return int(values[0]) / 1024**2 if values else None


def _tree_sum(measure: Callable[[psutil.Process], float]) -> float:
    """``measure`` summed over this process and its living descendants (a local cluster's scheduler and workers)."""
    me, total = psutil.Process(), 0.0
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += measure(process)
    return total


def _tree_cpu_seconds() -> float:
    return _tree_sum(lambda process: sum(process.cpu_times()[:2]))  # user + system


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _records(path: Path) -> int:
    """The records of a Parquet file or dataset folder, from its metadata."""
    import pyarrow.dataset as ds

    return ds.dataset(path, format="parquet", partitioning="hive").count_rows()


def _existing(folder: Path) -> SyntheticFiles:
    def either(name: str) -> Path:
        return folder / name if (folder / name).is_dir() else folder / f"{name}.parquet"
    return SyntheticFiles(microdata=either("microdata"), geography=folder / "geography.parquet", units=either("units"))


if __name__ == "__main__":
    main()
