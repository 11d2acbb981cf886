"""Uncertainty of a release, from its public outputs only: GLS estimates with exact standard errors, written to
``estimates/<level>.parquet`` (every detailed cell) and ``estimates/queries/<level>.parquet`` (every other query
measured at the level, and ``total``; rows by chunk, then query, then node).  Files and model: docs/uncertainty.md.

The inputs are the measurements with their public σ², the invariants and the configuration, never microdata, so
this is post-processing and spends no budget (Thm 19.25).
"""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.pipeline.config.schema import DETAILED, TOTAL, Query
from censusdp.pipeline.dp.random_source import RandomSource
from censusdp.pipeline.io.gls_scratch import ScratchCubes
from censusdp.pipeline.io.run_folder import LoadedRun, load_run
from censusdp.pipeline.release.full_information import gls_problem, spec_of, stream_problem
from censusdp.pipeline.release.noisy_measurements import noisy_answers
from censusdp.pipeline.release.run import Release, stage_output
from censusdp.postprocess.gls import GlsLevel, GlsResult, interval
from censusdp.postprocess.gls_algebra import answer
from censusdp.postprocess.gls_stream import StreamedGls, solve_gls_streamed

ESTIMATES_DIR = "estimates"


def gls_levels(run: LoadedRun, noisy: list[list[tuple[Query, Fraction, np.ndarray]]] | None = None) -> list[GlsLevel]:
    """The GLS problem of a run: its measurements (or ``noisy``, the same structure) and its invariants."""
    measured = noisy if noisy is not None else [run.measurements(level) for level in range(run.tree.depth)]
    return gls_problem(run.config.schema, run.tree.parent, measured, run.invariants)


def redrawn_measurements(run: LoadedRun, truth: list[np.ndarray], rng: RandomSource
                         ) -> list[list[tuple[Query, Fraction, np.ndarray]]]:
    """Fresh noisy answers of ``truth`` (dense histograms per level) to every level x query, each with the
    release's own mechanism and public parameters (``release.noisy_measurements.noisy_answers``): the distribution of
    another release's measurements, for coverage checks (``gls_levels(run, noisy=...)``).  Evaluation only: it
    needs the truth."""
    schema = run.config.schema
    return [[(q.query, q.sigma2, noisy_answers(schema.marginal(q.query, truth[level]), q.mechanism, q.sigma2,
                                               q.scale, rng))
             for q in run.level_noise(level)] for level in range(run.tree.depth)]


def open_gls(run: LoadedRun) -> StreamedGls:
    """The exact GLS of every level of the run, solved chunk by chunk from its measurement files, intermediates
    in a folder of their own under the system's temporary folder, removed by ``close``."""
    depth, shape = run.tree.depth, run.config.schema.shape
    levels, read = stream_problem(run.config.schema, run.tree.parent, [run.level_queries(lv) for lv in range(depth)],
                                  run.invariants, [run.chunk_plan(lv) for lv in range(depth)], run.measurements_dir)
    return solve_gls_streamed(levels, shape, read, ScratchCubes(Path(tempfile.gettempdir()), shape))


def gls_estimates(run: LoadedRun) -> GlsResult:
    """The run's GLS as a ``GlsResult`` (estimates and variances by level and query; evaluation, small runs): the
    estimates read into memory, the stream's scratch files removed."""
    result = GlsResult(open_gls(run))
    _ = result.estimates  # every level's, before the store is closed (the variances need no store)
    result.stream.close()
    return result


def _columns(estimate: np.ndarray, std_error: np.ndarray) -> dict[str, pa.Array]:
    low, high = interval(estimate, std_error**2)
    return {"estimate": pa.array(estimate), "std_error": pa.array(std_error),
            "ci_low": pa.array(low), "ci_high": pa.array(high)}


def write_estimates(run_dir: Path) -> list[Path]:
    """The estimates of a published run folder, read back (``censusdp uncertainty``, the demo)."""
    return write_loaded_estimates(load_run(run_dir))


