"""The rules ``censusdp verify`` checks (docs/verify.md, "The rules"), each on one range of codes of one level:
a level table's rows as read (``level_rows``), its parent level's, the invariants and P.L. tables' rows in the same
range.  Every check is a count of the checked items that break a rule; no published count leaves this module.  A
missing row of a level table is a 0; a node's children are the codes it prefixes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import ReleaseConfig, SummaryTables
from censusdp.pipeline.config.persons_per_unit import selection_mask
from censusdp.pipeline.config.schema import Query, Schema
from censusdp.pipeline.io.summary_tables import TableColumns, table_columns
from censusdp.pipeline.io.verify_ranges import Bound, IndexedTable

CELL, COUNT, GEOID = "_cell", "count", "geoid"
Selection = tuple[tuple[str, tuple[str, ...]], ...]  # (attribute, values): the cells where each is among them


@dataclass(frozen=True)
class RuleCheck:
    """One rule at one level: how many items (cells, nodes, values) were checked and how many break it."""

    rule: str
    level: str | None
    checked: int
    violations: int


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


def level_rows(frame: pl.DataFrame, schema: Schema, level: Level, universe: str
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


def pl94_parts(universes: Sequence[Universe]) -> list[Part]:
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
