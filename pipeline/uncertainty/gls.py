"""Uncertainty of a release, from its public outputs only: GLS estimates with exact standard errors.

``write_estimates(run_dir)`` writes, for every level,

- ``estimates/<level>.parquet``: ``geoid``, one column per attribute, ``estimate``, ``std_error``, ``ci_low``,
  ``ci_high`` — every detailed cell of every node (zeros included);
- ``estimates/queries/<level>.parquet``: the same for every other query measured at the level (and ``total``),
  long form: ``geoid``, ``query``, ``cell``, ``estimate``, ``std_error``, ``ci_low``, ``ci_high``.

The estimates are the generalised least squares fit of all the run's noisy measurements (``postprocess.gls``):
unbiased, not rounded, possibly negative, consistent across levels; the standard errors are exact, from the
public σ² of every query (Thm 19.37(iii)), and the 95% intervals are estimate ± 1.96·std_error.  Inputs are the
measurements, the invariants and the configuration — never microdata — so this is post-processing and spends
no budget (Thm 19.25).  The parametric bootstrap of the integer tables is ``pipeline.uncertainty.bootstrap``;
the command ``censusdp uncertainty`` is ``pipeline.cli.uncertainty``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from geography.tree import GeoTree, build_tree
from pipeline.budget.allocation import QueryAllocation, allocate
from pipeline.config.load import parse_recorded_config
from pipeline.config.model import ReleaseConfig
from pipeline.config.schema import DETAILED, TOTAL, Query
from pipeline.errors import CensusDPError
from pipeline.io.measurements import read_invariants, read_lowest_geoids
from pipeline.release.stages import ReleaseRun
from postprocess import QueryInvariant
from postprocess.gls import GlsInvariant, GlsLevel, GlsQuery, GlsResult, interval, solve_gls

ESTIMATES_DIR = "estimates"


@dataclass(frozen=True)
class QueryNoise:
    """How one query at one level was measured: the mechanism and its public noise parameters.

    ``sigma2`` is the variance weight every query has (exact for the Gaussian); ``scale`` is the discrete
    Laplace's scale b (P(x) ~ exp(-|x|/b)), None for the Gaussian.  Re-drawing noise (the bootstrap) must use
    the mechanism that was used: a Gaussian of the same variance has other tails.
    """

    query: Query
    sigma2: Fraction
    mechanism: str = "gaussian"
    scale: Fraction | None = None


@dataclass
class LoadedRun:
    """A published run folder, read back: configuration, tree, invariants and where the measurements are."""

    run_dir: Path
    manifest: dict[str, Any]
    config: ReleaseConfig
    tree: GeoTree
    invariants: dict[int, list[QueryInvariant]]
    allocations: tuple[QueryAllocation, ...]
    measurements_dir: Path

    def level_queries(self, level: int) -> list[tuple[Query, Fraction]]:
        name = self.config.levels[level].name
        return [(self.config.schema.parse_query(a.query), a.sigma2) for a in self.allocations if a.level == name]

    def level_noise(self, level: int) -> list[QueryNoise]:
        """Every query of the level with its mechanism and scale, as the manifest's ``allocation`` records them.

        The manifest says what the release drew; the allocation recomputed from the configuration fills in
        only what an older manifest lacks (no ``mechanism``: Laplace if it gives a ``scale``, else the Gaussian).
        """
        name = self.config.levels[level].name
        recorded = {(e["level"], e["query"]): e for e in self.manifest.get("allocation", [])}
        out = []
        for a in self.allocations:
            if a.level != name:
                continue
            entry = recorded.get((a.level, a.query), {})
            mechanism = entry.get("mechanism", ("laplace" if "scale" in entry else "gaussian") if entry
                                  else a.mechanism)
            sigma2 = Fraction(entry["sigma2_exact"]) if "sigma2_exact" in entry else a.sigma2
            scale = None
            if mechanism == "laplace":
                if "scale" not in entry and a.scale is None:
                    raise CensusDPError(f"{self.run_dir}: manifest gives no Laplace scale for {a.query} at {name}")
                scale = Fraction(entry["scale"]) if "scale" in entry else a.scale
            elif mechanism != "gaussian":
                raise CensusDPError(f"{self.run_dir}: unknown mechanism {mechanism!r} for {a.query} at {name}")
            out.append(QueryNoise(self.config.schema.parse_query(a.query), sigma2, mechanism, scale))
        return out

    def measurements(self, level: int) -> list[tuple[Query, Fraction, np.ndarray]]:
        """Every query measured at the level: (query, σ², noisy answers (n_nodes, q_cells) int64)."""
        name = self.config.levels[level].name
        table = pq.read_table(self.measurements_dir / f"{name}.parquet", columns=["query", "noisy_value"])
        names = table.column("query").cast(pa.string())
        out = []
        for query, sigma2 in self.level_queries(level):
            values = table.filter(pc.equal(names, query.name)).column("noisy_value").to_numpy()
            out.append((query, sigma2, values.astype(np.int64).reshape(self.tree.n_nodes(level), -1)))
        return out

    def table(self, level: int) -> np.ndarray:
        """The published (reconciled, integer) table of a level as dense counts (n_nodes, n_cells)."""
        schema = self.config.schema
        name = self.config.levels[level].name
        frame = pq.read_table(self.run_dir / "tables" / f"{name}.parquet")
        node = np.searchsorted(self.tree.geoids[level], frame.column("geoid").to_numpy(zero_copy_only=False))
        index = [np.searchsorted(np.asarray(a.values), frame.column(a.name).to_numpy(zero_copy_only=False))
                 if list(a.values) == sorted(a.values) else
                 np.array([a.values.index(v) for v in frame.column(a.name).to_pylist()], dtype=np.int64)
                 for a in schema.attributes]
        cells = np.ravel_multi_index(tuple(index), schema.shape) if index else np.zeros(len(node), dtype=np.int64)
        dense = np.zeros((self.tree.n_nodes(level), schema.n_cells), dtype=np.int64)
        np.add.at(dense, (node, cells), frame.column("count").to_numpy())
        return dense


def load_run(run_dir: Path, overrides: dict[str, Any] | None = None) -> LoadedRun:
    """Read a run folder's manifest, configuration, tree and invariants (no microdata is read)."""
    run_dir = Path(run_dir).resolve()
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        raw = manifest["config_raw"]
    except (OSError, ValueError, KeyError):
        raise CensusDPError(f"{run_dir}: not a censusdp run folder (no readable manifest.json)") from None
    for dotted, value in (overrides or {}).items():
        section, key = dotted.split(".", 1)
        raw.setdefault(section, {})[key] = value
    config = parse_recorded_config(raw, str(run_dir / "manifest.json"), base=Path(manifest["config"]["source"]).parent)
    lowest = config.levels[-1].name
    located = Path(manifest.get("measurements", {}).get(lowest, f"measurements/{lowest}.parquet"))
    measurements_dir = (located if located.is_absolute() else run_dir / located).parent
    allocations = allocate(config)
    n_queries = sum(1 for a in allocations if a.level == lowest)
    tree = build_tree(config.levels, read_lowest_geoids(measurements_dir / f"{lowest}.parquet", n_queries))
    return LoadedRun(run_dir=run_dir, manifest=manifest, config=config, tree=tree,
                     invariants=read_invariants(measurements_dir, config, tree), allocations=allocations,
                     measurements_dir=measurements_dir)


