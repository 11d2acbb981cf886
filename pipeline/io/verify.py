"""``censusdp verify RUN``: every promise a published run makes, recomputed from its published files alone.

What is read and the rules: docs/verify.md.  This module finds and reads the run's files and checks each level a
range of codes at a time (``verify_ranges``), with the rules of ``verify_rules``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.pipeline.config.load import parse_recorded_config
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.config.persons_per_unit import selection_mask
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.verify_ranges import (
    BUCKET_ROWS,
    EVERY_CODE,
    Bound,
    IndexedTable,
    UnreadableTable,
    code_ranges,
)
from censusdp.pipeline.io.verify_rules import (
    COUNT,
    GEOID,
    Part,
    RuleCheck,
    Universe,
    children_check,
    invariant_checks,
    level_rows,
    persons_units_checks,
    pl94_checks,
    pl94_parts,
    zero_checks,
)


class RunFileError(CensusDPError):
    """A run file is missing or unreadable, or the manifest does not name it (``censusdp verify`` exits 2)."""


@dataclass(frozen=True)
class _Range:
    """One range of codes of one level, read: each universe's well-formed rows there (geoid, ``_cell``, count) and
    its parent level's rows in the range (the level's families are whole in it)."""

    lo: Bound
    hi: Bound
    rows: dict[str, pl.DataFrame]  # by universe
    parent_rows: dict[str, pl.DataFrame]


LevelMap = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]  # map(function, jobs), results in order


@dataclass(frozen=True)
class LevelJob:
    """One level's checks (``level_checks``): public paths and counts only, so any process may run it."""

    universes: tuple[Universe, ...]
    depth: int
    wide: IndexedTable | None
    parts: tuple[Part, ...]
    bucket_rows: int


def verify_run(run_dir: Path, *, bucket_rows: int = BUCKET_ROWS, map_levels: LevelMap = map) -> list[RuleCheck]:
    """Every rule the run at ``run_dir`` promises, checked on its published files; ``RunFileError`` (a
    ``CensusDPError``, one line) when a file is missing or unreadable.  Each level is checked a range of codes at a
    time, about ``bucket_rows`` rows of its table each (the same counts for any: docs/verify.md, "Memory"), and the
    levels apart from each other: ``map_levels`` runs them (a release's runner shares them among its workers)."""
    run_dir = Path(run_dir)
    manifest = _manifest(run_dir / "manifest.json")
    config = parse_recorded_config(manifest["config_raw"], str(run_dir / "manifest.json"),
                                   base=Path(manifest.get("config", {}).get("source", ".")).parent)
    nodes = {lv["name"]: int(lv["nodes"]) for lv in manifest.get("levels", []) if "nodes" in lv}
    persons = _universe("persons", config, run_dir, manifest, dict(nodes))
    universes = [persons]
    if config.units is not None:
        universes.append(_universe("units", config.units, run_dir, _part(manifest, "units", run_dir), dict(nodes)))
    wide: dict[str, IndexedTable] = {}
    parts = []
    if "pl94" in manifest.get("summary_tables", {}) or any(t.value == "pl94" for t in config.output.tables):
        located = _part(_part(_part(manifest, "summary_tables", run_dir), "pl94", run_dir), "levels", run_dir)
        parts = pl94_parts(universes)
        names = [v.name for part, _ in parts for v in part.variables]
        for level in config.levels:
            if level.name not in located:
                raise RunFileError(f"{run_dir / 'manifest.json'}: names no pl94 table of level {level.name}")
            path = run_dir / located[level.name]
            _check_wide_columns(path, ["GEOID", *names], names)
            wide[level.name] = _indexed(path, "GEOID")
    jobs = [LevelJob(tuple(universes), depth, wide.get(level.name), tuple(parts), bucket_rows)
            for depth, level in enumerate(config.levels)]
    return [check for found in map_levels(level_checks, jobs) for check in found]


def level_checks(job: LevelJob) -> list[RuleCheck]:
    """Every rule at one level (and its parent's sums), range by range (``code_ranges``), the counts summed.  A
    rule's items are rows or published values, counted in each range, or nodes, counted once from the node counts (by
    the same checks with no row: the empty range ``["", "")``); a count the manifest lacks is the nodes the persons'
    table lists.  ``RunFileError`` where a file does not read."""
    try:
        return _level_checks(job)
    except UnreadableTable as error:
        raise RunFileError(str(error)) from None
    except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError, pl.exceptions.SchemaError):
        level = job.universes[0].config.levels[job.depth].name  # a column of another type than published
        raise RunFileError(f"a published table of level {level}: unreadable (a column of another type)") from None


