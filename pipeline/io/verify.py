"""``censusdp verify RUN``: every promise a published run makes, recomputed from its published files alone.

What is read and the rules: docs/verify.md.  Every check is a count of the checked items that break a rule; no
published count leaves this module.  A missing row of a level table is a 0; a node's children are the codes it
prefixes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
    """One universe's published levels, read back: ``tables[level]`` holds its well-formed rows (geoid, ``_cell``
    the flattened cell, count), ``nodes[level]`` the manifest's node count."""

    name: str
    config: ReleaseConfig
    tables: dict[str, pl.DataFrame]
    nodes: dict[str, int]


def verify_run(run_dir: Path) -> list[RuleCheck]:
    """Every rule the run at ``run_dir`` promises, checked on its published files; ``RunFileError`` (a
    ``CensusDPError``, one line) when a file is missing or unreadable."""
    run_dir = Path(run_dir)
    manifest = _manifest(run_dir / "manifest.json")
    config = parse_recorded_config(manifest["config_raw"], str(run_dir / "manifest.json"),
                                   base=Path(manifest.get("config", {}).get("source", ".")).parent)
    nodes = {lv["name"]: int(lv["nodes"]) for lv in manifest.get("levels", []) if "nodes" in lv}
    checks: list[RuleCheck] = []
    persons = _universe("persons", config, run_dir, manifest, nodes, checks)
    units = None
    if config.units is not None:
        units = _universe("units", config.units, run_dir, _part(manifest, "units", run_dir), nodes, checks)
    if "pl94" in manifest.get("summary_tables", {}) or any(t.value == "pl94" for t in config.output.tables):
        pl94 = _part(_part(manifest, "summary_tables", run_dir), "pl94", run_dir)
        checks += pl94_checks(run_dir, _part(pl94, "levels", run_dir), persons, units)
    if units is not None:
        checks += persons_units_checks(config, persons.tables, units.tables, persons.nodes)
    return checks


def require_promises_kept(run_dir: Path) -> None:
    """``CensusDPError`` naming the broken rules and levels (never a count) unless every rule of ``verify_run``
    holds: publish's last check, on the bytes a user will read rather than the arrays they were written from."""
    broken = [check for check in verify_run(run_dir) if check.violations]
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


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """A Parquet file or a folder of part files, as one frame; ``RunFileError`` if missing or unreadable."""
    with _reading(path) as files:
        return pl.read_parquet(files, columns=list(columns) if columns else None, glob=False)


def _check_wide_columns(path: Path, needed: Sequence[str], numeric: Sequence[str]) -> None:
    """``RunFileError`` unless every part of a table has the ``needed`` columns, ``numeric`` ones numeric."""
    kinds = (pa.types.is_integer, pa.types.is_floating)
    with _reading(path) as files:
        for file in files or [path]:
            schema = pq.read_schema(file)
            _need(schema.names, needed, path)
            if text := next((n for n in numeric if not any(kind(schema.field(n).type) for kind in kinds)), None):
                raise RunFileError(f"{path}: column {text} is not numeric")


def read_batches(path: Path, columns: Sequence[str], rows: int) -> Iterator[pl.DataFrame]:
    """The named columns of a Parquet file or folder of parts, ``rows`` rows at a time (bounded memory)."""
    with _reading(path) as files:
        for file in files:
            for batch in pq.ParquetFile(file).iter_batches(batch_size=rows, columns=list(columns)):
                yield pl.DataFrame(pl.from_arrow(batch))


def _need(names: Sequence[str], columns: Sequence[str], path: Path) -> None:
    if missing := next((c for c in columns if c not in names), None):
        raise RunFileError(f"{path}: no column {missing}")


def _universe(name: str, config: ReleaseConfig, run_dir: Path, record: Mapping[str, Any], nodes: dict[str, int],
              checks: list[RuleCheck]) -> Universe:
    """Read a universe's level tables and check them: their rows (rule 1), sums, zeros and invariants (2-4)."""
    located = _part(record, "tables", run_dir)
    tables: dict[str, pl.DataFrame] = {}
    counts, rows = [], []
    for level in config.levels:
        if level.name not in located:
            raise RunFileError(f"{run_dir / 'manifest.json'}: names no {name} table of level {level.name}")
        tables[level.name], (count, row) = _level_table(run_dir / located[level.name], config.schema, level, name)
        counts.append(count)
        rows.append(row)
        nodes.setdefault(level.name, tables[level.name][GEOID].n_unique())
    universe = Universe(name, config, tables, nodes)
    checks += counts + rows + children_checks(universe) + zero_checks(universe)
    if config.invariants:
        lowest = config.levels[-1].name
        located_at = Path(_part(record, "measurements", run_dir).get(lowest, f"measurements/{lowest}.parquet"))
        path = (located_at if located_at.is_absolute() else run_dir / located_at).parent / "invariants.parquet"
        checks += invariant_checks(universe, path)
    return universe


