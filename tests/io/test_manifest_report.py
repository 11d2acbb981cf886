"""manifest.json and report.md: exact Laplace epsilon, safe-direction rounding, and the stated guarantee."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from censusdp.pipeline.budget.allocation import QueryAllocation, allocate, query_allocation
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.directed_rounding import float_up, round_text
from censusdp.pipeline.io.manifest import allocation_section, privacy_section, report_markdown
from tests.helpers.configs import edit_config
from tests.helpers.tiny import TINY_TOML


def tiny_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relation: str, *, invariants: bool = True,
                laplace: bool = False) -> ReleaseConfig:
    """TINY_TOML under ``relation`` (whatever relation the template has), optionally a Laplace unit level."""
    monkeypatch.delenv("CENSUSDP_LEDGER", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # the default ledger lives here: never the user's
    path = tmp_path / f"{relation}.toml"
    path.write_text(TINY_TOML.format(rho="4"))
    overrides: dict[str, object] = {"budget.neighbouring": relation}
    if not invariants:
        overrides["invariants"] = None
    if laplace:
        overrides["strategy.unit.mechanism"] = "laplace"
    return load_config(edit_config(path, overrides))


# --- 1. a Laplace query's pure epsilon is Δ₁/scale -------------------------------------------------------------


@pytest.mark.parametrize(("relation", "invariants", "sensitivity1"),
                         [("replace-one", True, 2), ("add-remove", False, 1)])
def test_laplace_epsilon_pure_uses_the_l1_sensitivity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      relation: str, invariants: bool, sensitivity1: int) -> None:
    config = tiny_config(tmp_path, monkeypatch, relation, invariants=invariants, laplace=True)
    assert config.budget.sensitivity1 == sensitivity1
    allocations = allocate(config)
    section = allocation_section(allocations, sensitivity1=config.budget.sensitivity1)
    laplace = [e for e in section if e["mechanism"] == "laplace"]
    assert [(e["level"], e["query"]) for e in laplace] == [("unit", "detailed")]
    entry = laplace[0]
    epsilon = Fraction(entry["epsilon_pure"])  # exact: a fraction written as a string
    assert epsilon == Fraction(sensitivity1) / Fraction(entry["scale"])
    assert Fraction(entry["rho_exact"]) == epsilon**2 / 2  # the manifest's rho is the one its epsilon implies
    assert all("epsilon_pure" not in e for e in section if e["mechanism"] == "gaussian")


# --- 2. report.md rounds losses up and noise down ------------------------------------------------------------


def report_for(allocations: tuple[QueryAllocation, ...], epsilon: float, bun_steinke: float) -> str:
    total = sum((a.rho for a in allocations), Fraction(0))
    manifest = {
        "run_id": "test-run",
        "privacy": {"unit": "person", "neighbouring": "replace-one", "guarantee": "(a sentence)",
                    "rho": float_up(total), "rho_exact": str(total), "delta": 1e-10, "epsilon": epsilon,
                    "epsilon_bun_steinke": bun_steinke},
        "random_source": {"name": "seeded", "publishable": False},
        "code_version": "test",
        "levels": [{"name": "root", "width": 0, "nodes": 1}, {"name": "leaf", "width": 1, "nodes": 2}],
        "not_protected": [],
    }
    return report_markdown(manifest, allocations)


def table_rows(report: str, header: str) -> list[list[str]]:
    lines = report.splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_report_rounds_privacy_loss_up_and_sigma2_down() -> None:
    allocations = (
        query_allocation("root", "total", Fraction(3, 4), "gaussian", 2, 1),  # sigma² = 2/3: 0.666667 to nearest
        query_allocation("root", "detailed", Fraction(1, 9), "gaussian", 2, 1),  # rho 0.111111 to nearest
        query_allocation("leaf", "detailed", Fraction(1, 3), "laplace", 2, 2),
    )
    assert allocations[0].sigma2 == Fraction(2, 3)
    report = report_for(allocations, epsilon=1.23454, bun_steinke=2.00001)
    total = sum((a.rho for a in allocations), Fraction(0))
    # total rho, epsilon and the Bun–Steinke bound: up, although the next digit is below 5
    assert f"rho = {total} ({round_text(total, up=True, significant=6, strip=True)}) zCDP" in report
    assert Fraction(round_text(total, up=True, significant=6)) > total
    assert "epsilon = 1.2346 at delta = 1e-10" in report
    assert "Bun–Steinke bound 2.0001" in report
    rows = table_rows(report, "| level | query | rho | share of total | sigma² | expected abs. error per cell |")
    assert len(rows) == len(allocations)
    for row, a in zip(rows, allocations, strict=True):
        assert row[:2] == [a.level, a.query]
        rho, share, sigma2, error = (Fraction(row[2]), Fraction(row[3].rstrip("%")) / 100, Fraction(row[4]),
                                     Fraction(row[5]))
        assert a.rho <= rho < a.rho * (1 + Fraction(1, 10**5))
        assert a.rho / total <= share < a.rho / total + Fraction(1, 10**4)
        assert a.sigma2 * (1 - Fraction(1, 10**5)) < sigma2 <= a.sigma2
        assert Fraction(a.expected_abs_error) <= error
    # each of these is below the value to nearest: 62.79%, 0.666667, 0.651, 0.111111, 1.19444, 0.861111
    assert rows[0] == ["root", "total", "0.75", "62.80%", "0.666666", "0.652"]
    assert rows[1][2] == "0.111112"
    assert "(1.19445) zCDP" in report
    levels = table_rows(report, "| level | rho | nodes | solver problems | max constraint violation before rounding "
                                "| seconds |")
    for row, name in zip(levels, ("root", "leaf"), strict=True):
        exact = sum((a.rho for a in allocations if a.level == name), Fraction(0))
        assert row[0] == name and exact <= Fraction(row[1]) < exact * (1 + Fraction(1, 10**5))
    assert levels[0][1] == "0.861112"  # 31/36


def test_ledger_epsilon_text_is_the_shared_round_up() -> None:
    from censusdp.pipeline.cli.ledger import _eps_text

    for value in (0.0, 1e-12, 0.1, 1.2345649, 2.00000001, 123456.5, 3.7e9):
        assert _eps_text(value) == round_text(value, up=True, significant=6, strip=True)
    assert _eps_text(1.2345649) == "1.23457"


# --- 4. the guarantee names the relation and the invariants ----------------------------------------------------


def test_guarantee_replace_one_with_invariants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(tmp_path, monkeypatch, "replace-one")
    privacy = privacy_section(config, Fraction(4))
    assert privacy["guarantee"] == (
        "rho-zCDP (rho = 4) for every pair of datasets of the same size that differ in one person's record "
        "(replace-one) and share the invariants' values (total at root, region): the invariants are published "
        "exactly and are not protected")
    assert f"\n- Guarantee: {privacy['guarantee']}\n" in report_for_privacy(config, privacy)


def test_guarantee_add_remove_without_invariants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(tmp_path, monkeypatch, "add-remove", invariants=False)
    privacy = privacy_section(config, Fraction(4))
    assert privacy["guarantee"] == ("rho-zCDP (rho = 4) for every pair of datasets that differ by adding or removing "
                                    "one person's record (add-remove)")
    assert f"\n- Guarantee: {privacy['guarantee']}\n" in report_for_privacy(config, privacy)


def report_for_privacy(config: ReleaseConfig, privacy: dict[str, Any]) -> str:
    """report.md for a manifest whose privacy section is ``privacy_section``'s own output."""
    manifest = {"run_id": "test-run", "privacy": privacy, "random_source": {"name": "seeded", "publishable": False},
                "code_version": "test", "levels": [{"name": lv.name, "width": lv.width} for lv in config.levels],
                "not_protected": []}
    return report_markdown(manifest, allocate(config))