def write_release_estimates(release: Release, manifest: dict[str, Any]) -> list[Path]:
    """A release's own estimates (``output.estimates``), from the configuration, tree, invariants and allocation
    it holds and the manifest it just wrote; ``publish`` calls this before the run is renamed into place.  Only
    the noisy measurements are read from their files (a release streams them to disk level by level), by the
    chunk plan the run holds."""
    run = release.persons
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    return write_loaded_estimates(LoadedRun(run_dir=run.work_dir, manifest=manifest, config=run.config,
                                            tree=tree, invariants=run.invariants, allocations=run.allocations,
                                            measurements_dir=run.measurements, held_plans=dict(run.chunk_plan)))


def _level_files(run: LoadedRun, stream: StreamedGls, level: int, out_dir: Path) -> list[Path]:
    """One level's two files, written chunk by chunk of the engine's plan."""
    schema, name = run.config.schema, run.config.levels[level].name
    cells = schema.n_cells
    geoids = pa.array(run.tree.geoids[level].tolist(), type=pa.string())
    multi = np.unravel_index(np.arange(cells), schema.shape)
    queries = {q.name: q for q, _ in run.level_queries(level) if q.name != DETAILED}  # cells: the detailed file
    queries.setdefault(TOTAL, schema.parse_query(TOTAL))
    specs = {query_name: spec_of(schema, query) for query_name, query in queries.items()}
    paths = [out_dir / f"{name}.parquet", out_dir / "queries" / f"{name}.parquet"]
    writers: list[pq.ParquetWriter | None] = [None, None]

    def write(index: int, table: pa.Table) -> None:
        if writers[index] is None:
            writers[index] = pq.ParquetWriter(paths[index], table.schema, compression="zstd")
        writers[index].write_table(table)

    try:
        for start, stop, estimate in stream.chunk_estimates(level):
            n = stop - start
            chunk_geoids = geoids[start:stop]  # each row group's dictionary: its own nodes
            node = np.repeat(np.arange(n, dtype=np.int32), cells)
            columns: dict[str, pa.Array] = {"geoid": pa.DictionaryArray.from_arrays(node, chunk_geoids)}
            for attribute, index in zip(schema.attributes, multi, strict=True):
                columns[attribute.name] = pa.DictionaryArray.from_arrays(np.tile(index.astype(np.int32), n),
                                                                         pa.array(attribute.values))
            sd = np.sqrt(stream.variance(level, None, start, stop)).ravel()  # per cell: a recode's groups differ
            columns.update(_columns(estimate.ravel(), sd))
            write(0, pa.table(columns))
            parts = []
            for query_name, spec in specs.items():
                values = answer(estimate, schema.shape, spec)
                q_cells = values.shape[1]
                sd = np.sqrt(stream.variance(level, spec, start, stop)).ravel()
                part = {"geoid": pa.DictionaryArray.from_arrays(np.repeat(np.arange(n, dtype=np.int32), q_cells),
                                                                chunk_geoids),
                        "query": pa.DictionaryArray.from_arrays(np.zeros(values.size, dtype=np.int32),
                                                                 pa.array([query_name])),
                        "cell": pa.array(np.tile(np.arange(q_cells, dtype=np.int32), n))}
                part.update(_columns(values.ravel(), sd))
                parts.append(pa.table(part))
            write(1, pa.concat_tables(parts))
    finally:
        for writer in writers:
            if writer is not None:
                writer.close()
    return paths


def write_loaded_estimates(run: LoadedRun) -> list[Path]:
    """Write ``estimates/<level>.parquet`` and ``estimates/queries/<level>.parquet``; return the paths."""
    out_dir = run.run_dir / ESTIMATES_DIR
    written = []
    with open_gls(run) as stream:  # solved first: a design it cannot solve leaves no folder behind
        (out_dir / "queries").mkdir(parents=True, exist_ok=True)
        for level in range(run.tree.depth):
            written += _level_files(run, stream, level, out_dir)
    return written
