"""Reading a release configuration key by key (the data classes live in ``pipeline.config.model``)."""

from __future__ import annotations

import copy
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from censusdp.geography.levels import Level, check_levels
from censusdp.pipeline.config.ledger_location import is_postgres_url, resolve_ledger_location
from censusdp.pipeline.config.model import (
    DEFAULT_CHUNK_CELLS,
    BudgetConfig,
    Format,
    InputConfig,
    Invariant,
    LedgerConfig,
    MeasureOn,
    OutputConfig,
    ReleaseConfig,
    Universe,
    check_nothing_else,
    check_runner,
    config_error_at,
    geography_column,
    parse_fraction,
    require,
    tables_of,
)
from censusdp.pipeline.config.persons_per_unit import parse_rules
from censusdp.pipeline.config.pl94_tables import summary_tables
from censusdp.pipeline.config.reconciliation import check_solver_setting, parse_reconciliation
from censusdp.pipeline.config.schema import DETAILED, TOTAL, Attribute, Recode, Schema
from censusdp.pipeline.config.strategy import parse_budget, parse_strategy, pld_target
from censusdp.pipeline.config.units import check_units_budget, units_keys, units_raw
from censusdp.pipeline.dp.accounting import cap_from_epsilon_delta
from censusdp.pipeline.errors import ConfigError

