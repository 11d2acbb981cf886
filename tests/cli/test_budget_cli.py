from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_rho_to_epsilon_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "budget", "--rho", "0.5", "--delta", "1e-10", "--json")
    report = json.loads(out)
    assert code == 0
    assert report["epsilon_cks20"] == pytest.approx(6.839329413120849, rel=1e-9)
    assert report["epsilon_bun_steinke"] == pytest.approx(7.286140424415112, rel=1e-9)


def test_epsilon_to_rho(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "budget", "--epsilon", "6.839329413120849", "--delta", "1e-10", "--json")
    assert code == 0
    assert json.loads(out)["rho"] == pytest.approx(0.5, rel=1e-6)
    assert json.loads(out)["rho"] <= 0.5


@pytest.mark.parametrize(("argv", "needle"), [
    (["--rho", "0"], "--rho"), (["--rho", "-1"], "--rho"), (["--rho", "1", "--delta", "1"], "--delta"),
    (["--rho", "1", "--delta", "0"], "--delta"), (["--rho", "x"], "--rho"),
])
def test_invalid_values_are_one_line_errors(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code, _, err = run(capsys, "budget", *argv)
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1


def test_config_table_touches_no_data(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tiny_release.parent / "microdata.parquet").unlink()  # budget must not need the data
    code, out, _ = run(capsys, "budget", str(tiny_release))
    assert code == 0 and "epsilon_cks20" in out and "detailed" in out and "NOT protected" in out


def test_config_comparison_orders_the_seed_tools(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "budget", str(tiny_release), "--json")
    rows = {row["theorem"].split(",")[0].split(" (")[0]: row["epsilon"] for row in json.loads(out)["comparison"]}
    assert code == 0
    # zCDP with the CKS20 conversion is never worse than the Renyi/Bun-Steinke bound or basic composition
    assert rows["Thm 19.37"] <= rows["Thm 19.37(i)-(ii)"] <= rows["Thm 19.26"]
    assert rows["Thm 19.31"] > rows["Thm 19.37"]  # a household is protected less than a person


# --- budget show / budget optimize: real subcommands, show the default ---------------------------------------


@pytest.mark.parametrize(("argv", "expected"), [
    (["budget", "c.toml"], ["budget", "show", "c.toml"]),
    (["-q", "budget", "--rho", "1"], ["-q", "budget", "show", "--rho", "1"]),
    (["budget"], ["budget", "show"]),
    (["budget", "show", "c.toml"], ["budget", "show", "c.toml"]),
    (["budget", "optimize", "c.toml", "--weights", "*:*=1"], ["budget", "optimize", "c.toml", "--weights", "*:*=1"]),
    (["budget", "--help"], ["budget", "--help"]),
    (["release", "budget"], ["release", "budget"]),  # only the budget command gets a default
    (["-q"], ["-q"]),
])
def test_show_is_the_default_budget_subcommand(argv: list[str], expected: list[str]) -> None:
    from censusdp.pipeline.cli.budget import default_subcommand

    assert default_subcommand(argv) == expected


def test_show_and_the_short_form_print_the_same(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    short = run(capsys, "budget", str(tiny_release), "--json")
    long = run(capsys, "budget", "show", str(tiny_release), "--json")
    assert short == long and short[0] == 0 and json.loads(short[1])["allocation"]


def test_optimize_is_a_subcommand(tiny_release: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "budget", "optimize", str(tiny_release), "--weights", "*:total=1,unit:detailed=1",
                       "--write", str(tmp_path / "tuned.toml"))
    assert code == 0 and "level shares" in out and "before" in out and "after" in out
    assert (tmp_path / "tuned.toml").is_file() and out.rstrip().endswith(str(tmp_path / "tuned.toml"))
    with pytest.raises(SystemExit) as info:  # argparse: --weights is required
        main(["budget", "optimize", str(tiny_release)])
    assert info.value.code == 2 and "--weights" in capsys.readouterr().err


def test_a_preset_shows_its_units_universe_and_the_total_charged(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--preset", "pl94-2020", "--out", str(tmp_path / "p.toml")]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "budget", str(tmp_path / "p.toml"), "--json")
    report = json.loads(out)
    assert code == 0 and report["units"]["rho_exact"] == "11417641/152349649"
    assert {a["query"] for a in report["units"]["allocation"]} == {"detailed", "occupancy"}
    code, text, _ = run(capsys, "budget", str(tmp_path / "p.toml"))
    total = Fraction(report["rho_exact"]) + 4 * Fraction("11417641/152349649")  # the per-person bound charged
    assert report["units"]["per_person"]["rho_exact"] == str(total)
    assert f"rho_persons + 4 rho_units = {total}" in text and "invariant (NOT protected): hhgq at us" in text