def axes_of(run: LoadedRun, query: Query) -> tuple[int, ...]:
    return tuple(run.config.schema.names.index(a) for a in query.attributes)


def gls_levels(run: LoadedRun, noisy: list[list[tuple[Query, Fraction, np.ndarray]]] | None = None) -> list[GlsLevel]:
    """The GLS problem of a run: its measurements (or ``noisy``, the same structure) and its invariants."""
    schema = run.config.schema
    levels = []
    for level in range(run.tree.depth):
        measured = noisy[level] if noisy is not None else run.measurements(level)
        queries = [GlsQuery(axes_of(run, q), float(s2), values) for q, s2, values in measured]
        invariants = [GlsInvariant(axes_of(run, schema.parse_query(i.name)), i.values)
                      for i in run.invariants.get(level, [])]
        levels.append(GlsLevel(parent=run.tree.parent[level], queries=queries, invariants=invariants))
    return levels


def gls_estimates(run: LoadedRun) -> GlsResult:
    """The exact GLS fit of every level of the run (``postprocess.gls.solve_gls``)."""
    return solve_gls(gls_levels(run), run.config.schema.shape)


def _columns(estimate: np.ndarray, std_error: np.ndarray) -> dict[str, pa.Array]:
    low, high = interval(estimate, std_error**2)
    return {"estimate": pa.array(estimate), "std_error": pa.array(std_error),
            "ci_low": pa.array(low), "ci_high": pa.array(high)}


