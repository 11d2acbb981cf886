"""manifest.json and report.md: what a release spent, how, and what it does not protect (public values only)."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from typing import Any

from censusdp.pipeline.budget.accountants import epsilon_pld_of
from censusdp.pipeline.budget.allocation import QueryAllocation, level_rho
from censusdp.pipeline.config.model import ReleaseConfig, Universe
from censusdp.pipeline.directed_rounding import float_up, round_text
from censusdp.pipeline.dp.accounting import epsilon_bun_steinke, epsilon_cks20
from censusdp.pipeline.dp.noise import laplace_epsilon

COMPOSITION = ("zCDP: parallel across the nodes of a level (Prop. 19.30), sequential across queries and levels "
               "(Thm 19.37(i)); epsilon from rho by CKS20 Corollary 13")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def code_version() -> str:
    try:
        version = metadata.version("censusdp")
    except metadata.PackageNotFoundError:
        version = "unknown"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{version}+{commit}" if commit else version


def resolved_config(config: ReleaseConfig) -> dict[str, Any]:
    """The configuration as it was applied (exact fractions as strings), for the manifest."""
    budget = config.budget
    return {
        "source": config.source,
        "input": {"path": str(config.input.path), "format": config.input.format,
                  "geography": str(config.input.geography) if config.input.geography else None},
        "levels": [{"name": lv.name, "width": lv.width, **({"column": lv.column} if lv.column else {})}
                   for lv in config.levels],
        "attributes": [{"name": a.name, "column": a.column, "values": list(a.values), "mapping": a.mapping,
                        **({"bins": list(a.bins)} if a.bins else {})} for a in config.schema.attributes],
        "budget": {"rho": str(budget.rho), "delta": budget.delta_text, "neighbouring": budget.neighbouring,
                   "target_epsilon": budget.target_epsilon, "accountant": budget.accountant,
                   "level_shares": {k: str(v) for k, v in budget.level_shares.items()}},
        "strategy": {level: {e.query.name: str(e.share) for e in entries}
                     for level, entries in config.strategy.items()},
        "invariants": [{"query": i.query.name, "levels": list(i.levels)} for i in config.invariants],
        "structural_zeros": [{k: list(v) for k, v in z.items()} for z in config.structural_zeros],
        "postprocess": {"solver": config.solver, "runner": config.runner, "chunk_cells": config.chunk_cells},
    }


UNIVERSE_LABEL = {Universe.PERSONS: "persons", Universe.UNITS: "housing units"}


def per_person_statement(config: ReleaseConfig) -> str:
    """What ``privacy.per_person`` states for a release with a units universe (``config`` the persons'),
    conditioned on the invariants actually configured (``pipeline.dp.accounting.per_person_rho`` proves it)."""
    statement = ("per person, the whole release (the persons' and the housing units' measurements) is rho-zCDP with "
                 "rho = rho_persons + 4 rho_units: one person's change alters at most two housing-unit records (the "
                 "unit left and the unit joined), which moves every units query by at most twice the sensitivity "
                 "its noise was calibrated for, so the units' measurements cost at most 4 rho_units (a Gaussian "
                 "query's loss at most doubles, a Laplace query's quadruples), and the universes compose (Thm "
                 "19.37(i)); a release is charged this bound")
    invariants = published_invariants(config)
    if invariants:
        statement += (f". It holds for pairs of datasets that keep every invariant the release publishes "
                      f"({'; '.join(f'{universe}: {text}' for universe, text in invariants)}); a person whose change "
                      "would alter one is not protected")
    if config.units is not None and config.units.invariants:
        statement += (", and the housing units' exact counts are facts about persons: a group-quarters facility is "
                      "counted only when occupied, so the only resident of a facility, or a person moving into a "
                      "group-quarters type their block lacks, is outside the guarantee where those counts are "
                      "published")
    return statement


def universe_pair(config: ReleaseConfig, other: ReleaseConfig | None = None) -> list[ReleaseConfig]:
    """The release's universes, persons first: a persons' configuration brings its ``[units]``, a units' one is
    given its persons' (``other``)."""
    partner = other if other is not None else config.units
    universes = [config] if partner is None else [config, partner]
    return sorted(universes, key=lambda universe: list(Universe).index(universe.universe))


def published_invariants(config: ReleaseConfig, other: ReleaseConfig | None = None) -> list[tuple[str, str]]:
    """Every invariant the release publishes as (its universe, "total at us, state"): a neighbouring pair that
    changes any of them is told apart with certainty."""
    return [(UNIVERSE_LABEL[universe.universe], f"{i.query.name} at {', '.join(i.levels)}")
            for universe in universe_pair(config, other) for i in universe.invariants]


def guarantee(config: ReleaseConfig, rho: Fraction, other: ReleaseConfig | None = None) -> str:
    """One sentence: for which pairs of datasets (Def 19.1) the rho-zCDP bound of ``config``'s measurements
    holds: only among those that share every invariant the release publishes, the other universe's too (datasets
    whose invariant values differ are told apart with certainty)."""
    record = "person" if config.universe.record == "person" else "housing unit"  # the universe's unit of privacy
    if config.budget.neighbouring == "add-remove":
        pairs = f"datasets that differ by adding or removing one {record}'s record (add-remove)"
    else:
        pairs = f"datasets of the same size that differ in one {record}'s record (replace-one)"
    sentence = f"rho-zCDP (rho = {rho}) for every pair of {pairs}"
    invariants = published_invariants(config, other)
    if invariants:
        both = len(universe_pair(config, other)) > 1  # then each invariant is named with its universe
        listed = "; ".join(f"{universe}: {text}" if both else text for universe, text in invariants)
        which = "the values of every invariant the release publishes" if both else "the invariants' values"
        sentence += f" and share {which} ({listed}): the invariants are published exactly and are not protected"
    return sentence


def privacy_section(config: ReleaseConfig, rho: Fraction,
                    allocations: tuple[QueryAllocation, ...] | None = None, *, other: ReleaseConfig | None = None,
                    per_person: Fraction | None = None) -> dict[str, Any]:
    """The guarantee of a universe's measurements (the manifest's ``privacy``, docs/accounting.md).  ``other``: the
    other universe's configuration where ``config`` cannot name it (the units'); ``per_person``, with two
    universes, the release's per-person bound (the ledger's charge)."""
    budget = config.budget
    delta = budget.delta
    pld: dict[str, Any] = {}
    if allocations is not None:
        figure = epsilon_pld_of(allocations, delta, sensitivity2_squared=budget.sensitivity2_squared,
                                sensitivity1=budget.sensitivity1)
        pld = {"epsilon_pld": figure.epsilon, **({"epsilon_pld_note": figure.note} if figure.note else {})}
    section = {
        "unit": "person" if config.universe.record == "person" else "housing unit",
        "neighbouring": config.budget.neighbouring,
        "guarantee": guarantee(config, rho, other),
        "sensitivity_l2_squared": config.budget.sensitivity2_squared,
        "rho": float_up(rho),
        "rho_exact": str(rho),
        "delta": delta,
        "epsilon": epsilon_cks20(rho, delta),
        "epsilon_bun_steinke": epsilon_bun_steinke(rho, delta),
        **pld,
        "rho_set_by": str(config.budget.accountant) if config.budget.accountant is not None else "rho",
        "composition": COMPOSITION,
        "mechanism": "exact discrete Gaussian (Canonne, Kamath, Steinke 2020); exact discrete Laplace where the "
                     "strategy says so (pure epsilon-DP, accounted as epsilon²/2-zCDP)",
    }
    if per_person is not None:
        section["per_person"] = {"rho": float_up(per_person), "rho_exact": str(per_person),
                                 "epsilon": epsilon_cks20(per_person, delta),
                                 "statement": per_person_statement(config)}
    return section


def allocation_section(allocations: tuple[QueryAllocation, ...], *, sensitivity1: int) -> list[dict[str, Any]]:
    """Every query's budget and noise; a Laplace query's pure epsilon is Δ₁/scale (Thm 19.14 on Z), exactly, with
    ``sensitivity1`` the L1 sensitivity under the release's relation (2 under replace-one: 1/scale would
    understate its loss by half)."""
    return [{"level": a.level, "query": a.query, "mechanism": a.mechanism, "rho": float_up(a.rho),
             "rho_exact": str(a.rho), "sigma2": float(a.sigma2), "sigma2_exact": str(a.sigma2),
             **({"scale": str(a.scale), "epsilon_pure": str(laplace_epsilon(a.scale, sensitivity1))}
                if a.scale is not None else {}),
             "expected_abs_error": a.expected_abs_error} for a in allocations]


def invariants_section(config: ReleaseConfig) -> list[dict[str, Any]]:
    """Every invariant of a universe: published exactly, so never protected."""
    return [{"query": i.query.name, "levels": list(i.levels), "protected": False} for i in config.invariants]


def not_protected(config: ReleaseConfig, other: ReleaseConfig | None = None) -> list[str]:
    """What a universe's guarantee does not cover: every invariant the release publishes (the other universe's
    too), the set of units where no geography file lists them, and the structural zeros."""
    own = UNIVERSE_LABEL[config.universe]
    notes = [f"invariant {text}: published exactly" + ("" if universe == own else f" (the {universe}' universe)")
             for universe, text in published_invariants(config, other)]
    if config.input.geography is None:
        notes.append("the set of geographic units was taken from the microdata (no geography file): which units "
                     "are populated is NOT protected")
    if config.structural_zeros:
        notes.append("structural zeros are declared by definition and reveal nothing about the data")
    return notes


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def _up(value: Fraction | float, significant: int = 6) -> str:
    return round_text(value, up=True, significant=significant, strip=True)


def report_markdown(manifest: dict[str, Any], allocations: tuple[QueryAllocation, ...]) -> str:
    """A human summary of the manifest (public values only).  Privacy-loss figures (rho, epsilon, shares, expected
    errors) are rounded up and sigma² down: a rounded report never shows the release as more private than it is."""
    privacy = manifest["privacy"]
    lines = [
        f"# censusdp release {manifest['run_id']}",
        "",
        f"- Unit of privacy: {privacy['unit']}; neighbouring relation: {privacy['neighbouring']}",
        f"- Guarantee: {privacy['guarantee']}",
        f"- Total budget: rho = {privacy['rho_exact']} ({_up(Fraction(privacy['rho_exact']))}) zCDP",
        *([f"- Per person, with the housing units: rho = {privacy['per_person']['rho_exact']} "
           f"({_up(Fraction(privacy['per_person']['rho_exact']))}) zCDP, epsilon = "
           f"{round_text(privacy['per_person']['epsilon'], up=True, places=4)} at delta = {privacy['delta']:g} "
           "(CKS20): what the ledger charged"] if "per_person" in privacy else []),
        f"- Implied (epsilon, delta): epsilon = {round_text(privacy['epsilon'], up=True, places=4)} at "
        f"delta = {privacy['delta']:g} (CKS20); "
        f"Bun–Steinke bound {round_text(privacy['epsilon_bun_steinke'], up=True, places=4)}",
        f"- Random source: {manifest['random_source']['name']}"
        + ("" if manifest["random_source"]["publishable"] else " — **NOT PUBLISHABLE**"),
        f"- Code version: {manifest['code_version']}",
        "",
        "## Budget by level and query",
        "",
        "| level | query | rho | share of total | sigma² | expected abs. error per cell |",
        "|---|---|---|---|---|---|",
    ]
    total = sum((a.rho for a in allocations), Fraction(0))
    for a in allocations:
        share = round_text(a.rho / total * 100, up=True, places=2)
        lines.append(f"| {a.level} | {a.query} | {_up(a.rho)} | {share}% | "
                     f"{round_text(a.sigma2, up=False, significant=6, strip=True)} | {_up(a.expected_abs_error, 3)} |")
    lines += ["", "## Levels", "",
              "| level | rho | nodes | solver problems | max constraint violation before rounding | seconds |",
              "|---|---|---|---|---|---|"]
    for level in manifest["levels"]:
        diag = manifest.get("reconciliation", {}).get(level["name"], {})
        violation = max(float(diag.get("max_sum_violation") or 0), float(diag.get("max_invariant_violation") or 0))
        lines.append(f"| {level['name']} | {_up(level_rho(allocations, level['name']))} | "
                     f"{level.get('nodes', '')} | {diag.get('problems', '')} | {violation:.2g} | "
                     f"{float(diag.get('seconds_total') or 0):.2f} |")
    lines += expected_errors_markdown(manifest.get("expected_errors") or {})
    lines += ["", "## Not protected", ""] + [f"- {n}" for n in manifest["not_protected"]] + [""]
    return "\n".join(lines)


def expected_errors_markdown(errors: dict[str, Any]) -> list[str]:
    """The report's table of the main P.L. 94-171 counts' expected error per summary level (rounded up)."""
    if not errors:
        return []
    names = list(errors["variables"])
    published = ("This release used full-information reconciliation; in benchmarks, such releases' published P1-P5 "
                 "counts had a smaller mean absolute error than these GLS estimates at the county level and below "
                 "(BENCHMARKS.md, \"Areas of your own\")." if errors.get("reconciliation") == "full_information" else
                 "This release reconciled level by level: its published counts fit each level's own measurements and "
                 "can be less accurate than these estimates.")
    lines = ["", "## Expected error of the main P.L. 94-171 counts", "",
             "Standard error in persons of each count's GLS estimate (the linear unbiased fit of every measurement, "
             "`censusdp uncertainty`), root mean square over the level's areas; known from the design alone. The GLS "
             f"estimate is within 1.96 standard errors of the truth 95% of the time. {published} For areas of your "
             "own: `censusdp areas` (docs/areas.md).", "",
             "| level | " + " | ".join(f"{n} {errors['variables'][n]}" for n in names) + " |",
             "|---" * (len(names) + 1) + "|"]
    for level, row in errors["levels"].items():
        lines.append(f"| {level} | " + " | ".join(round_text(row[n], up=True, places=1) for n in names) + " |")
    return lines
