"""A refusal is a query: whether a release is charged must not depend on confidential values.

File-level problems (missing file, unreadable file, missing column, wrong column type) may refuse a release
without a charge.  Every value-level problem (domain, geocode width and membership, duplicates, empty file)
is found only after the charge: the run is charged, marked failed in the ledger with a category, publishes
nothing, and its error line names no row, column or value.  ``censusdp check`` gives the data curator the
precise line, with no ledger and no noise.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from censusdp.pipeline.release import stages
from tests.helpers.tiny import TINY_TOML

MARKER_ROW = 1234
Edit = Callable[[pl.DataFrame], pl.DataFrame]


def plant(column: str, value: object) -> Edit:
    def edit(frame: pl.DataFrame) -> pl.DataFrame:
        series = frame.get_column(column).cast(pl.Utf8).to_list()
        series[MARKER_ROW - 1] = value
        return frame.with_columns(pl.Series(column, series, dtype=pl.Utf8))
    return edit


# value-level problems: (edit of the microdata, category recorded in the ledger, what `check` names)
VALUE_CASES: dict[str, tuple[Edit, str, tuple[str, ...]]] = {
    "value outside the domain": (plant("COLOUR", "purple"), "domain", ("column COLOUR", f"row {MARKER_ROW}")),
    "unknown geocode": (plant("geocode", "9911"), "geography", ("column geocode", f"row {MARKER_ROW}")),
    "geocode of the wrong width": (plant("geocode", "11011"), "geocode", ("column geocode", f"row {MARKER_ROW}")),
    "malformed geocode": (plant("geocode", "1 0x"), "geocode", ("column geocode", f"row {MARKER_ROW}")),
    "null value": (plant("ADULT", None), "missing-value", ("column ADULT", f"row {MARKER_ROW}")),
    "empty file": (lambda f: f.head(0), "empty", ("no person records",)),
}
PLANTED = ("purple", "9911", "11011", "1 0x", str(MARKER_ROW), "COLOUR", "ADULT")


def release(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", "7", *extra])
    return code, capsys.readouterr().err


def edit_microdata(config: Path, edit: Edit) -> None:
    path = config.parent / "microdata.parquet"
    edit(pl.read_parquet(path)).write_parquet(path)


def ledger(installation_ledger: Path) -> PrivacyLedger:
    assert installation_ledger.exists(), "the release did not use the installation's ledger"
    return PrivacyLedger(installation_ledger)


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_value_problems_are_found_after_the_charge(case: str, tiny_release: Path, installation_ledger: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    edit, category, _ = VALUE_CASES[case]
    edit_microdata(tiny_release, edit)
    code, err = release(tiny_release, capsys)
    errors = [line for line in err.splitlines() if "error" in line]
    assert code != 0 and len(errors) == 1, err
    assert "after the budget was charged" in errors[0] and "censusdp check" in errors[0]
    assert f"({category} problem)" in errors[0]
    shown = err.replace(str(tiny_release.parent), "<run folder>")  # pytest's folder may be pytest-12345
    for planted in PLANTED:  # no row number, no column, no value
        assert planted not in shown, f"{planted!r} reached the error output"
    runs = tiny_release.parent / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a failed run published something"
    (charge,) = ledger(installation_ledger).charges()
    assert charge.status == "failed" and charge.rho == 4 and charge.reason == f"input-validation:{category}"


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_check_names_file_column_and_row(case: str, tiny_release: Path, installation_ledger: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    edit, _, where = VALUE_CASES[case]
    edit_microdata(tiny_release, edit)
    code = main(["check", str(tiny_release)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert "microdata.parquet" in lines[0] and all(w in lines[0] for w in where), lines[0]
    assert not installation_ledger.exists(), "check touched the ledger"
    assert not (tiny_release.parent / "runs").exists()


def test_check_of_valid_input_touches_no_ledger(tiny_release: Path, installation_ledger: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tiny_release)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "3,000 person records" in out
    assert not installation_ledger.exists()


@pytest.mark.parametrize("drop", ["purple in the data", "purple not in the data"])
def test_dropping_a_value_from_the_domain_costs_the_same(drop: str, tiny_release: Path, installation_ledger: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The attack of the issue: narrow a domain and watch for a refusal.  Whether the data holds the value or
    not, the release is charged the same; only a charged, failed run can tell them apart."""
    path = tiny_release.parent / "microdata.parquet"
    frame = pl.read_parquet(path)
    if drop == "purple in the data":
        plant("COLOUR", "purple")(frame).write_parquet(path)
    text = TINY_TOML.format(rho="4").replace('values = ["red", "green", "blue"]',
                                             'values = ["red", "green", "blue", "purple"]')
    tiny_release.write_text(text.replace('mapping = { r = "red", g = "green", b = "blue" }',
                                         'mapping = { r = "red", g = "green", b = "blue", purple = "purple" }'))
    code_full, _ = release(tiny_release, capsys)
    tiny_release.write_text(TINY_TOML.format(rho="4"))  # purple dropped from the domain
    release(tiny_release, capsys)
    charges = ledger(installation_ledger).charges()
    assert code_full == 0
    assert [c.rho for c in charges] == [Fraction(4), Fraction(4)], "the narrowed release was not charged"


