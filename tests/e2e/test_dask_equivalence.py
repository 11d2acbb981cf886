"""Dask gives the same tables as the local runner under the same seed: an existing cluster by its `tcp://`
address (whose workers never import Prefect), and `dask-local:2` under the Prefect flow (the README's command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import censusdp.pipeline.io.fingerprint as fingerprint
import censusdp.pipeline.release.group_tasks as groups
import censusdp.pipeline.release.measurement_plan as measurement_plan
from censusdp.pipeline.cli import main
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.release.runner import WORKER_BYTES, machine_cores, machine_memory
from tests.helpers.configs import edit_config
from tests.helpers.datasets import write_hive_dataset
from tests.helpers.tiny import REPO

SMALL_CHUNKS = {"postprocess.chunk_cells": 60}  # several chunks per level


def tables(run_dir: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every published table, as sorted rows (comparable with ==)."""
    return {p.stem: sorted(pl.read_parquet(p).with_columns(pl.col("geoid").cast(pl.Utf8)).rows())
            for p in sorted((run_dir / "tables").glob("*.parquet"))}


def released(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Path:
    code = main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", "21", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return Path(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_runner_publishes_the_same_tables(tiny_release: Path, prefect_home: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from distributed import Client, LocalCluster

    edit_config(tiny_release, SMALL_CHUNKS)
    local = tables(released(tiny_release, capsys, "--runner", "local"))
    assert len(local) == 4
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        run_dir = released(tiny_release, capsys, "--runner", cluster.scheduler_address)
        assert cluster.scheduler_address.startswith("tcp://")
        assert tables(run_dir) == local
        imported = client.run(lambda: sorted(m for m in sys.modules if m.split(".")[0] == "prefect"))
        assert len(imported) == 2 and all(not modules for modules in imported.values()), imported
    env = {**os.environ, "PREFECT_HOME": str(prefect_home),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", "PYTHONPATH": str(REPO)}
    env.pop("PREFECT_API_URL", None)  # Prefect's embedded server, whatever the caller's environment names
    flow = subprocess.run([sys.executable, "-m", "censusdp.pipeline.cli", "-q", "release", str(tiny_release),
                           "--insecure-seed", "21"], env=env, capture_output=True, text=True, timeout=600)
    assert flow.returncode == 0, flow.stderr[-3000:]
    on_dask = Path(flow.stdout.strip().splitlines()[-1])  # the default: every core, a cluster of its own
    assert tables(on_dask) == local
    manifest = json.loads((on_dask / "manifest.json").read_text())
    assert manifest["config"]["postprocess"]["runner"] == "auto"
    chunks = manifest["reconciliation"]["unit"]["chunks"]
    assert chunks > 1
    workers = min(machine_cores(), chunks, machine_memory() // WORKER_BYTES)
    assert manifest["runner"] == ("local" if workers == 1 else f"dask-local:{workers}")


def refuse(*args: object, **kwargs: object) -> None:
    raise RuntimeError("the driver read records")


def refusing(monkeypatch: pytest.MonkeyPatch, refused: str) -> None:
    """Make the driver's readers of records fail ("fingerprint", "measure" or both): workers are spawned
    processes, which import the real ones; the fingerprint's fallback to the files' lines is refused too."""
    if "measure" in refused:
        monkeypatch.setattr(groups, "group_keys", refuse)
        monkeypatch.setattr(measurement_plan, "encoded_rows", refuse)
    if "fingerprint" in refused:
        monkeypatch.setattr(fingerprint, "read_batches", refuse)
        monkeypatch.setattr(fingerprint, "check_unchanged", refuse)


@pytest.mark.slow
def test_a_partitioned_release_measured_on_the_workers_publishes_the_driver_only_tables(
        tiny_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset partitioned by region, measured group by group on a LocalCluster's workers (each chunk
    from its own seeded stream), publishes exactly the tables of the same release measured on the driver only."""
    folder = tmp_path / "partitioned"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                       pl.col("geocode").str.slice(0, 1))
    edit_config(tiny_release, SMALL_CHUNKS)
    local_dir = released(tiny_release, capsys, "--microdata", str(folder), "--runner", "local")
    local = tables(local_dir)
    # one group: other chunks, other streams, same schema
    whole_file = tables(released(tiny_release, capsys, "--runner", "local"))
    assert len(local) == 4 and local.keys() == whole_file.keys()
    driver_config = edit_config(tiny_release, {"postprocess.measure_on": "driver"}, tmp_path / "driver.toml")
    assert tables(released(driver_config, capsys, "--microdata", str(folder), "--runner", "dask-local:2")) == local
    workers_config = edit_config(tiny_release, {"postprocess.measure_on": "workers"}, tmp_path / "workers.toml")
    with pytest.MonkeyPatch.context() as patch:  # with measurement on the workers, the driver reads no record
        refusing(patch, "fingerprint,measure")
        workers_dir = released(workers_config, capsys, "--microdata", str(folder), "--runner", "dask-local:2")
    assert tables(workers_dir) == local
    # the workers' parts were adopted, not re-encoded: below the region level each level is a folder of parts,
    # one per region, named in the manifest, and reads back as the driver's one file does
    by_workers, by_driver = load_run(workers_dir), load_run(local_dir)
    entries = by_workers.manifest["measurements"]
    assert [entries[lv.name].endswith(".parquet") for lv in by_workers.config.levels] == [True, True, False, False]
    assert len(list((workers_dir / entries[by_workers.config.levels[-1].name]).glob("part-*.parquet"))) > 1
    for level in range(by_workers.tree.depth):
        for (q, s2, values), (q_, s2_, values_) in zip(by_workers.measurements(level), by_driver.measurements(level),
                                                       strict=True):
            assert q == q_ and s2 == s2_ and np.array_equal(values, values_)
    # the spies work: measuring on the driver, each set alone makes the run fail in its own stage
    for refused, stage in (("fingerprint", "in charge\n"), ("measure", "in validate_inputs\n")):
        with pytest.MonkeyPatch.context() as patch:
            refusing(patch, refused)
            patch.setenv("CENSUSDP_DEBUG", "1")  # a traceback on the internal error
            code = main(["-q", "release", str(driver_config), "--no-prefect", "--insecure-seed", "21", "--microdata",
                         str(folder)])
        err = capsys.readouterr().err
        assert code != 0, refused
        assert "the driver read records" in err and stage in err, err[-3000:]
