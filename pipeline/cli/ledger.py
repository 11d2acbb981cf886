"""``censusdp ledger``: every charge in the privacy-loss ledger and each dataset's cap, spent and remaining budget."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from censusdp.pipeline.budget.ledger.charges import Charge, PrivacyLedger
from censusdp.pipeline.cli.commands import Sub
from censusdp.pipeline.config.ledger_location import LEDGER_ENV, default_ledger_location, is_postgres_url
from censusdp.pipeline.directed_rounding import round_text
from censusdp.pipeline.dp.accounting import epsilon_cks20
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.exact import DEFAULT_DELTA, parse_delta


def add_ledger(sub: Sub) -> None:
    p = sub.add_parser("ledger", help="show the privacy-loss ledger: every charge and each dataset's budget left")
    p.add_argument("--ledger", help=f"ledger file or postgresql:// URL (default: ${LEDGER_ENV}, else the "
                                    "installation's ledger in the user data directory, as a release uses)")
    p.add_argument("--dataset", help="only this dataset id")
    p.add_argument("--delta", help="delta for every epsilon shown (default: each charge's own delta, and per "
                                   f"dataset the smallest delta charged, else {DEFAULT_DELTA})")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_ledger)


def cmd_ledger(args: argparse.Namespace) -> int:
    """Print the ledger (text table, or JSON with ``--json``); errors are one-line ``CensusDPError``s."""
    ledger = PrivacyLedger(resolve_location(args.ledger))
    delta = None if args.delta is None else parse_delta(args.delta, "--delta")
    report = ledger_report(ledger, args.dataset, delta)
    print(json.dumps(report, indent=2) if args.json else format_text(report))
    return 0


def resolve_location(given: str | None) -> str:
    """--ledger, else the installation's ledger ($CENSUSDP_LEDGER or the user data directory); a file must exist."""
    location = given or default_ledger_location()
    if not is_postgres_url(location) and not Path(location).expanduser().is_file():
        raise CensusDPError(f"ledger {location}: no such file (this command reads a ledger, it never creates one; "
                            f"pass --ledger PATH_OR_URL or set {LEDGER_ENV})")
    return location


def ledger_report(ledger: PrivacyLedger, dataset: str | None = None, delta: float | None = None) -> dict[str, Any]:
    """The ledger as plain data: per dataset, cap / spent / remaining (rho exact, epsilon at delta) and charges."""
    caps = ledger.datasets()
    if dataset is not None and dataset not in caps:
        known = ", ".join(sorted(caps)) or "none"
        raise CensusDPError(f"ledger {ledger.location}: unknown dataset {dataset!r} (datasets: {known})")
    out = []
    for name in [dataset] if dataset is not None else sorted(caps):
        charges = ledger.charges(name)
        spent = sum((c.rho for c in charges), Fraction(0))  # zCDP composition (Thm 19.37(i))
        at = delta if delta is not None else min((c.delta for c in charges), default=float(DEFAULT_DELTA))
        out.append({"dataset": name, "delta": at, "cap": _budget(caps[name], at), "spent": _budget(spent, at),
                    "remaining": _budget(caps[name] - spent, at), "charges": [_charge(c, delta) for c in charges]})
    return {"ledger": ledger.location, "composition": "zCDP (rho adds, Thm 19.37(i)); epsilon by CKS20 at delta",
            "datasets": out}


def format_text(report: dict[str, Any]) -> str:
    """A readable report: one budget table and one charge table per dataset."""
    lines = [f"censusdp ledger {report['ledger']}",
             "zCDP: rho adds over every charge, whatever its status; nothing is refunded (Thm 19.37(i)).",
             "epsilon: CKS20 conversion of the rho on its row at the delta shown (not a sum of epsilons;",
             "the epsilons of spent and remaining do not add up to the cap's: only rho adds)."]
    if not report["datasets"]:
        lines.append("\n(no datasets)")
    for d in report["datasets"]:
        lines += ["", f"dataset {d['dataset']}  (epsilon at delta {d['delta']:g})"]
        rows = [["", "rho", "epsilon"]] + [[k, _rho_text(d[k]["rho"]), _eps_text(d[k]["epsilon"])]
                                           for k in ("cap", "spent", "remaining")]
        lines += ["  " + line for line in _table(rows)]
        if not d["charges"]:
            lines.append("  (no charges)")
            continue
        rows = [["run id", "time (UTC)", "rho", "epsilon", "delta", "config", "status", "publishable"]]
        rows += [[c["run_id"], c["time"][:19].replace("T", " "), _rho_text(c["rho"]), _eps_text(c["epsilon"]),
                  f"{c['delta']:g}", c["config_hash"][:12],
                  c["status"] + (f" ({c['reason']})" if c["reason"] else ""), "yes" if c["publishable"] else "no"]
                 for c in d["charges"]]
        lines += [""] + ["  " + line for line in _table(rows)]
    return "\n".join(lines)


def _budget(rho: Fraction, delta: float) -> dict[str, Any]:
    return {"rho": f"{rho.numerator}/{rho.denominator}", "rho_float": float(rho),
            "epsilon": epsilon_cks20(rho, delta)}


def _charge(c: Charge, delta: float | None) -> dict[str, Any]:
    return {"run_id": c.run_id, "time": c.time, "rho": f"{c.rho.numerator}/{c.rho.denominator}",
            "rho_float": float(c.rho), "delta": c.delta if delta is None else delta,
            "epsilon": c.epsilon if delta is None else epsilon_cks20(c.rho, delta),
            "config_hash": c.config_hash, "status": c.status, "reason": c.reason, "publishable": c.publishable}


def _rho_text(exact: str) -> str:
    """A decimal, followed by the exact fraction when the decimal is not exact."""
    rho = Fraction(exact)
    shown = f"{float(rho):.6g}"
    return shown if Fraction(shown) == rho else f"{shown} ({rho})"


def _eps_text(epsilon: float) -> str:
    """epsilon to 6 significant digits, rounded up (a privacy loss is never understated)."""
    return round_text(epsilon, up=True, significant=6, strip=True)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