TOP_KEYS = {"input", "output", "postprocess", "budget", "levels", "attributes", "recodes", "strategy", "invariants",
            "structural_zeros", "ledger", "units"}


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ReleaseConfig:
    """Read and validate a release configuration; ``overrides`` replace (or, with None, remove) dotted keys."""
    path = Path(path)
    source = str(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (FileNotFoundError, IsADirectoryError):
        raise ConfigError(source, "(file)", "no such configuration file") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(source, "(syntax)", str(error)) from None
    apply_overrides(raw, overrides or {})
    return parse_config(raw, source, base=path.resolve().parent)


def parse_config(raw: dict[str, Any], source: str, base: Path, universe: Universe = Universe.PERSONS
                 ) -> ReleaseConfig:
    """A release configuration from its TOML table; with a ``[units]`` table, the units universe's too
    (``pipeline.config.units``: the same rules, on a table built from the persons' shared ones)."""
    check_nothing_else(raw, TOP_KEYS if universe is Universe.PERSONS else TOP_KEYS - {"units"}, source, "")
    levels = _levels(raw, source)
    schema = _schema(raw, source)
    budget = parse_budget(raw, source, levels)
    strategy = parse_strategy(raw, source, levels, schema)
    budget = pld_target(budget, strategy, levels, source)
    invariants = _invariants(raw, source, levels, schema)
    zeros = _structural_zeros(raw, source, schema)
    postprocess = raw.get("postprocess", {})
    check_nothing_else(postprocess, {"solver", "runner", "measure_on", "chunk_cells", "reconciliation", "rounding",
                                     "passes"}, source, "postprocess.")
    solver = postprocess.get("solver", "auto")
    if not isinstance(solver, str):
        raise ConfigError(source, "postprocess.solver", "expected a string")
    check_solver_setting(solver, source, levels, strategy, invariants)
    with config_error_at(source, "postprocess.runner"):
        runner = check_runner(str(postprocess.get("runner", "auto")))
    measure_on = postprocess.get("measure_on", MeasureOn.AUTO.value)
    if measure_on not in {m.value for m in MeasureOn}:
        raise ConfigError(source, "postprocess.measure_on", f"expected one of {', '.join(m.value for m in MeasureOn)}")
    chunk_cells = postprocess.get("chunk_cells", DEFAULT_CHUNK_CELLS)
    if not isinstance(chunk_cells, int) or isinstance(chunk_cells, bool) or chunk_cells < 1:
        raise ConfigError(source, "postprocess.chunk_cells", "expected a positive integer")
    _check_relation(budget, invariants, source)
    measured = {name: {e.query.name for e in entries} for name, entries in strategy.items()}
    reconciliation = parse_reconciliation(postprocess, source, levels, schema, measured)
    input_config = _input(raw, source, base, universe)
    ledger = _ledger(raw, source, base, budget.delta)
    output = _output(raw, source, base, schema)
    units, persons_per_unit = None, ()
    if "units" in raw:  # last: the universe reuses the persons' tables, valid by now
        table = units_raw(raw, source)
        with units_keys(source):
            units = parse_config(table, source, base, Universe.UNITS)
        check_units_budget(budget.rho, units, ledger, source)
        # the units are measured and reconciled in the persons' chunks (release.persons_units): as many nodes
        units = replace(units, chunk_cells=max(1, chunk_cells // schema.n_cells) * units.schema.n_cells)
        persons_per_unit = parse_rules(raw["units"], source, schema, units.schema, levels)
    return ReleaseConfig(
        source=source, input=input_config, ledger=ledger, output=output, levels=levels,
        schema=schema, budget=budget, strategy=strategy, invariants=invariants, structural_zeros=zeros,
        solver=solver, runner=runner, measure_on=MeasureOn(measure_on), chunk_cells=chunk_cells,
        reconciliation=reconciliation, raw=raw,
        universe=universe, units=units, persons_per_unit=persons_per_unit,
    )


def parse_recorded_config(raw: dict[str, Any], source: str, base: Path, ledger_location: str | None = None
                          ) -> ReleaseConfig:
    """A configuration as a run recorded it (manifest.json, measurements/complete.json), without its redacted
    ``ledger.path`` (a run's files must not choose a ledger): the ledger is ``ledger_location``, else the default."""
    raw = copy.deepcopy(raw)
    if isinstance(raw.get("ledger"), dict):
        raw["ledger"].pop("path", None)
    config = parse_config(raw, source, base)
    if ledger_location is not None:
        config = replace(config, ledger=replace(config.ledger, location=ledger_location))
    return config


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Set each dotted key (``"postprocess.solver"``) of the raw table in place; None removes the key.  The one
    way a configuration is overridden: the CLI's options, a re-run's solver and runner, ``evaluate``'s."""
    for dotted, value in overrides.items():
        *parents, last = dotted.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value


def _path(value: Any, base: Path, source: str, key: str) -> Path:
    if not isinstance(value, str | Path) or not str(value):
        raise ConfigError(source, key, "expected a file path")
    path = Path(value)
    return path if path.is_absolute() else base / path


def _input(raw: dict[str, Any], source: str, base: Path, universe: Universe) -> InputConfig:
    table = require(raw, "input", dict, source, "")
    check_nothing_else(table, {"path", "format", "geocode_column", "geocode_columns", "geography",
                               "geography_column"}, source, "input.")
    fmt = table.get("format", "parquet")
    if fmt in list(Format) and fmt not in universe.formats:
        raise ConfigError(source, "input.format", f"{fmt} is not a layout of {universe.record} records (one of: "
                          f"{', '.join(universe.formats)})")
    if fmt not in universe.formats:
        raise ConfigError(source, "input.format", f"unknown format {fmt!r} (one of: {', '.join(universe.formats)})")
    columns = table.get("geocode_columns", [])
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ConfigError(source, "input.geocode_columns", "expected a list of column names")
    return InputConfig(
        path=_path(table["path"], base, source, "input.path") if "path" in table else None,
        format=Format(fmt),
        geocode_column=str(table.get("geocode_column", "geocode")),
        geocode_columns=tuple(columns),
        geography=_path(table["geography"], base, source, "input.geography") if "geography" in table else None,
        geography_column=geography_column(table),
    )


def _output(raw: dict[str, Any], source: str, base: Path, schema: Schema) -> OutputConfig:
    table = raw.get("output", {})
    check_nothing_else(table, {"dir", "protected_microdata", "geocode_parts", "estimates", "tables"}, source,
                       "output.")
    parts = table.get("geocode_parts", [])
    ok = isinstance(parts, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], int) and p[1] > 0
        for p in parts)
    if not ok:
        raise ConfigError(source, "output.geocode_parts", "expected a list of [column, width] pairs")
    flags = {key: table.get(key, False) for key in ("protected_microdata", "estimates")}
    for key, flag in flags.items():
        if not isinstance(flag, bool):
            raise ConfigError(source, f"output.{key}", "expected true or false")
    return OutputConfig(dir=_path(table.get("dir", "runs"), base, source, "output.dir"), **flags,
                        geocode_parts=tuple((str(c), int(w)) for c, w in parts),
                        tables=summary_tables(table.get("tables", []), schema, source))


def _levels(raw: dict[str, Any], source: str) -> tuple[Level, ...]:
    """``[[levels]]``: a prefix level's ``width`` is its unit-code prefix; a column level's (``column``) is the length
    of its codes, and its nodes are spine-code prefixes (``geography.spine``)."""
    levels: list[Level] = []
    unit_width = 0
    for key, entry in tables_of(require(raw, "levels", list, source, ""), "levels", source,
                                {"name", "width", "column"}, "expected a table with name and width (and column)"):
        name = require(entry, "name", str, source, f"{key}.")
        width = require(entry, "width", int, source, f"{key}.")
        column = entry.get("column")
        if width < 0:
            raise ConfigError(source, f"{key}.width", "must be >= 0")
        spine = levels[-1].width if levels else 0
        if column is not None:
            if not isinstance(column, str) or not column:
                raise ConfigError(source, f"{key}.column", "expected the geography file's column of the codes")
            if not levels:
                raise ConfigError(source, f"{key}.column", "the root level is the whole area: it has no column")
            if width < 1:
                raise ConfigError(source, f"{key}.width", "a column level's codes are at least one character")
            levels.append(Level(name, spine + width, column, unit_width))
            continue
        if levels and width <= unit_width:
            raise ConfigError(source, f"{key}.width", f"{width} does not nest inside the unit-code prefix of the "
                              f"level above ({unit_width}): widths must increase from the root down")
        plain = not any(level.column for level in levels)
        levels.append(Level(name, width) if plain else Level(name, spine + width - unit_width, None, width))
        unit_width = width
    with config_error_at(source, "levels"):
        check_levels(tuple(levels))
    return tuple(levels)


def _binned(entry: dict[str, Any], name: str, source: str, prefix: str) -> Attribute:
    """An attribute of integer ranges: ``bins`` the lower edges, ascending; the last bin is top-coded (its edge and
    above).  ``values``, if given, label the bins; by default "0-4", "5-9", ..., "85+"."""
    edges = entry["bins"]
    if (not isinstance(edges, list) or not edges or not all(isinstance(e, int) and not isinstance(e, bool)
                                                             and abs(e) < 2**62 for e in edges)
            or any(b <= a for a, b in zip(edges, edges[1:], strict=False))):
        raise ConfigError(source, f"{prefix}bins", "expected a non-empty list of increasing integers (the bins' "
                          "lower edges; the last bin takes its edge and every larger value)")
    if "mapping" in entry:
        raise ConfigError(source, f"{prefix}mapping", "an attribute of bins maps values by their range, not a table")
    default = [f"{a}-{b - 1}" if b - 1 > a else str(a) for a, b in zip(edges, edges[1:], strict=False)]
    labels = tuple(str(v) for v in entry.get("values", [*default, f"{edges[-1]}+"]))
    if len(labels) != len(edges) or len(set(labels)) != len(labels):
        raise ConfigError(source, f"{prefix}values", f"expected {len(edges)} distinct labels, one per bin")
    return Attribute(name=name, column=require(entry, "column", str, source, prefix), values=labels,
                     bins=tuple(edges))


def _schema(raw: dict[str, Any], source: str) -> Schema:
    entries = require(raw, "attributes", list, source, "")
    if not entries:
        raise ConfigError(source, "attributes", "at least one attribute is required")
    attributes = []
    for key, entry in tables_of(entries, "attributes", source, {"name", "column", "values", "mapping", "bins"}):
        prefix = f"{key}."
        name = require(entry, "name", str, source, prefix)
        if name in (TOTAL, DETAILED) or "*" in name or not name.strip():
            raise ConfigError(source, f"{prefix}name", f"{name!r} is reserved or not a valid attribute name")
        if "bins" in entry:
            attributes.append(_binned(entry, name, source, prefix))
            continue
        values = require(entry, "values", list, source, prefix)
        labels = tuple(str(v) for v in values)
        if not labels or len(set(labels)) != len(labels):
            raise ConfigError(source, f"{prefix}values", "expected a non-empty list of distinct values")
        mapping = entry.get("mapping", {})
        if not isinstance(mapping, dict):
            raise ConfigError(source, f"{prefix}mapping", "expected a table of source value = domain value")
        for key, label in mapping.items():
            if str(label) not in labels:
                raise ConfigError(source, f"{prefix}mapping.{key}", f"maps to {label!r}, not a value of {name}")
        attributes.append(Attribute(name=name, column=require(entry, "column", str, source, prefix),
                                    values=labels, mapping={str(k): str(v) for k, v in mapping.items()}))
    names = [a.name for a in attributes]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(source, "attributes", f"duplicate attribute name {name!r}")
    return _with_recodes(raw, source, tuple(attributes))


def _with_recodes(raw: dict[str, Any], source: str, attributes: tuple[Attribute, ...]) -> Schema:
    """The schema of ``attributes`` and the ``[[recodes]]``: attributes defined as a partition of another's values,
    so the least-squares and rounding stages treat a recode's marginal as any query's."""
    schema = Schema(attributes)
    exactly = "expected a table with exactly name, of and groups"
    for key, entry in tables_of(raw.get("recodes", []), "recodes", source, problem=exactly):
        if set(entry) != {"name", "of", "groups"}:
            raise ConfigError(source, key, exactly)
        name, of, groups = entry["name"], entry["of"], entry["groups"]
        if not isinstance(name, str) or not name.strip() or "*" in name or name in (TOTAL, DETAILED):
            raise ConfigError(source, f"{key}.name", f"{name!r} is reserved or not a valid name")
        if not isinstance(of, str) or not isinstance(groups, dict) or not all(
                isinstance(members, list) for members in groups.values()):
            raise ConfigError(source, key, "of must name an attribute and groups be a table of label = [values]")
        recode = Recode(name, of, tuple(str(label) for label in groups),
                        tuple(tuple(str(v) for v in members) for members in groups.values()))
        with config_error_at(source, key):
            schema = Schema(attributes, (*schema.recodes, recode))
    return schema


def _invariants(raw: dict[str, Any], source: str, levels: tuple[Level, ...], schema: Schema
                ) -> tuple[Invariant, ...]:
    names = [lv.name for lv in levels]
    out = []
    for key, entry in tables_of(raw.get("invariants", []), "invariants", source, {"query", "levels"}):
        prefix = f"{key}."
        with config_error_at(source, f"{prefix}query"):
            query = schema.parse_query(require(entry, "query", str, source, prefix))
        at = require(entry, "levels", list, source, prefix)
        for name in at:
            if name not in names:
                raise ConfigError(source, f"{prefix}levels", f"{name!r} is not a level")
        # an invariant below a level where the same query is free could be infeasible after rounding the
        # parent, so invariants must hold at a contiguous run of levels from the root down
        depth = max(names.index(n) for n in at) if at else -1
        if sorted(names.index(n) for n in at) != list(range(depth + 1)):
            raise ConfigError(source, f"{prefix}levels", "an invariant must hold at every level above it too "
                              f"(expected {names[: depth + 1]})")
        out.append(Invariant(query, tuple(at)))
    return tuple(out)


def _structural_zeros(raw: dict[str, Any], source: str, schema: Schema) -> tuple[dict[str, tuple[str, ...]], ...]:
    out = []
    for i, entry in enumerate(raw.get("structural_zeros", [])):
        key = f"structural_zeros[{i}]"
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(source, key, "expected a table of attribute = [values]")
        cells = {}
        for name, values in entry.items():
            if name not in schema.names:
                raise ConfigError(source, f"{key}.{name}", "unknown attribute")
            if not isinstance(values, list) or not values:
                raise ConfigError(source, f"{key}.{name}", "expected a non-empty list of values")
            for value in values:
                if str(value) not in schema.attribute(name).values:
                    raise ConfigError(source, f"{key}.{name}", f"{value!r} is not a value of {name}")
            cells[name] = tuple(str(v) for v in values)
        out.append(cells)
    return tuple(out)


def _check_relation(budget: BudgetConfig, invariants: tuple[Invariant, ...], source: str) -> None:
    """Exact invariants and add-remove neighbours cannot both hold: an exact count reveals every addition or
    removal, so only replace-one neighbours that keep the invariants stay protected (the Census's choice)."""
    if budget.neighbouring == "add-remove" and invariants:
        first = invariants[0]
        raise ConfigError(source, "budget.neighbouring", f"add-remove cannot hold with invariants[0] "
                          f"({first.query.name} at {', '.join(first.levels)}) published exactly: an exact count "
                          "reveals every addition or removal; use neighbouring = \"replace-one\" (as the Census did) "
                          "or remove the [[invariants]]")


def _ledger(raw: dict[str, Any], source: str, base: Path, delta: float) -> LedgerConfig:
    """The [ledger] table: dataset id, lifetime cap (rho, or epsilon at the budget's delta) and where
    (``pipeline.config.ledger_location.resolve_ledger_location``)."""
    table = raw.get("ledger")
    if not isinstance(table, dict):
        raise ConfigError(source, "ledger", "missing: every release is charged to a privacy ledger; add a [ledger] "
                          "table with dataset = \"...\" and cap_rho = \"...\" (the dataset's lifetime budget)")
    check_nothing_else(table, {"path", "dataset", "cap_rho", "cap_epsilon"}, source, "ledger.")
    dataset = require(table, "dataset", str, source, "ledger.")
    if ("cap_rho" in table) == ("cap_epsilon" in table):
        raise ConfigError(source, "ledger.cap_rho", "give exactly one of ledger.cap_rho or ledger.cap_epsilon")
    if "cap_rho" in table:
        cap = parse_fraction(table["cap_rho"], source, "ledger.cap_rho")
    else:
        cap = cap_from_epsilon_delta(float(parse_fraction(table["cap_epsilon"], source, "ledger.cap_epsilon")), delta)
    if cap <= 0:
        raise ConfigError(source, "ledger.cap_rho", "the lifetime cap must be > 0")
    configured = table.get("path")
    if configured is not None and not is_postgres_url(configured):
        configured = str(_path(configured, base, source, "ledger.path"))
    with config_error_at(source, "ledger.path"):
        where = resolve_ledger_location(configured)
    return LedgerConfig(location=where, dataset=dataset, cap_rho=cap)
