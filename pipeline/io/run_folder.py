"""A run folder read back: the one loader of a published (or post-processed) run, for everything that works
from a release's public outputs (estimates, the bootstrap, ``censusdp evaluate``, re-runs, ``--resume``).
Confidential microdata is never read here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from censusdp.geography.tree import GeoTree, build_tree, codes_like
from censusdp.pipeline.budget.allocation import QueryAllocation, allocate, allocations_of
from censusdp.pipeline.config.load import apply_overrides, parse_recorded_config
from censusdp.pipeline.config.model import Mechanism, ReleaseConfig
from censusdp.pipeline.config.schema import Query
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.exact import parse_rational
from censusdp.pipeline.io.measurements import (
    ChunkLocation,
    level_location,
    read_chunk_plan,
    read_invariants,
    read_level_table,
    read_lowest_geoids,
)
from censusdp.postprocess import QueryInvariant


def read_record(path: Path, what: str) -> dict[str, Any]:
    """A run's JSON record (``manifest.json``, ``measurements/complete.json``); ``what`` is the one-line error."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        raise CensusDPError(f"{path}: {what}") from None
    if not isinstance(record, dict):
        raise CensusDPError(f"{path}: {what}")
    return record


@dataclass(frozen=True)
class QueryNoise:
    """How one query at one level was measured: ``sigma2`` the variance weight every query has (exact for the
    Gaussian), ``scale`` the discrete Laplace's b (P(x) ~ exp(-|x|/b)), None for the Gaussian.  Re-drawing noise
    (the bootstrap) must use the mechanism that was used: a Gaussian of the same variance has other tails."""

    query: Query
    sigma2: Fraction
    mechanism: Mechanism = Mechanism.GAUSSIAN
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
    # each level's chunk plan as the release that wrote the files holds it (its own estimates); else read from them
    held_plans: dict[int, list[tuple[int, int, ChunkLocation]]] = field(default_factory=dict)

    def level_queries(self, level: int) -> list[tuple[Query, Fraction]]:
        name = self.config.levels[level].name
        return [(self.config.schema.parse_query(a.query), a.sigma2) for a in allocations_of(self.allocations, name)]

    def level_noise(self, level: int) -> list[QueryNoise]:
        """Every query of the level with its mechanism and scale, as the manifest's ``allocation`` records them
        (what the release drew); the allocation recomputed from the configuration fills in only what an older
        manifest lacks (no ``mechanism``: Laplace if it gives a ``scale``, else the Gaussian)."""
        name = self.config.levels[level].name
        recorded = {(e["level"], e["query"]): e for e in self.manifest.get("allocation", [])}
        out = []
        for a in allocations_of(self.allocations, name):
            entry = recorded.get((a.level, a.query), {})
            recorded_mechanism = entry.get("mechanism", ("laplace" if "scale" in entry else "gaussian") if entry
                                           else a.mechanism)
            if recorded_mechanism not in list(Mechanism):
                raise CensusDPError(f"{self.run_dir}: unknown mechanism {recorded_mechanism!r} for {a.query} at {name}")
            mechanism = Mechanism(recorded_mechanism)
            where = f"{self.run_dir}: manifest allocation of {a.query} at {name}"
            sigma2 = parse_rational(entry["sigma2_exact"], where) if "sigma2_exact" in entry else a.sigma2
            scale = None
            if mechanism == Mechanism.LAPLACE:
                if "scale" not in entry and a.scale is None:
                    raise CensusDPError(f"{self.run_dir}: manifest gives no Laplace scale for {a.query} at {name}")
                scale = parse_rational(entry["scale"], where) if "scale" in entry else a.scale
            out.append(QueryNoise(self.config.schema.parse_query(a.query), sigma2, mechanism, scale))
        return out

    def measurements(self, level: int) -> list[tuple[Query, Fraction, np.ndarray]]:
        """Every query measured at the level: (query, σ², noisy answers (n_nodes, q_cells) int64)."""
        name = self.config.levels[level].name
        table = read_level_table(self.measurements_dir, name, ["query", "noisy_value"])
        names = table.column("query").cast(pa.string())
        out = []
        for query, sigma2 in self.level_queries(level):
            values = table.filter(pc.equal(names, query.name)).column("noisy_value").to_numpy()
            out.append((query, sigma2, values.astype(np.int64).reshape(self.tree.n_nodes(level), -1)))
        return out

    def chunk_plan(self, level: int) -> list[tuple[int, int, ChunkLocation]]:
        """The level's chunks as its measurement files lay them out: (first node, stop node, location), one row
        group per chunk and query, whole families each (``CensusDPError`` naming the level's files otherwise)."""
        if level in self.held_plans:
            return self.held_plans[level]
        queries = self.level_queries(level)
        name = self.config.levels[level].name
        plan = read_chunk_plan(self.measurements_dir, name, len(queries), self.config.schema.query_cells(queries[0][0]))
        parent = self.tree.parent[level]
        if (not plan or plan[-1][1] != self.tree.n_nodes(level)
                or (level > 0 and any(parent[start] == parent[start - 1] for start, _, _ in plan[1:]))):
            raise CensusDPError(f"{self.measurements_dir / level_location(self.measurements_dir, name)}: its row "
                                "groups are not the release's chunks (a measurement file rewritten?)")
        return plan

    def table(self, level: int) -> np.ndarray:
        """The published (reconciled, integer) table of a level as dense counts (n_nodes, n_cells)."""
        return self.sparse_table(level).toarray()

    def sparse_table(self, level: int) -> sp.csr_matrix:
        """The published table of a level as sparse int64 counts (n_nodes, n_cells), in memory its non-zeros."""
        schema = self.config.schema
        name = self.config.levels[level].name
        frame = pq.read_table(self.run_dir / "tables" / f"{name}.parquet")
        geoids = self.tree.geoids[level]
        node = np.searchsorted(geoids, codes_like(geoids, frame.column("geoid").to_numpy(zero_copy_only=False)))
        index = [np.searchsorted(np.asarray(a.values), frame.column(a.name).to_numpy(zero_copy_only=False))
                 if list(a.values) == sorted(a.values) else
                 np.array([a.values.index(v) for v in frame.column(a.name).to_pylist()], dtype=np.int64)
                 for a in schema.attributes]
        cells = np.ravel_multi_index(tuple(index), schema.shape) if index else np.zeros(len(node), dtype=np.int64)
        counts = frame.column("count").to_numpy().astype(np.int64)
        return sp.csr_matrix((counts, (node, cells)), shape=(self.tree.n_nodes(level), schema.n_cells))


