"""What a release with a units universe (``[units]``) adds to its manifest and report: public values only."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.config.pl94_tables import GQ_TYPE, h1_schema_problem, h1_variables
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.directed_rounding import round_text
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io import manifest as mf
from censusdp.pipeline.io.summary_tables import summary_counts, variable_matrix
from censusdp.pipeline.release.run import UNITS_DIR, Release, stage_output


def units_section(run: Release) -> dict[str, Any]:
    """The units universe's own guarantee (conditional on the persons' invariants too), allocation, invariants,
    files, diagnostics and the blocks where the published universes disagree (empty unless both are P.L.'s)."""
    units = stage_output(run.units, "the units universe")
    config = units.config
    return {
        "privacy": run.privacy[config.universe],
        "allocation": mf.allocation_section(units.allocations, sensitivity1=config.budget.sensitivity1),
        "invariants": mf.invariants_section(config),
        "not_protected": mf.not_protected(config, other=run.config),
        "warnings": units.warnings,
        "measurements": units.measurement_entries(f"{UNITS_DIR}/measurements"),
        "tables": {lv.name: f"{UNITS_DIR}/tables/{lv.name}.parquet" for lv in config.levels},
        "reconciliation": units.diagnostics,
        "combined": mf.per_person_statement(run.config),
        "persons_per_unit": persons_per_unit_section(run.config),
        "per_person_rho": str(run.charged_rho),
        "disagreements": dict(units.disagreements),
    }


RULES_ORDER = ("the persons are reconciled first, every level, within the bounds the units' invariants imply; then "
               "the units, every level, within the bounds the published persons imply (summed from the blocks): "
               "post-processing of published values, no privacy cost")


def persons_per_unit_section(config: ReleaseConfig) -> dict[str, Any]:
    """The rules that tie the universes ([[units.persons_per_unit]]) and the order they are enforced in."""
    return {"order": RULES_ORDER if config.persons_per_unit else "none: the universes are reconciled independently",
            "rules": [{"name": r.name, "persons": {a: list(v) for a, v in r.persons},
                       "units": {a: list(v) for a, v in r.units}, "min_persons_per_unit": r.min_persons,
                       "max_persons_per_unit": r.max_persons, "levels": list(r.levels)}
                      for r in config.persons_per_unit]}


OCCUPIED_VARIABLE = "H1_002N"  # occupied housing units


def _by_type(schema: Schema, counts: sp.spmatrix) -> np.ndarray:
    """(nodes, GQ types) sums of a level's published (sparse) counts over everything but ``hhgq``."""
    return np.asarray((counts @ schema.query_matrix(schema.parse_query(GQ_TYPE)).T).toarray())


def check_same_blocks(run: Release) -> None:
    """Refuse a units universe whose tree is not the persons' (the two are paired block by block)."""
    if run.units is None:
        return
    tree = stage_output(run.persons.tree, "the geography")
    units_tree = stage_output(run.units.tree, "the units' geography")
    if any(not np.array_equal(a, b) for a, b in zip(tree.geoids, units_tree.geoids, strict=True)):
        raise CensusDPError("the units universe's blocks are not the persons' (its measurements were drawn on "
                            "another geography): nothing was published")


def disagreements_apply(schema: Schema, units_schema: Schema) -> bool:
    """Whether the universes' schemas are P.L.'s, so their blocks' disagreements are counted."""
    return GQ_TYPE in schema.names and h1_schema_problem(units_schema) is None


def disagreements(schema: Schema, units_schema: Schema, counts: sp.spmatrix, units_counts: sp.spmatrix
                  ) -> dict[str, int]:
    """How many of these blocks' published persons (``counts``) and units (``units_counts``) disagree: public counts
    of public tables; 0 under the presets' [[units.persons_per_unit]] rules (release.persons_units)."""
    people = _by_type(schema, counts)  # persons per GQ type (0: households)
    facilities = _by_type(units_schema, units_counts)  # units per type (0: housing units)
    occupied_units = [v for v in h1_variables() if v.name == OCCUPIED_VARIABLE]
    occupied = summary_counts(units_counts, variable_matrix(units_schema, occupied_units))[:, 0]
    households = people[:, 0]
    with_persons, with_units = households > 0, occupied > 0
    return {"blocks with household persons and no occupied housing unit": int(np.sum(with_persons & (occupied == 0))),
            "blocks with occupied housing units and no household persons": int(np.sum(with_units & (households == 0))),
            "blocks with more occupied housing units than household persons": int((occupied > households).sum()),
            "blocks with persons of a group-quarters type and no facility of that type":
                int(((people[:, 1:] > 0) & (facilities[:, 1:] == 0)).any(axis=1).sum())}


def units_markdown(section: dict[str, Any], charged_rho: str) -> str:
    """The report's section on the units universe: its rho, what the ledger charged, its queries' noise."""
    privacy = section["privacy"]
    lines = ["", "## Housing-unit universe", "",
             f"- Budget: rho = {privacy['rho_exact']} zCDP (epsilon = "
             f"{round_text(privacy['epsilon'], up=True, places=4)} at delta = {privacy['delta']:g}, CKS20), "
             f"charged to the ledger as the per-person bound rho_persons + 4 rho_units = {charged_rho}",
             f"- Combined: {section['combined']}",
             "- Tables: `units/tables/<level>.parquet`; H1 joins the P.L. 94-171 tables", "",
             "| level | query | rho | sigma² |", "|---|---|---|---|"]
    lines += [f"| {a['level']} | {a['query']} | {round_text(a['rho'], up=True, places=6)} | "
              f"{round_text(a['sigma2'], up=False, significant=6, strip=True)} |" for a in section["allocation"]]
    rules = section.get("persons_per_unit", {})
    lines += ["", f"Persons and units: {rules.get('order', '')}.", ""]
    def cells(selection: dict[str, list[str]]) -> str:
        return ", ".join(f"{a} {'/'.join(v)}" for a, v in selection.items())

    lines += [f"- {r['name']}: every unit of ({cells(r['units'])}) holds {r['min_persons_per_unit']} to "
              f"{r['max_persons_per_unit']} persons of ({cells(r['persons'])})" for r in rules.get("rules", [])]
    if section.get("disagreements"):
        lines += ["", "Blocks where persons and units disagree (0 under the rules above, docs/units.md):", ""]
        lines += [f"- {name}: {count}" for name, count in section["disagreements"].items()]
    lines += ["", "Not protected:", ""] + [f"- {n}" for n in section["not_protected"]] + [""]
    return "\n".join(lines)