def _level_checks(job: LevelJob) -> list[RuleCheck]:
    universes, depth = job.universes, job.depth
    levels = universes[0].config.levels
    level, parent = levels[depth], levels[depth - 1] if depth else None
    table = universes[0].tables[level.name]
    ranges = code_ranges(table, parent.width, job.bucket_rows) if parent is not None else [EVERY_CODE]
    per_range: list[list[RuleCheck]] = []  # every range gives the same checks in the same order (the config's)
    found = dict.fromkeys([lv.name for lv in (level, parent) if lv is not None], 0)  # nodes the persons list
    no_nodes = dict.fromkeys([lv.name for lv in levels], 0)
    for lo, hi in ranges:
        checks: list[RuleCheck] = []
        read = _read_range(universes, depth, lo, hi, checks)
        persons = universes[0].name
        found[level.name] += read.rows[persons][GEOID].n_unique()  # the ranges share no code: the counts add up
        if parent is not None:
            found[parent.name] += read.parent_rows[persons][GEOID].n_unique()
        per_range.append(checks + _range_rules([replace(u, nodes=no_nodes) for u in universes], depth, read,
                                               job.wide, job.parts))
    counted = [replace(u, nodes={**found, **u.nodes}) for u in universes]
    checks = []
    read = _read_range(counted, depth, "", "", checks)
    per_range.append(checks + _range_rules(counted, depth, read, job.wide, job.parts))
    return _summed(per_range)


def _read_range(universes: Sequence[Universe], depth: int, lo: Bound, hi: Bound, rules: list[RuleCheck]) -> _Range:
    """Each universe's rows of the level at ``depth`` and of its parent level in ``[lo, hi)`` (the level's rule-1
    checks added to ``rules``)."""
    rows, parents = {}, {}
    for universe in universes:
        levels, schema = universe.config.levels, universe.config.schema
        level = levels[depth]
        columns = [GEOID, *schema.names, COUNT]
        rows[universe.name], checks = level_rows(universe.tables[level.name].read(columns, lo, hi), schema, level,
                                                   universe.name)
        rules += checks
        if depth:
            parent = levels[depth - 1]
            parents[universe.name] = level_rows(universe.tables[parent.name].read(columns, lo, hi), schema, parent,
                                                  universe.name)[0]
    return _Range(lo, hi, rows, parents)


def _range_rules(universes: Sequence[Universe], depth: int, read: _Range, wide: IndexedTable | None,
                 parts: Sequence[Part]) -> list[RuleCheck]:
    """Rules 2-6 at the level at ``depth`` on one range's rows (``_read_range``)."""
    out = []
    level = universes[0].config.levels[depth].name
    for universe in universes:
        rows = read.rows[universe.name]
        if depth:
            out.append(children_check(universe, depth, read.parent_rows[universe.name], rows))
        out += zero_checks(universe, level, rows)
        if universe.invariants is not None:
            at_level = universe.invariants.get(level)
            published = (pl.DataFrame(schema={"level": pl.String, GEOID: pl.String, "query": pl.String,
                                              "cell": pl.Int64, "value": pl.Int64}) if at_level is None else
                         at_level.read(["level", GEOID, "query", "cell", "value"], read.lo, read.hi,
                                       pl.col("level").cast(pl.String) == level))
            out += invariant_checks(universe, level, rows, published)
    tables = {u.name: read.rows[u.name] for u in universes}
    if wide is not None:
        out += pl94_checks(universes, parts, level, tables, wide, read.lo, read.hi)
    if len(universes) > 1:
        out += persons_units_checks(universes[0].config, {level: tables["persons"]}, {level: tables["units"]},
                                    universes[0].nodes)
    return out


