"""``censusdp verify RUN``: every promise a published run makes, recomputed from its published files alone.

What is read and the rules: docs/verify.md.  Every check is a count of the checked items that break a rule; no
published count leaves this module.  A missing row of a level table is a 0; a node's children are the codes it
prefixes.
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
import scipy.sparse as sp

from censusdp.geography.levels import Level
from censusdp.pipeline.config.load import parse_recorded_config
from censusdp.pipeline.config.model import ReleaseConfig, SummaryTables
from censusdp.pipeline.config.persons_per_unit import selection_mask
from censusdp.pipeline.config.schema import Query, Schema
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.summary_tables import TableColumns, table_columns
from censusdp.pipeline.io.verify_ranges import (
    BUCKET_ROWS,
    EVERY_CODE,
    Bound,
    IndexedTable,
    UnreadableTable,
    code_ranges,
)

CELL, COUNT, GEOID = "_cell", "count", "geoid"
Selection = tuple[tuple[str, tuple[str, ...]], ...]  # (attribute, values): the cells where each is among them


@dataclass(frozen=True)
class RuleCheck:
    """One rule at one level: how many items (cells, nodes, values) were checked and how many break it."""

    rule: str
    level: str | None
    checked: int
    violations: int


class RunFileError(CensusDPError):
    """A run file is missing or unreadable, or the manifest does not name it (``censusdp verify`` exits 2)."""


@dataclass(frozen=True)
class Universe:
    """One universe's published files: per level, its table and (where the universe has invariants) the invariants
    file, indexed to be read a range of codes at a time (``verify_ranges``); ``nodes[level]`` the level's node
    count (the manifest's, else the nodes its table lists)."""

    name: str
    config: ReleaseConfig
    tables: dict[str, IndexedTable]
    invariants: dict[str, IndexedTable] | None  # by level: the row groups holding its values
    nodes: dict[str, int]
    zero_cells: tuple[int, ...]  # the cells a structural zero names


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
        parts = _pl94_parts(universes)
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
        rows[universe.name], checks = _level_table(universe.tables[level.name].read(columns, lo, hi), schema, level,
                                                   universe.name)
        rules += checks
        if depth:
            parent = levels[depth - 1]
            parents[universe.name] = _level_table(universe.tables[parent.name].read(columns, lo, hi), schema, parent,
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


def _level_table(frame: pl.DataFrame, schema: Schema, level: Level, universe: str
                 ) -> tuple[pl.DataFrame, tuple[RuleCheck, RuleCheck]]:
    """A level table's well-formed rows (geoid, ``_cell``, count) of ``frame`` (some of its rows, as published), and
    rule 1's two checks of them.  The geoids become categories (each code's text held once)."""
    number = pl.col(COUNT).cast(pl.Float64, strict=False)
    bad = number.is_null() | number.is_infinite() | (number < 0) | (number != number.floor())
    formed = ((pl.col(GEOID).str.len_chars() == level.width) & pl.col(CELL).is_not_null()).fill_null(False)
    frame = (frame.lazy().select(pl.col(GEOID).cast(pl.String), _cell(schema).alias(CELL), pl.col(COUNT),
                                 bad.alias("_bad"))
             .with_columns(formed.alias("_formed"))
             .collect())
    rows = frame.height
    counts = RuleCheck(f"{universe}: counts are non-negative integers", level.name, rows, int(frame["_bad"].sum()))
    kept = frame.filter("_formed").drop("_bad", "_formed").with_columns(
        pl.col(GEOID).cast(pl.Categorical), pl.col(COUNT).cast(pl.Int64, strict=False).fill_null(0),
        pl.col(CELL).cast(pl.Int32))
    del frame
    twice = int(kept.select(pl.struct(GEOID, CELL).is_duplicated().sum()).item())
    formed_rule = RuleCheck(f"{universe}: rows name a node and a cell once", level.name, rows,
                            rows - kept.height + twice)
    return kept, (counts, formed_rule)


def _cell(schema: Schema) -> pl.Expr:
    """A row's flattened cell from its labels (C order; null where a label is unknown)."""
    strides = np.cumprod((1, *schema.shape[:0:-1]))[::-1]
    cell: pl.Expr = pl.lit(0, dtype=pl.Int64)
    for attribute, stride in zip(schema.attributes, strides, strict=True):
        index = pl.col(attribute.name).cast(pl.String).replace_strict(
            list(attribute.values), list(range(len(attribute.values))), default=None, return_dtype=pl.Int64)
        cell = cell + index * int(stride)  # null (an unknown label) stays null
    return cell


def _mismatches(left: pl.DataFrame, right: pl.DataFrame, on: list[str], a: str, b: str) -> int:
    """Keys where ``left[a]`` and ``right[b]`` differ, a key absent from one side counting as 0 there."""
    joined = left.join(right, on=on, how="full", coalesce=True)
    return int(joined.select((pl.col(a).fill_null(0) != pl.col(b).fill_null(0)).sum()).item())


def children_check(universe: Universe, depth: int, parent_rows: pl.DataFrame, rows: pl.DataFrame) -> RuleCheck:
    """Rule 2: every cell of every node of the level above ``depth`` is the sum of that cell over its children
    (codes prefixed by its own), on a range's rows of both levels (``parent_rows``, ``rows``)."""
    parent, n_cells = universe.config.levels[depth - 1], universe.config.schema.n_cells
    sums = (rows.group_by(pl.col(GEOID).cast(pl.String).str.slice(0, parent.width).cast(pl.Categorical), CELL)
            .agg(pl.col(COUNT).sum().alias("children")))
    own = parent_rows.group_by(GEOID, CELL).agg(pl.col(COUNT).sum())
    return RuleCheck(f"{universe.name}: children sum to their parent", parent.name,
                     universe.nodes[parent.name] * n_cells, _mismatches(own, sums, [GEOID, CELL], COUNT, "children"))


def zero_checks(universe: Universe, level: str, rows: pl.DataFrame) -> list[RuleCheck]:
    """Rule 3: the structural zeros' cells are 0 at every node (of ``rows``, a range's rows of ``level``)."""
    zeros = universe.zero_cells
    if not universe.config.structural_zeros:
        return []
    hit = pl.col(CELL).is_in(list(zeros)) & (pl.col(COUNT) != 0)
    return [RuleCheck(f"{universe.name}: structural zeros are 0", level, universe.nodes[level] * len(zeros),
                      int(rows.select(hit.sum()).item()))]


def query_cells(schema: Schema, query: Query) -> pl.DataFrame:
    """(``_cell``, ``query_cell``): the query's cell of every detailed cell (the one row of its column in
    ``Schema.query_matrix``)."""
    cells = schema.query_matrix(query).tocsc().indices
    return pl.DataFrame({CELL: np.arange(schema.n_cells, dtype=np.int32), "query_cell": cells.astype(np.int64)})


def invariant_checks(universe: Universe, level: str, rows: pl.DataFrame, published: pl.DataFrame
                     ) -> list[RuleCheck]:
    """Rule 4: each invariant's marginal of the table equals the value published for it, node by node, on a range's
    rows of ``level`` and the invariants file's rows in that range (``published``)."""
    schema, out = universe.config.schema, []
    for invariant in universe.config.invariants:
        if level not in invariant.levels:
            continue
        mapping = query_cells(schema, invariant.query)
        values = (published.filter((pl.col("level").cast(pl.String) == level)
                                   & (pl.col("query").cast(pl.String) == invariant.query.name))
                  .select(pl.col(GEOID).cast(pl.String).cast(pl.Categorical),
                          pl.col("cell").cast(pl.Int64).alias("query_cell"), pl.col("value")))
        answers = rows.join(mapping, on=CELL).group_by(GEOID, "query_cell").agg(pl.col(COUNT).sum())
        joined = values.join(answers, on=[GEOID, "query_cell"], how="full", coalesce=True)
        wrong = joined.select((pl.col("value").fill_null(0) != pl.col(COUNT).fill_null(0)).sum()).item()
        out.append(RuleCheck(f"{universe.name}: invariant {invariant.query.name} equals its published value",
                             level, joined.height, int(wrong)))
    return out


NODES_AT_ONCE = 1 << 15  # nodes compared at a time: a level's (nodes x variables) block in bounded memory


class _Definitions:
    """Each table's columns against the sums of the level table's cells they are defined from (``part.matrix``;
    a node missing from either side holds zeros), one check per table, on a range's rows of the level table
    (``rows``) and of the wide table (``add``: batch by batch, ``NODES_AT_ONCE`` nodes at a time)."""

    def __init__(self, rows: pl.DataFrame, universe: Universe, part: TableColumns, level: str) -> None:
        self.universe, self.part, self.level = universe, part, level
        self.names = [v.name for v in part.variables]
        self.keys = rows.select(GEOID).unique().sort(GEOID).with_row_index("_row")
        cells = rows.join(self.keys, on=GEOID)
        self.counts = sp.csr_matrix((cells[COUNT].to_numpy(), (cells["_row"].to_numpy(), cells[CELL].to_numpy())),
                                    shape=(self.keys.height, universe.config.schema.n_cells))
        self.wrong = np.zeros(len(self.names), dtype=np.int64)
        self.seen = np.zeros(self.keys.height, dtype=bool)

    def add(self, wide: pl.DataFrame) -> None:
        for batch in wide.iter_slices(NODES_AT_ONCE):
            at = (batch.select(GEOID).join(self.keys, on=GEOID, how="left", maintain_order="left")["_row"]
                  .fill_null(-1).to_numpy().astype(np.int64))
            has = at >= 0
            expected = np.zeros((batch.height, len(self.names)))
            expected[has] = (self.counts[at[has]] @ self.part.matrix).toarray()
            self.wrong += (batch.select(self.names).to_numpy() != expected).sum(axis=0)
            self.seen[at[has]] = True

    def finish(self) -> list[RuleCheck]:
        missing = np.flatnonzero(~self.seen)  # nodes with cells but no row of the wide table: it publishes 0
        for start in range(0, len(missing), NODES_AT_ONCE):
            self.wrong += ((self.counts[missing[start:start + NODES_AT_ONCE]] @ self.part.matrix).toarray() != 0
                           ).sum(axis=0)
        variables, name = self.part.variables, self.universe.name
        return [RuleCheck(f"pl94: {table} columns = sums of the {name}' cells they are defined from", self.level,
                          self.universe.nodes[self.level] * sum(v.table == table for v in variables),
                          int(sum(w for w, v in zip(self.wrong, variables, strict=True) if v.table == table)))
                for table in dict.fromkeys(v.table for v in variables)]


def _identities(wide: pl.DataFrame, level: str, rules: Sequence[tuple[str, pl.Expr]]) -> list[RuleCheck]:
    """Identities between a summary table's own columns, row by row (``rules``: text, broken)."""
    return [RuleCheck(f"pl94: {text}", level, wide.height, int(wide.select(broken.sum()).item()))
            for text, broken in rules]


Part = tuple[TableColumns, str]  # a P.L. table's column definitions and the universe they are defined from


def _pl94_parts(universes: Sequence[Universe]) -> list[Part]:
    """The P.L. tables' column definitions, each with its universe (the units' only where H1 is answerable)."""
    schemas = [u.config.schema for u in universes]
    columns = table_columns(SummaryTables.PL94, schemas[0], schemas[1] if len(schemas) > 1 else None)
    return list(zip(columns, (u.name for u in universes), strict=False))


def pl94_checks(universes: Sequence[Universe], parts: Sequence[Part], level: str, rows: Mapping[str, pl.DataFrame],
                wide: IndexedTable, lo: Bound, hi: Bound) -> list[RuleCheck]:
    """Rule 5: the P.L. 94-171 table's identities and definitions at ``level``, on the rows of the level tables
    (``rows``, by universe) and of the P.L. table (``wide``) with codes in ``[lo, hi)``."""
    persons = universes[0]
    width = next(lv.width for lv in persons.config.levels if lv.name == level)
    identities = ["P1_001N", "P2_001N", "P3_001N", "P4_001N", "P5_001N"] + (
        ["H1_001N", "H1_002N", "H1_003N"] if len(parts) > 1 else [])
    key = (pl.col("GEOID").cast(pl.String) if width else pl.lit("")).cast(pl.Categorical).alias(GEOID)
    definitions = [_Definitions(rows[name], next(u for u in universes if u.name == name), part, level)
                   for part, name in parts]
    columns = list(dict.fromkeys(["GEOID", *identities, *(v.name for part, _ in parts for v in part.variables)]))
    pieces = []
    for batch in wide.batches(columns, lo, hi):  # each row group read once, every column the checks need
        batch = batch.with_columns(key)
        pieces.append(batch.select(GEOID, *identities))
        for definition in definitions:
            definition.add(batch)
    narrow = pl.concat(pieces)
    col = pl.col
    out = _identities(narrow, level, (("P1 total = P2 total", col("P1_001N") != col("P2_001N")),
                                      ("P3 total = P4 total", col("P3_001N") != col("P4_001N")),
                                      ("P5 total <= P1 total", col("P5_001N") > col("P1_001N"))))
    totals = rows[persons.name].group_by(GEOID).agg(col(COUNT).sum())
    out.append(RuleCheck("pl94: P1 total = the level table's persons", level, persons.nodes[level],
                         _mismatches(narrow.select(GEOID, "P1_001N"), totals, [GEOID], "P1_001N", COUNT)))
    if len(parts) > 1:
        out += _identities(narrow, level, (("H1_001N = H1_002N + H1_003N",
                                            col("H1_001N") != col("H1_002N") + col("H1_003N")),))
    return out + [check for definition in definitions for check in definition.finish()]


def _sums(frame: pl.DataFrame, schema: Schema, selection: Selection, alias: str) -> pl.DataFrame:
    cells = np.flatnonzero(selection_mask(schema, selection)).tolist()
    return frame.filter(pl.col(CELL).is_in(cells)).group_by(GEOID).agg(pl.col(COUNT).sum().alias(alias))


def persons_units_checks(config: ReleaseConfig, persons_tables: Mapping[str, pl.DataFrame],
                         units_tables: Mapping[str, pl.DataFrame], nodes: Mapping[str, int] | None = None
                         ) -> list[RuleCheck]:
    """Rule 6, ``min_persons * U <= P <= max_persons * U`` for every ``[[units.persons_per_unit]]`` rule at every
    node of its levels, as three checks that count each node under one at most; tables: the published long form
    by level name (``_cell`` the cell of ``config.schema``'s, or ``config.units.schema``'s, detailed histogram);
    ``nodes``: each level's node count (by default the nodes either table lists)."""
    out = []
    for rule in getattr(config, "persons_per_unit", ()):
        for level in (lv.name for lv in config.levels if lv.name in rule.levels and lv.name in persons_tables):
            p, u = pl.col("P"), pl.col("U")
            joined = (_sums(persons_tables[level], config.schema, rule.persons, "P")
                      .join(_sums(units_tables[level], config.units.schema, rule.units, "U"), on=GEOID, how="full",
                            coalesce=True)
                      .with_columns(p.fill_null(0), u.fill_null(0)))
            for text, broken in (("no persons without units", (p > 0) & (u == 0)),
                                 ("at least min_persons per unit", p < rule.min_persons * u),
                                 ("at most max_persons per unit", (u > 0) & (p > rule.max_persons * u))):
                checked = joined.height if nodes is None else nodes[level]
                out.append(RuleCheck(f"{rule.name}: {text}", level, checked,
                                     int(joined.select(broken.sum()).item())))
    return out
