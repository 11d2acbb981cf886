"""``censusdp budget``: a configuration's allocation, or rho <-> (epsilon, delta) conversions. Touches no data."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

from censusdp.pipeline.budget.accountants import comparison_rows, epsilon_pld_of
from censusdp.pipeline.budget.allocation import allocate
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.directed_rounding import round_text
from censusdp.pipeline.dp.accounting import epsilon_bun_steinke, epsilon_cks20, per_person_rho, rho_for_epsilon_delta
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.exact import DEFAULT_DELTA, parse_delta, parse_rational


def _positive_fraction(text: str, name: str) -> Fraction:
    value = parse_rational(text, f"--{name}")
    if value <= 0:
        raise CensusDPError(f"--{name}: must be > 0, got {text}")
    return value


def conversion(rho: Fraction, delta: float) -> dict[str, Any]:
    return {"rho": float(rho), "rho_exact": str(rho), "delta": delta,
            "epsilon_cks20": epsilon_cks20(rho, delta), "epsilon_bun_steinke": epsilon_bun_steinke(rho, delta)}


def config_budget(path: str, delta_text: str | None) -> dict[str, Any]:
    config = load_config(path)
    delta = parse_delta(delta_text, "--delta") if delta_text else config.budget.delta
    allocations = allocate(config)
    pld = epsilon_pld_of(allocations, delta, sensitivity2_squared=config.budget.sensitivity2_squared,
                         sensitivity1=config.budget.sensitivity1)
    return {
        **conversion(config.budget.rho, delta),
        "epsilon_pld": pld.epsilon,
        **({"epsilon_pld_note": pld.note} if pld.note else {}),
        "accountant": config.budget.accountant,
        "target_epsilon": config.budget.target_epsilon,
        "neighbouring": config.budget.neighbouring,
        "allocation": [{"level": a.level, "query": a.query, "rho": float(a.rho), "rho_exact": str(a.rho),
                        "sigma2": float(a.sigma2), "sigma2_exact": str(a.sigma2),
                        "expected_abs_error": a.expected_abs_error} for a in allocations],
        "invariants": [{"query": i.query.name, "levels": list(i.levels), "protected": False}
                       for i in config.invariants],
        "comparison": comparison_rows(allocations, delta, pld_epsilon=pld.epsilon),
        **({"units": _units_budget(config.budget.rho, config.units, delta)} if config.units is not None else {}),
    }


def _units_budget(persons_rho: Fraction, units: Any, delta: float) -> dict[str, Any]:
    """The housing-unit universe's own allocation, and the per-person bound the ledger charges for both."""
    return {**conversion(units.budget.rho, delta),
            "per_person": conversion(per_person_rho(persons_rho, units.budget.rho), delta),
            "allocation": [{"level": a.level, "query": a.query, "rho": float(a.rho), "sigma2": float(a.sigma2)}
                           for a in allocate(units)],
            "invariants": [{"query": i.query.name, "levels": list(i.levels)} for i in units.invariants]}


def render_text(report: dict[str, Any]) -> str:
    lines = [f"rho = {report['rho_exact']} ({report['rho']:.6g}) zCDP, delta = {report['delta']:g}",
             f"epsilon_cks20 = {report['epsilon_cks20']:.6f}",
             f"epsilon_bun_steinke = {report['epsilon_bun_steinke']:.6f}"]
    if "epsilon_pld" in report:
        how = report.get("epsilon_pld_note") or "certified privacy curve of this allocation's noise"
        lines.append(f"epsilon_pld = {round_text(report['epsilon_pld'], up=True, places=6)}  ({how})")
    if report.get("accountant"):
        lines.append(f"rho set by the {report['accountant']} accountant for epsilon = {report['target_epsilon']:g}")
    if "allocation" in report:
        lines += ["", f"neighbouring relation: {report['neighbouring']}", "",
                  f"{'level':<14}{'query':<34}{'rho':>12}{'sigma2':>14}{'E|error|':>11}"]
        for a in report["allocation"]:
            lines.append(f"{a['level']:<14}{a['query']:<34}{a['rho']:>12.5g}{a['sigma2']:>14.5g}"
                         f"{a['expected_abs_error']:>11.3g}")
        for inv in report["invariants"]:
            lines.append(f"invariant (NOT protected): {inv['query']} at {', '.join(inv['levels'])}")
        lines += ["", "The same noise under the seed chapter's other accounting tools:", "",
                  f"{'method':<44}{'theorem':<28}{'epsilon':>12}{'delta':>11}"]
        for row in report["comparison"]:
            lines.append(f"{row['method']:<44}{row['theorem']:<28}{row['epsilon']:>12.4f}{row['delta']:>11.2g}")
    if "units" in report:
        units = report["units"]
        per_person = units["per_person"]
        lines += ["", f"housing-unit universe ([units]): rho = {units['rho_exact']} ({units['rho']:.6g}), "
                  f"epsilon_cks20 = {units['epsilon_cks20']:.6f}; a release charges its per-person bound "
                  f"rho_persons + 4 rho_units = {per_person['rho_exact']} (epsilon_cks20 = "
                  f"{round_text(per_person['epsilon_cks20'], up=True, places=6)})", "",
                  f"{'level':<14}{'query':<34}{'rho':>12}{'sigma2':>14}"]
        lines += [f"{a['level']:<14}{a['query']:<34}{a['rho']:>12.5g}{a['sigma2']:>14.5g}" for a in units["allocation"]]
        lines += [f"invariant (NOT protected): {inv['query']} at {', '.join(inv['levels'])}"
                  for inv in units["invariants"]]
    return "\n".join(lines)


def budget_command(config: str | None, rho: str | None, epsilon: str | None, delta: str | None,
                   as_json: bool) -> str:
    if config is not None:
        if rho or epsilon:
            raise CensusDPError("budget: give a CONFIG or --rho/--epsilon, not both")
        report = config_budget(config, delta)
    elif rho is not None and epsilon is not None:
        raise CensusDPError("budget: give --rho or --epsilon, not both")
    elif rho is not None:
        report = conversion(_positive_fraction(rho, "rho"), parse_delta(delta or DEFAULT_DELTA, "--delta"))
    elif epsilon is not None:
        eps = float(_positive_fraction(epsilon, "epsilon"))
        d = parse_delta(delta or DEFAULT_DELTA, "--delta")
        report = {"epsilon": eps, "delta": d, **conversion(rho_for_epsilon_delta(eps, d), d)}
    else:
        raise CensusDPError("budget: give a CONFIG, or --rho R --delta D, or --epsilon E --delta D")
    if as_json:
        return json.dumps(report, indent=2)
    text = render_text(report)
    if epsilon is not None and config is None:
        text = f"largest rho for epsilon = {report['epsilon']:g} at delta = {report['delta']:g}:\n" + text
    return text