def _summed(per_range: Sequence[Sequence[RuleCheck]]) -> list[RuleCheck]:
    """The ranges' checks, one by one (the same rules in the same order in every range): items checked and
    violations summed."""
    out = []
    for same in zip(*per_range, strict=True):
        if len({(c.rule, c.level) for c in same}) != 1:
            raise ValueError("the ranges' checks differ: an internal error")
        out.append(replace(same[0], checked=sum(c.checked for c in same), violations=sum(c.violations for c in same)))
    return out


def require_promises_kept(run_dir: Path, map_levels: LevelMap = map) -> None:
    """``CensusDPError`` naming the broken rules and levels (never a count) unless every rule of ``verify_run``
    holds: publish's last check, on the bytes a user will read rather than the arrays they were written from."""
    broken = [check for check in verify_run(run_dir, map_levels=map_levels) if check.violations]
    if broken:
        rules = "; ".join(f"{c.rule} [{c.level}]" if c.level else c.rule for c in broken[:5])
        raise CensusDPError(f"the release breaks {len(broken)} of its own rules ({rules}): nothing was published "
                            "(an internal error: please report it)")


def _manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        raise RunFileError(f"{path}: missing or unreadable (not a censusdp run folder)") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config_raw"), dict):
        raise RunFileError(f"{path}: not a censusdp manifest (no config_raw)")
    return manifest


def _part(record: Mapping[str, Any], key: str, run_dir: Path) -> Mapping[str, Any]:
    value = record.get(key)
    if not isinstance(value, Mapping):
        raise RunFileError(f"{run_dir / 'manifest.json'}: names no {key}")
    return value


@contextmanager
def _reading(path: Path) -> Iterator[list[Path]]:
    """The files of a Parquet file or folder of parts, read in the block; ``RunFileError`` if missing or unreadable."""
    if not path.exists():
        raise RunFileError(f"{path}: missing")
    try:
        yield sorted(path.glob("*.parquet")) if path.is_dir() else [path]  # names, never a pattern: runs[2020]/
    except (OSError, ValueError, pa.ArrowException, pl.exceptions.PolarsError):
        raise RunFileError(f"{path}: unreadable (not a Parquet file or folder of parts)") from None


def _check_wide_columns(path: Path, needed: Sequence[str], numeric: Sequence[str]) -> None:
    """``RunFileError`` unless every part of a table has the ``needed`` columns, ``numeric`` ones numeric."""
    kinds = (pa.types.is_integer, pa.types.is_floating)
    with _reading(path) as files:
        for file in files or [path]:
            schema = pq.read_schema(file)
            _need(schema.names, needed, path)
            if text := next((n for n in numeric if not any(kind(schema.field(n).type) for kind in kinds)), None):
                raise RunFileError(f"{path}: column {text} is not numeric")


def _need(names: Sequence[str], columns: Sequence[str], path: Path) -> None:
    if missing := next((c for c in columns if c not in names), None):
        raise RunFileError(f"{path}: no column {missing}")


def _universe(name: str, config: ReleaseConfig, run_dir: Path, record: Mapping[str, Any], nodes: dict[str, int]
              ) -> Universe:
    """A universe's level tables and invariants file, checked for their columns and indexed."""
    located = _part(record, "tables", run_dir)
    tables = {}
    for level in config.levels:
        if level.name not in located:
            raise RunFileError(f"{run_dir / 'manifest.json'}: names no {name} table of level {level.name}")
        path = run_dir / located[level.name]
        _check_wide_columns(path, [GEOID, *config.schema.names, COUNT], [])
        tables[level.name] = _indexed(path, GEOID)
    invariants = None
    if config.invariants:
        lowest = config.levels[-1].name
        located_at = Path(_part(record, "measurements", run_dir).get(lowest, f"measurements/{lowest}.parquet"))
        path = (located_at if located_at.is_absolute() else run_dir / located_at).parent / "invariants.parquet"
        _check_wide_columns(path, ["level", GEOID, "query", "cell", "value"], [])
        invariants = _indexed(path, GEOID).split("level")
    zeros = np.flatnonzero(np.any([selection_mask(config.schema, tuple(z.items())) for z in config.structural_zeros],
                                  axis=0)) if config.structural_zeros else np.zeros(0, dtype=np.int64)
    return Universe(name, config, tables, invariants, nodes, tuple(int(c) for c in zeros))


def _indexed(path: Path, column: str) -> IndexedTable:
    with _reading(path) as files:
        return IndexedTable(files, column)


