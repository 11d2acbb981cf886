"""Uncertainty of a release, from its public outputs only: GLS estimates with exact standard errors.

``write_estimates(run_dir)`` writes, for every level,

- ``estimates/<level>.parquet``: ``geoid``, one column per attribute, ``estimate``, ``std_error``, ``ci_low``,
  ``ci_high`` — every detailed cell of every node (zeros included);
- ``estimates/queries/<level>.parquet``: the same for every other query measured at the level (and ``total``),
  long form: ``geoid``, ``query``, ``cell``, ``estimate``, ``std_error``, ``ci_low``, ``ci_high`` — written chunk
  by chunk of nodes, so rows run by chunk, then query, then node (filter by ``query`` for one query's rows).

The estimates are the generalised least squares fit of all the run's noisy measurements (``postprocess.gls``),
streamed from the run's measurement files chunk by chunk (``open_gls``: memory as the release's, not the tree's):
unbiased, not rounded, possibly negative, consistent across levels; the standard errors are exact and per cell
(with a recode, a cell's depends on its value's group), from the public σ² of every query (Thm 19.37(iii)), and
the 95% intervals are estimate ± 1.96·std_error.  Inputs are the measurements, the invariants and the
configuration — never microdata — so this is post-processing and spends no budget (Thm 19.25).  The parametric
bootstrap of the integer tables is ``pipeline.uncertainty.bootstrap``; the command ``censusdp uncertainty`` is
``pipeline.cli.uncertainty``.
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
from censusdp.postprocess.gls_stream import StreamedGls, StreamLevel, solve_gls_streamed

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


def run_problem(run: LoadedRun) -> tuple[list[StreamLevel], Any]:
    """The run's GLS problem as the engine streams it, from its measurement files (``stream_problem``)."""
    depth = run.tree.depth
    return stream_problem(run.config.schema, run.tree.parent, [run.level_queries(level) for level in range(depth)],
                          run.invariants, [run.chunk_plan(level) for level in range(depth)], run.measurements_dir)


def open_gls(run: LoadedRun, scratch: Path | None = None) -> StreamedGls:
    """The exact GLS of every level of the run, solved chunk by chunk from its measurement files, intermediates
    in a folder of their own under ``scratch`` (default: the system's temporary folder), removed by ``close``."""
    levels, read = run_problem(run)
    shape = run.config.schema.shape
    return solve_gls_streamed(levels, shape, read, ScratchCubes(scratch or Path(tempfile.gettempdir()), shape))


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
