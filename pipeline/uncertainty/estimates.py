"""Uncertainty of a release, from its public outputs only (files and model: docs/uncertainty.md): GLS estimates
with exact standard errors.  The inputs are the measurements with their public σ², the invariants and the
configuration, never microdata, so this is post-processing and spends no budget (Thm 19.25).
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
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
    """Fresh noisy answers of ``truth`` (dense histograms per level) to every level x query, with the release's own
    mechanisms and public parameters: another release's measurements, for coverage checks (``gls_levels(run,
    noisy=...)``).  Evaluation only: it needs the truth."""
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


def _chunk_table(geoids: pa.Array, middle: dict[str, pa.Array], estimate: np.ndarray, sd: np.ndarray) -> pa.Table:
    """A chunk's rows of ``estimate`` (nodes, cells): ``geoid`` (the chunk's own nodes as its row group's
    dictionary), the ``middle`` columns, then ``estimate``, ``std_error``, ``ci_low`` and ``ci_high``."""
    n, cells = estimate.shape
    low, high = interval(estimate.ravel(), sd**2)
    return pa.table({"geoid": pa.DictionaryArray.from_arrays(np.repeat(np.arange(n, dtype=np.int32), cells), geoids),
                     **middle, "estimate": pa.array(estimate.ravel()), "std_error": pa.array(sd),
                     "ci_low": pa.array(low), "ci_high": pa.array(high)})


def write_estimates(run_dir: Path) -> list[Path]:
    """The estimates of a published run folder, read back (``censusdp uncertainty``, the demo)."""
    return write_loaded_estimates(load_run(run_dir))


def write_release_estimates(release: Release, manifest: dict[str, Any]) -> list[Path]:
    """A release's own estimates (``output.estimates``), from what it holds and the manifest it just wrote (only the
    measurements are read back from their files); ``publish`` calls this before the run is renamed into place."""
    run = release.persons
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    return write_loaded_estimates(LoadedRun(run_dir=run.work_dir, manifest=manifest, config=run.config,
                                            tree=tree, invariants=run.invariants, allocations=run.allocations,
                                            measurements_dir=run.measurements, held_plans=dict(run.chunk_plan)))


def _level_files(run: LoadedRun, stream: StreamedGls, level: int, out_dir: Path) -> list[Path]:
    """One level's two files, written chunk by chunk of the engine's plan (a queries file's rows run by chunk, then
    query, then node)."""
    schema, name = run.config.schema, run.config.levels[level].name
    geoids = pa.array(run.tree.geoids[level].tolist(), type=pa.string())
    multi = np.unravel_index(np.arange(schema.n_cells), schema.shape)
    queries = {q.name: q for q, _ in run.level_queries(level) if q.name != DETAILED}  # cells: the detailed file
    queries.setdefault(TOTAL, schema.parse_query(TOTAL))
    specs = {query_name: spec_of(schema, query) for query_name, query in queries.items()}
    paths = [out_dir / f"{name}.parquet", out_dir / "queries" / f"{name}.parquet"]
    with ExitStack() as stack:
        writers: list[pq.ParquetWriter] = []
        for start, stop, estimate in stream.chunk_estimates(level):
            n = stop - start
            attributes = {attribute.name: pa.DictionaryArray.from_arrays(np.tile(index.astype(np.int32), n),
                                                                         pa.array(attribute.values))
                          for attribute, index in zip(schema.attributes, multi, strict=True)}
            sd = np.sqrt(stream.variance(level, None, start, stop)).ravel()  # per cell: a recode's groups differ
            tables = [_chunk_table(geoids[start:stop], attributes, estimate, sd)]
            parts = []
            for query_name, spec in specs.items():
                values = answer(estimate, schema.shape, spec)
                sd = np.sqrt(stream.variance(level, spec, start, stop)).ravel()
                middle = {"query": pa.DictionaryArray.from_arrays(np.zeros(values.size, dtype=np.int32),
                                                                  pa.array([query_name])),
                          "cell": pa.array(np.tile(np.arange(values.shape[1], dtype=np.int32), n))}
                parts.append(_chunk_table(geoids[start:stop], middle, values, sd))
            tables.append(pa.concat_tables(parts))
            if not writers:  # opened with the first chunk's schemas
                writers = [stack.enter_context(pq.ParquetWriter(path, table.schema, compression="zstd"))
                           for path, table in zip(paths, tables, strict=True)]
            for writer, table in zip(writers, tables, strict=True):
                writer.write_table(table)
    return paths


def write_loaded_estimates(run: LoadedRun) -> list[Path]:
    """Write ``estimates/<level>.parquet`` and ``estimates/queries/<level>.parquet``; return the paths."""
    out_dir = run.run_dir / ESTIMATES_DIR
    with open_gls(run) as stream:  # solved first: a design it cannot solve leaves no folder behind
        (out_dir / "queries").mkdir(parents=True, exist_ok=True)
        return [path for level in range(run.tree.depth) for path in _level_files(run, stream, level, out_dir)]
