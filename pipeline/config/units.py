"""The housing-unit universe: the optional ``[units]`` table of a release configuration (keys: docs/units.md).

``units_raw`` builds the universe's whole configuration table (the persons' shared tables plus the ``[units]``
values, under the persons' key names), so that ``parse_config`` reads it by the same rules; ``units_keys`` turns
the keys its errors name back into the user's (``strategy.block`` -> ``units.strategy.block``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

from censusdp.pipeline.config.model import (
    LedgerConfig,
    Neighbouring,
    ReleaseConfig,
    check_nothing_else,
    geography_column,
)
from censusdp.pipeline.dp.accounting import per_person_rho
from censusdp.pipeline.errors import ConfigError

DEFAULT_FILE = "units.parquet"  # the units' file when [units] names none: beside the persons' microdata
INPUT_KEYS = ("path", "format", "geocode_column", "geocode_columns")  # [units] keys the universe's [input] takes
SCHEMA_KEYS = ("attributes", "recodes", "strategy", "invariants", "structural_zeros")
POSTPROCESS_KEYS = {"reconciliation", "rounding", "passes"}  # they name the universe's queries
SHARED_POSTPROCESS = ("solver", "runner", "measure_on", "chunk_cells")  # the machine's settings: the release's
UNITS_KEYS = {*INPUT_KEYS, *SCHEMA_KEYS, "rho", "level_shares", "postprocess", "persons_per_unit"}

# the universe's key as parse_config names it -> the user's key (longest first: input.geocode_columns before ...)
_TRANSLATED = (
    ("budget.rho", "units.rho"), ("budget.level_shares", "units.level_shares"),
    *((f"input.{key}", f"units.{key}") for key in sorted(INPUT_KEYS, key=len, reverse=True)),
    *((key, f"units.{key}") for key in SCHEMA_KEYS),
    *((f"postprocess.{key}", f"units.postprocess.{key}") for key in sorted(POSTPROCESS_KEYS)),
)


def units_raw(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The units universe's configuration table, from a persons' table that has a ``[units]`` table and has
    already been parsed (so its shared tables are valid); ``ConfigError`` naming a ``units.`` key otherwise."""
    units = raw["units"]
    if not isinstance(units, dict):
        raise ConfigError(source, "units", "expected a table ([units])")
    check_nothing_else(units, UNITS_KEYS, source, "units.")
    if "rho" not in units:
        raise ConfigError(source, "units.rho", "missing: the units' zCDP budget, an exact number such as \"0.075\" "
                          "(a release is charged the persons' rho plus 4 times this one: docs/units.md)")
    postprocess = units.get("postprocess", {})
    if not isinstance(postprocess, dict):
        raise ConfigError(source, "units.postprocess", "expected a table ([units.postprocess])")
    for key in postprocess:
        if key not in POSTPROCESS_KEYS:
            raise ConfigError(source, f"units.postprocess.{key}", f"unknown key (allowed: "
                              f"{', '.join(sorted(POSTPROCESS_KEYS))}; the solver, runner and chunk size are the "
                              "release's, in [postprocess])")
    budget = raw["budget"]
    if units.get("invariants") and budget.get("neighbouring") == Neighbouring.ADD_REMOVE:
        # load._check_relation would say so under the persons' key names; the user's are these
        raise ConfigError(source, "units.invariants", "published exactly, they cannot hold with budget.neighbouring "
                          "= \"add-remove\" (an exact count reveals every addition or removal); use \"replace-one\"")
    shared = copy.deepcopy({key: raw[key] for key in ("levels", "ledger") if key in raw})
    table: dict[str, Any] = {
        **shared,
        "input": {key: units[key] for key in INPUT_KEYS if key in units},
        # the summary tables are written from the persons' run; H1 joins them from the units' counts
        "output": {key: value for key, value in raw.get("output", {}).items() if key != "tables"},
        "budget": {"rho": units["rho"], "level_shares": units.get("level_shares", budget.get("level_shares")),
                   **{key: budget[key] for key in ("delta", "neighbouring") if key in budget}},
        "postprocess": {**{key: value for key, value in raw.get("postprocess", {}).items() if key in
                           SHARED_POSTPROCESS}, **postprocess},
        **{key: units[key] for key in SCHEMA_KEYS if key in units},
    }
    if "geography" not in raw.get("input", {}):  # each file alone would give a tree of its own populated blocks
        raise ConfigError(source, "input.geography", "a release with a [units] universe needs the geography file: "
                          "both universes are tabulated on its one tree of blocks (or release the persons only: "
                          "--no-units)")
    table["input"]["geography"] = raw["input"]["geography"]  # the same blocks: empty ones may hold vacant units
    table["input"]["geography_column"] = geography_column(raw["input"])  # the same file, read by the same column
    if "path" not in units and isinstance(raw["input"].get("path"), str):  # by default beside the persons' file
        table["input"]["path"] = str(Path(raw["input"]["path"]).parent / DEFAULT_FILE)
    return copy.deepcopy(table)


def translate_key(key: str) -> str | None:
    """The user's key for a key of the universe's table, or None for a key the universe shares with the release."""
    for ours, theirs in _TRANSLATED:
        if key == ours or key.startswith((f"{ours}.", f"{ours}[")):
            return theirs + key[len(ours):]
    return None


@contextmanager
def units_keys(source: str) -> Iterator[None]:
    """Errors raised while the universe's table is parsed name the user's keys (``units.strategy.block``); an error
    at a shared key (``postprocess.solver``, ``ledger.cap_rho``) keeps its key and says it is the units'."""
    try:
        yield
    except ConfigError as error:
        if error.source != source:
            raise
        key = translate_key(error.key)
        if key is None:
            raise ConfigError(source, error.key, f"in the [units] universe: {error.problem}") from None
        raise ConfigError(source, key, error.problem) from None


def check_units_budget(persons_rho: Fraction, units: ReleaseConfig, ledger: LedgerConfig, source: str) -> None:
    """Both universes are charged to the one dataset, as their per-person bound: a release whose bound passes the
    lifetime cap could never run, so it is refused when the configuration loads."""
    total = per_person_rho(persons_rho, units.budget.rho)
    if total > ledger.cap_rho:
        raise ConfigError(source, "units.rho", f"the per-person bound, the persons' rho plus 4 times the units' "
                          f"({total}), is more than the dataset's lifetime cap ledger.cap_rho ({ledger.cap_rho}): a "
                          "release charges it")