UNITS_FOLDER = "units"  # release.run.UNITS_DIR: the units universe inside a run folder


def load_run(run_dir: Path, overrides: dict[str, Any] | None = None) -> LoadedRun:
    """Read a run folder's manifest, configuration, tree and invariants (no microdata is read)."""
    run_dir = Path(run_dir).resolve()
    manifest = read_record(run_dir / "manifest.json", "not a censusdp run folder (no readable manifest.json)")
    if "config_raw" not in manifest:
        raise CensusDPError(f"{run_dir}: not a censusdp run folder (no readable manifest.json)")
    raw = manifest["config_raw"]
    apply_overrides(raw, overrides or {})
    config = parse_recorded_config(raw, str(run_dir / "manifest.json"), base=Path(manifest["config"]["source"]).parent)
    lowest = config.levels[-1].name
    located = Path(manifest.get("measurements", {}).get(lowest, f"measurements/{lowest}.parquet"))
    measurements_dir = (located if located.is_absolute() else run_dir / located).parent
    allocations = allocate(config)
    n_queries = len(allocations_of(allocations, lowest))
    tree = build_tree(config.levels, read_lowest_geoids(measurements_dir, lowest, n_queries))
    return LoadedRun(run_dir=run_dir, manifest=manifest, config=config, tree=tree,
                     invariants=read_invariants(measurements_dir, config, tree), allocations=allocations,
                     measurements_dir=measurements_dir)


def units_of(run: LoadedRun, truth: Path | None = None) -> LoadedRun | None:
    """The run's housing-unit universe read back (``units/``), or None; ``truth``: another units file to read
    as its microdata (``censusdp evaluate``)."""
    units = run.config.units
    folder = run.run_dir / UNITS_FOLDER
    if units is None or not folder.is_dir():
        return None
    if truth is not None:
        units = dataclasses.replace(units, input=dataclasses.replace(units.input, path=Path(truth).resolve()))
    measurements = folder / "measurements"
    return LoadedRun(run_dir=folder, manifest=run.manifest.get("units", {}), config=units, tree=run.tree,
                     invariants=read_invariants(measurements, units, run.tree), allocations=allocate(units),
                     measurements_dir=measurements)