def _level_table(path: Path, schema: Schema, level: Level, universe: str
                 ) -> tuple[pl.DataFrame, tuple[RuleCheck, RuleCheck]]:
    """A level table's well-formed rows (geoid, ``_cell``, count), and rule 1's two checks of every row.  The labels
    become ``_cell`` as the files are scanned, and the geoids categories (each code's text held once): a row holds
    16 bytes, where the text columns took most of the memory the checks needed at the nation's blocks."""
    _check_wide_columns(path, [GEOID, *schema.names, COUNT], [])
    with _reading(path) as files:
        number = pl.col(COUNT).cast(pl.Float64, strict=False)
        bad = number.is_null() | number.is_infinite() | (number < 0) | (number != number.floor())
        formed = ((pl.col(GEOID).str.len_chars() == level.width) & pl.col(CELL).is_not_null()).fill_null(False)
        frame = (pl.scan_parquet(files, glob=False)
                 .select(pl.col(GEOID).cast(pl.String), _cell(schema).alias(CELL), pl.col(COUNT),
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


def children_checks(universe: Universe) -> list[RuleCheck]:
    """Rule 2: every cell of every node is the sum of that cell over its children (codes prefixed by its own)."""
    levels, tables, n_cells = universe.config.levels, universe.tables, universe.config.schema.n_cells
    out = []
    for parent, child in zip(levels, levels[1:], strict=False):
        sums = (tables[child.name].group_by(pl.col(GEOID).cast(pl.String).str.slice(0, parent.width)
                                            .cast(pl.Categorical), CELL)
                .agg(pl.col(COUNT).sum().alias("children")))
        own = tables[parent.name].group_by(GEOID, CELL).agg(pl.col(COUNT).sum())
        out.append(RuleCheck(f"{universe.name}: children sum to their parent", parent.name,
                             universe.nodes[parent.name] * n_cells, _mismatches(own, sums, [GEOID, CELL], COUNT,
                                                                                  "children")))
    return out


def zero_checks(universe: Universe) -> list[RuleCheck]:
    """Rule 3: the structural zeros' cells are 0 at every node."""
    config = universe.config
    if not config.structural_zeros:
        return []
    zeros = np.flatnonzero(np.any([selection_mask(config.schema, tuple(z.items())) for z in config.structural_zeros],
                                  axis=0))
    hit = pl.col(CELL).is_in(zeros.tolist()) & (pl.col(COUNT) != 0)
    return [RuleCheck(f"{universe.name}: structural zeros are 0", lv.name, universe.nodes[lv.name] * len(zeros),
                      int(universe.tables[lv.name].select(hit.sum()).item())) for lv in config.levels]


def query_cells(schema: Schema, query: Query) -> pl.DataFrame:
    """(``_cell``, ``query_cell``): the query's cell of every detailed cell (the one row of its column in
    ``Schema.query_matrix``)."""
    cells = schema.query_matrix(query).tocsc().indices
    return pl.DataFrame({CELL: np.arange(schema.n_cells, dtype=np.int32), "query_cell": cells.astype(np.int64)})


def invariant_checks(universe: Universe, path: Path) -> list[RuleCheck]:
    """Rule 4: each invariant's marginal of the table equals the value published for it (``path``: the universe's
    invariants file), node by node; one (level, query) read at a time (the units' block invariants are the blocks
    times the query's cells: a nation's are tens of millions of rows)."""
    schema, out = universe.config.schema, []
    _check_wide_columns(path, ["level", GEOID, "query", "cell", "value"], [])
    with _reading(path) as files:
        published = pl.scan_parquet(files, glob=False)
        for invariant in universe.config.invariants:
            mapping = query_cells(schema, invariant.query)
            for level in invariant.levels:
                values = (published.filter((pl.col("level").cast(pl.String) == level)
                                           & (pl.col("query").cast(pl.String) == invariant.query.name))
                          .select(pl.col(GEOID).cast(pl.String).cast(pl.Categorical),
                                  pl.col("cell").cast(pl.Int64).alias("query_cell"),
                                  pl.col("value")).collect())
                answers = (universe.tables[level].join(mapping, on=CELL).group_by(GEOID, "query_cell")
                           .agg(pl.col(COUNT).sum()))
                keys = [GEOID, "query_cell"]
                joined = values.join(answers, on=keys, how="full", coalesce=True)
                wrong = joined.select((pl.col("value").fill_null(0) != pl.col(COUNT).fill_null(0)).sum()).item()
                out.append(RuleCheck(f"{universe.name}: invariant {invariant.query.name} equals its published value",
                                     level, joined.height, int(wrong)))
    return out


NODES_AT_ONCE = 1 << 15  # nodes compared at a time: a level's (nodes x variables) block in bounded memory


def _definitions(wide: Iterator[pl.DataFrame], universe: Universe, part: TableColumns, level: str, nodes: int
                 ) -> list[RuleCheck]:
    """Each table's columns against the sums of the level table's cells they are defined from (``part.matrix``;
    a node missing from either side holds zeros), one check per table; ``wide``: the wide table's row batches."""
    frame, variables, matrix = universe.tables[level], part.variables, part.matrix
    names = [v.name for v in variables]
    keys = frame.select(GEOID).unique().sort(GEOID).with_row_index("_row")
    cells = frame.join(keys, on=GEOID)
    counts = sp.csr_matrix((cells[COUNT].to_numpy(), (cells["_row"].to_numpy(), cells[CELL].to_numpy())),
                           shape=(keys.height, universe.config.schema.n_cells))
    wrong = np.zeros(len(names), dtype=np.int64)
    seen = np.zeros(keys.height, dtype=bool)
    for batch in wide:
        rows = batch.select(GEOID).join(keys, on=GEOID, how="left", maintain_order="left")["_row"]
        at = rows.fill_null(-1).to_numpy().astype(np.int64)
        has = at >= 0
        expected = np.zeros((batch.height, len(names)))
        expected[has] = (counts[at[has]] @ matrix).toarray()
        wrong += (batch.select(names).to_numpy() != expected).sum(axis=0)
        seen[at[has]] = True
    missing = np.flatnonzero(~seen)  # nodes with cells but no row of the wide table: it publishes 0 for them
    for start in range(0, len(missing), NODES_AT_ONCE):
        wrong += ((counts[missing[start:start + NODES_AT_ONCE]] @ matrix).toarray() != 0).sum(axis=0)
    tables = dict.fromkeys(v.table for v in variables)
    return [RuleCheck(f"pl94: {table} columns = sums of the {universe.name}' cells they are defined from", level,
                      nodes * sum(v.table == table for v in variables),
                      int(sum(w for w, v in zip(wrong, variables, strict=True) if v.table == table)))
            for table in tables]


def _identities(wide: pl.DataFrame, level: str, rules: Sequence[tuple[str, pl.Expr]]) -> list[RuleCheck]:
    """Identities between a summary table's own columns, row by row (``rules``: text, broken)."""
    return [RuleCheck(f"pl94: {text}", level, wide.height, int(wide.select(broken.sum()).item()))
            for text, broken in rules]


def pl94_checks(run_dir: Path, located: Mapping[str, Any], persons: Universe, units: Universe | None
                ) -> list[RuleCheck]:
    """Rule 5: the P.L. 94-171 tables' identities and definitions, at every level."""
    columns = table_columns(SummaryTables.PL94, persons.config.schema, units.config.schema if units else None)
    parts = list(zip(columns, (persons, units), strict=False))  # the units' only where H1 is answerable
    names = [v.name for part in columns for v in part.variables]
    out = []
    for level in persons.config.levels:
        if level.name not in located:
            raise RunFileError(f"{run_dir / 'manifest.json'}: names no pl94 table of level {level.name}")
        path = run_dir / located[level.name]
        _check_wide_columns(path, ["GEOID", *names], names)
        identities = ["P1_001N", "P2_001N", "P3_001N", "P4_001N", "P5_001N"] + (
            ["H1_001N", "H1_002N", "H1_003N"] if len(parts) > 1 else [])
        key = (pl.col("GEOID").cast(pl.String) if level.width else pl.lit("")).cast(pl.Categorical).alias(GEOID)
        narrow = read_parquet(path, ["GEOID", *identities]).with_columns(key)
        nodes, col = persons.nodes[level.name], pl.col
        out += _identities(narrow, level.name, (("P1 total = P2 total", col("P1_001N") != col("P2_001N")),
                                                ("P3 total = P4 total", col("P3_001N") != col("P4_001N")),
                                                ("P5 total <= P1 total", col("P5_001N") > col("P1_001N"))))
        totals = persons.tables[level.name].group_by(GEOID).agg(col(COUNT).sum())
        out.append(RuleCheck("pl94: P1 total = the level table's persons", level.name, nodes,
                             _mismatches(narrow.select(GEOID, "P1_001N"), totals, [GEOID], "P1_001N", COUNT)))
        for part, universe in parts:
            if universe is units:
                out += _identities(narrow, level.name, (("H1_001N = H1_002N + H1_003N",
                                                         col("H1_001N") != col("H1_002N") + col("H1_003N")),))
            wide = read_batches(path, ["GEOID", *(v.name for v in part.variables)], NODES_AT_ONCE)
            out += _definitions((batch.with_columns(key) for batch in wide), universe, part, level.name, nodes)
    return out


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
        for level in (lv.name for lv in config.levels if lv.name in rule.levels):
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
