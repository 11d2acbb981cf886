"""What a release with a units universe (``[units]``) adds to its manifest and report: public values only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.exact import round_text
from pipeline.io import manifest as mf
from pipeline.release.run import UNITS_DIR, ReleaseRun


def units_section(units: ReleaseRun) -> dict[str, Any]:
    """The units universe's own guarantee, allocation, invariants (not protected), files and diagnostics."""
    config = units.config
    levels = [lv.name for lv in config.levels]
    measured = Path(units.measurements_dir) if units.measurements_dir else None
    return {
        "privacy": mf.privacy_section(config, units.spent_rho, units.allocations),
        "allocation": mf.allocation_section(units.allocations, sensitivity1=config.budget.sensitivity1),
        "invariants": [{"query": i.query.name, "levels": list(i.levels), "protected": False}
                       for i in config.invariants],
        "not_protected": mf.not_protected(config),
        "warnings": units.warnings,
        "measurements": {name: str(measured / f"{name}.parquet") if measured else
                         f"{UNITS_DIR}/measurements/{name}.parquet" for name in levels},
        "tables": {name: f"{UNITS_DIR}/tables/{name}.parquet" for name in levels},
        "reconciliation": units.diagnostics,
    }


def units_markdown(section: dict[str, Any], charged_rho: str) -> str:
    """The report's section on the units universe: its rho, what the ledger charged, its queries' noise."""
    privacy = section["privacy"]
    lines = ["", "## Housing-unit universe", "",
             f"- Budget: rho = {privacy['rho_exact']} zCDP (epsilon = "
             f"{round_text(privacy['epsilon'], up=True, places=4)} at delta = {privacy['delta']:g}, CKS20), "
             f"charged to the ledger with the persons' rho: {charged_rho} in all",
             "- Tables: `units/tables/<level>.parquet`; H1 joins the P.L. 94-171 tables", "",
             "| level | query | rho | sigma² |", "|---|---|---|---|"]
    lines += [f"| {a['level']} | {a['query']} | {round_text(a['rho'], up=True, places=6)} | "
              f"{round_text(a['sigma2'], up=False, significant=6, strip=True)} |" for a in section["allocation"]]
    lines += ["", "Not protected:", ""] + [f"- {n}" for n in section["not_protected"]] + [""]
    return "\n".join(lines)