def write_estimates(run_dir: Path) -> list[Path]:
    """The estimates of a published run folder, read back (``censusdp uncertainty``, the demo)."""
    return write_loaded_estimates(load_run(run_dir))


def write_release_estimates(run: ReleaseRun, manifest: dict[str, Any]) -> list[Path]:
    """A release's own estimates (``output.estimates``), from the configuration, tree, invariants and allocation
    it holds and the manifest it just wrote; ``publish`` calls this before the run is renamed into place.  Only
    the noisy measurements are read from their files: a release streams them to disk level by level."""
    if run.tree is None:
        raise CensusDPError("internal error: estimates asked for before the run's geography was built")
    measurements = Path(run.measurements_dir) if run.measurements_dir else run.work_dir / "measurements"
    return write_loaded_estimates(LoadedRun(run_dir=run.work_dir, manifest=manifest, config=run.config,
                                            tree=run.tree, invariants=run.invariants, allocations=run.allocations,
                                            measurements_dir=measurements))


def write_loaded_estimates(run: LoadedRun) -> list[Path]:
    """Write ``estimates/<level>.parquet`` and ``estimates/queries/<level>.parquet``; return the paths."""
    result = gls_estimates(run)
    schema = run.config.schema
    out_dir = run.run_dir / ESTIMATES_DIR
    (out_dir / "queries").mkdir(parents=True, exist_ok=True)
    written = []
    for level, spec in enumerate(run.config.levels):
        n, cells = run.tree.n_nodes(level), schema.n_cells
        geoids = pa.array(run.tree.geoids[level].tolist(), type=pa.string())
        node = np.repeat(np.arange(n, dtype=np.int32), cells)
        columns: dict[str, pa.Array] = {"geoid": pa.DictionaryArray.from_arrays(node, geoids)}
        multi = np.unravel_index(np.arange(cells), schema.shape)
        for attribute, index in zip(schema.attributes, multi, strict=True):
            columns[attribute.name] = pa.DictionaryArray.from_arrays(np.tile(index.astype(np.int32), n),
                                                                     pa.array(attribute.values))
        sd = np.repeat(np.sqrt(result.query_variance(level)), cells)
        columns.update(_columns(result.estimates[level].ravel(), sd))
        path = out_dir / f"{spec.name}.parquet"
        pq.write_table(pa.table(columns), path, compression="zstd")
        written.append(path)
        queries = {q.name: q for q, _ in run.level_queries(level) if q.name != DETAILED}  # cells: the file above
        queries.setdefault(TOTAL, schema.parse_query(TOTAL))
        parts = []
        for query in queries.values():
            axes = axes_of(run, query)
            values = result.query_estimate(level, axes)
            q_cells = values.shape[1]
            sd = np.repeat(np.sqrt(result.query_variance(level, axes)), q_cells)
            part = {"geoid": pa.DictionaryArray.from_arrays(np.repeat(np.arange(n, dtype=np.int32), q_cells),
                                                            geoids),
                    "query": pa.DictionaryArray.from_arrays(np.zeros(values.size, dtype=np.int32),
                                                             pa.array([query.name])),
                    "cell": pa.array(np.tile(np.arange(q_cells, dtype=np.int32), n))}
            part.update(_columns(values.ravel(), sd))
            parts.append(pa.table(part))
        path = out_dir / "queries" / f"{spec.name}.parquet"
        pq.write_table(pa.concat_tables(parts), path, compression="zstd")
        written.append(path)
    return written