@pytest.mark.parametrize("case", ["missing column", "float column", "missing file", "truncated file"])
def test_file_level_problems_are_refused_without_a_charge(case: str, tiny_release: Path, installation_ledger: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_release.parent / "microdata.parquet"
    frame = pl.read_parquet(path)
    if case == "missing column":
        frame.drop("ADULT").write_parquet(path)
    elif case == "float column":
        frame.with_columns(pl.lit(1.5).alias("ADULT")).write_parquet(path)
    elif case == "missing file":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:200])
    code, err = release(tiny_release, capsys)
    assert code != 0 and "microdata.parquet" in err and "charged" not in err
    assert not installation_ledger.exists() or PrivacyLedger(installation_ledger).charges() == []


def test_unexpected_errors_reach_prefect_by_type_only() -> None:
    """Prefect stores task failure messages and logs tracebacks: every flow task reports foreign exceptions
    by type only (their text could quote a value), with no chained original."""
    from censusdp.flows import release as flow_module
    from censusdp.pipeline.errors import CensusDPError, InternalError, type_only_errors

    def leaky() -> None:
        raise ValueError("found value 'purple' in row 1234")

    with pytest.raises(InternalError) as caught:
        type_only_errors(leaky)()
    assert "ValueError" in str(caught.value) and "purple" not in str(caught.value)
    assert caught.value.__context__ is None and caught.value.__cause__ is None

    def public() -> None:
        raise CensusDPError("a public message")

    with pytest.raises(CensusDPError, match="a public message"):
        type_only_errors(public)()
    tasks = [flow_module.start_task, *(flow_module.stage_task(s, s.function) for s in stages.STAGES)]
    assert [t.name for t in tasks] == ["allocate-budget", "read-files", "charge-ledger", "validate-values", "measure",
                                       "estimate", "reconcile", "tabulate", "publish"]
    assert all(getattr(t.fn, "__wrapped__", None) is not None for t in tasks), "a task reports raw exceptions"


@pytest.mark.parametrize("body", ["1101,r,1\n1102,\"g,1\n", "1101,r,1\n1102,g\"x,1\n", "1101,Smith, John,1\n"])
def test_a_csv_body_that_does_not_parse_is_a_charged_failure(body: str, tiny_release: Path, installation_ledger: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Whether a body parses depends on its values (a stray quote, a comma inside a value): after the charge."""
    csv = tiny_release.parent / "micro.csv"
    csv.write_text("geocode,COLOUR,ADULT\n" + body)
    code, err = release(tiny_release, capsys, "--microdata", str(csv), "--format", "csv")
    assert code != 0 and "after the budget was charged" in err and "(file problem)" in err, err
    (charge,) = ledger(installation_ledger).charges()
    assert charge.status == "failed" and charge.reason == "input-validation:file"
    assert main(["check", str(tiny_release), "--microdata", str(csv), "--format", "csv"]) != 0
    assert "micro.csv" in capsys.readouterr().err


def test_a_column_of_missing_values_is_a_value_problem(tiny_release: Path, installation_ledger: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_release.parent / "microdata.parquet"
    pl.read_parquet(path).with_columns(pl.lit(None).alias("ADULT")).write_parquet(path)  # type Null
    code, err = release(tiny_release, capsys)
    assert code != 0 and "(missing-value problem)" in err
    assert ledger(installation_ledger).charges()[0].reason == "input-validation:missing-value"


def test_the_cli_reports_unexpected_errors_by_type_only(tiny_release: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """SECURITY.md: an unexpected exception's text could quote a value; the CLI prints its type only."""
    def leaky(*args: object) -> None:
        raise ValueError("found value 'purple' for row 1234")

    monkeypatch.setattr(stages, "plan_measurement", leaky)  # inside the measure stage, through the CLI
    code, err = release(tiny_release, capsys)
    assert code == 3 and "internal error (ValueError)" in err
    shown = err.replace(str(tiny_release.parent), "<run folder>")  # pytest's folder may be pytest-12345
    assert "purple" not in shown and "1234" not in shown and "Traceback" not in shown
