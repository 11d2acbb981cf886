"""Bad input: one clear line naming file and column/row or key, a non-zero exit, nothing published."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from censusdp.pipeline.config.ledger_location import default_ledger_location
from tests.helpers.tiny import TINY_TOML, require_shared_data, tiny_microdata

MARKER_ROW = 1234  # the bad value is planted in this row (1-based data row)


PLANTED: list[str] = []  # every planted value that has a text form: none may be echoed


def plant(column: str, value: object) -> Callable[[pl.DataFrame], pl.DataFrame]:
    if isinstance(value, str) and value.strip():
        PLANTED.append(value)

    def edit(frame: pl.DataFrame) -> pl.DataFrame:
        series = frame.get_column(column).cast(pl.Utf8).to_list()
        series[MARKER_ROW - 1] = value
        return frame.with_columns(pl.Series(column, series, dtype=pl.Utf8))
    return edit


CASES = {
    "unknown geocode": (plant("geocode", "9911"), "microdata.parquet", "column geocode", f"row {MARKER_ROW}"),
    "geocode of the wrong width": (plant("geocode", "11011"), "microdata.parquet", "column geocode",
                                   f"row {MARKER_ROW}"),
    "value outside the domain": (plant("COLOUR", "purple"), "microdata.parquet", "column COLOUR",
                                 f"row {MARKER_ROW}"),
    "null value": (plant("ADULT", None), "microdata.parquet", "column ADULT", f"row {MARKER_ROW}"),
    "missing column": (lambda f: f.drop("ADULT"), "microdata.parquet", "column ADULT", "missing column"),
    "float column": (lambda f: f.with_columns(pl.lit(1.5).alias("ADULT")), "microdata.parquet", "column ADULT",
                     "type"),
    "empty file": (lambda f: f.head(0), "microdata.parquet", "no person records", ""),
    "malformed geocode": (plant("geocode", "1 0x"), "microdata.parquet", "column geocode", "malformed"),
    "empty string value": (plant("COLOUR", "  "), "microdata.parquet", "column COLOUR", f"row {MARKER_ROW}"),
    "boolean column": (lambda f: f.with_columns(pl.lit(True).alias("ADULT")), "microdata.parquet",
                       "column ADULT", "type"),
    "missing geocode column": (lambda f: f.drop("geocode"), "microdata.parquet", "column geocode",
                               "missing column"),
}


def run_cli(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    """``censusdp check``: the data curator's precise one-line errors (a release names categories only after
    its charge, tests/release/test_refusals.py); the release refuses the file-level cases alike, uncharged."""
    code = main(["-q", "check", str(config), *extra])
    return code, capsys.readouterr().err


def run_release(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", "7", *extra])
    return code, capsys.readouterr().err


def assert_nothing_published(config: Path) -> None:
    runs = config.parent / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a failed run left files behind"
    ledger = Path(default_ledger_location())
    assert not ledger.exists() or PrivacyLedger(ledger).charges() == [], "bad input was charged"


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_microdata_fails_with_one_clear_line(case: str, tiny_release: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    edit, file_part, where, detail = CASES[case]
    path = tiny_release.parent / "microdata.parquet"
    edit(pl.read_parquet(path)).write_parquet(path)
    code, err = run_cli(tiny_release, capsys)
    lines = [line for line in err.splitlines() if line.strip() and "WARNING" not in line]
    assert code != 0
    assert len(lines) == 1, err
    assert file_part in lines[0] and where in lines[0] and detail in lines[0], lines[0]
    assert len(PLANTED) == 4 and not [value for value in PLANTED if value in err]  # values are never echoed
    assert_nothing_published(tiny_release)


def test_truncated_parquet(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_release.parent / "microdata.parquet"
    path.write_bytes(path.read_bytes()[:200])
    code, err = run_cli(tiny_release, capsys)
    assert code != 0 and "microdata.parquet" in err and "not a readable Parquet file" in err
    assert_nothing_published(tiny_release)


def test_duplicate_columns_in_csv(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    micro, _ = tiny_microdata()
    csv = tiny_release.parent / "micro.csv"
    text = micro.write_csv()
    header, rest = text.split("\n", 1)
    csv.write_text(header + ",ADULT\n" + "\n".join(line + ",1" for line in rest.strip().split("\n")) + "\n")
    code, err = run_cli(tiny_release, capsys, "--microdata", str(csv), "--format", "csv")
    assert code != 0 and "micro.csv" in err and "duplicate column" in err and "ADULT" in err
    assert_nothing_published(tiny_release)


def test_geography_file_with_duplicates(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    geo = tiny_release.parent / "geography.parquet"
    frame = pl.read_parquet(geo)
    pl.concat([frame, frame.head(1)]).write_parquet(geo)
    code, err = run_cli(tiny_release, capsys)
    assert code != 0 and "geography.parquet" in err and "duplicate geocode" in err
    assert_nothing_published(tiny_release)


def test_shares_not_summing_to_one(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('root = "1/4"', 'root = "1/5"'))
    code, err = run_cli(tiny_release, capsys)
    assert code != 0 and "config.toml" in err and "budget.level_shares" in err and "sum to 1" in err
    assert_nothing_published(tiny_release)


def test_missing_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(tmp_path / "nope.toml", capsys)
    assert code != 0 and "nope.toml" in err and "Traceback" not in err


def test_geography_file_that_disagrees_with_the_microdata(tiny_release: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    geo = tiny_release.parent / "geography.parquet"
    frame = pl.read_parquet(geo)
    frame.filter(~pl.col("geocode").str.starts_with("2")).write_parquet(geo)  # drops units that hold persons
    code, err = run_cli(tiny_release, capsys)
    assert code != 0 and "microdata.parquet" in err and "not a unit of the geography file" in err and "row" in err
    assert_nothing_published(tiny_release)


def test_geography_codes_of_the_wrong_width(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pl.DataFrame({"geocode": ["1101", "110"]}).write_parquet(tiny_release.parent / "geography.parquet")
    code, err = run_cli(tiny_release, capsys)
    assert code != 0 and "geography.parquet" in err and "column geocode" in err and "row 2" in err
    assert_nothing_published(tiny_release)


@pytest.mark.parametrize("missing", ["microdata.parquet", "geography.parquet"])
def test_missing_input_files(tiny_release: Path, capsys: pytest.CaptureFixture[str], missing: str) -> None:
    (tiny_release.parent / missing).unlink()
    code, err = run_cli(tiny_release, capsys)
    assert code != 0 and missing in err and "no such file" in err
    assert_nothing_published(tiny_release)


def test_ragged_csv(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tiny_release.parent / "micro.csv"
    csv.write_text("geocode,COLOUR,ADULT\n1101,r,1\n1102,g\n1103,b,1,7\n")
    code, err = run_cli(tiny_release, capsys, "--microdata", str(csv), "--format", "csv")
    assert code != 0 and "micro.csv" in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert_nothing_published(tiny_release)


def test_mdf_block_group_that_does_not_match_the_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame = pl.read_csv(require_shared_data(), infer_schema=False)
    frame = frame.with_columns(pl.when(pl.int_range(pl.len()) == 99).then(pl.lit("9"))
                               .otherwise(pl.col("TABBLKGRPCE")).alias("TABBLKGRPCE"))
    frame.write_csv(tmp_path / "ppmf.csv")
    assert main(["init", "--out", str(tmp_path / "pl94.toml")]) == 0
    capsys.readouterr()
    text = (tmp_path / "pl94.toml").read_text()  # the PPMF sample comes without a geography file
    (tmp_path / "pl94.toml").write_text("\n".join(x for x in text.splitlines() if not x.startswith("geography = ")))
    code, err = run_cli(tmp_path / "pl94.toml", capsys, "--microdata", str(tmp_path / "ppmf.csv"), "--format",
                        "mdf-pl94", "--no-units")
    assert code != 0 and "ppmf.csv" in err and "column TABBLKGRPCE" in err and "row 100" in err


@pytest.mark.parametrize(("old", "new", "key"), [
    ('rho = "4"', 'rho = "-2"', "budget.rho"),
    ('"adult * colour" = "1/2"', '"adult * size" = "1/2"', "strategy.district"),
    ("width = 2", "width = 1", "levels"),
    ('cap_rho = "1000"', 'cap_rho = "0"', "ledger.cap_rho"),
])
def test_config_errors_through_the_cli(tiny_release: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                                       key: str) -> None:
    tiny_release.write_text(TINY_TOML.format(rho="4").replace(old, new, 1))
    code, err = run_release(tiny_release, capsys)
    errors = [line for line in err.splitlines() if "error" in line]
    assert code != 0 and len(errors) == 1 and "config.toml" in errors[0] and key in errors[0]
    assert_nothing_published(tiny_release)


def test_delta_not_much_smaller_than_one_over_n_is_warned(tiny_release: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('delta = "1e-10"', 'delta = "0.001"'))
    code = main(["release", str(tiny_release), "--no-prefect", "--insecure-seed", "1"])
    err = capsys.readouterr().err
    assert code == 0 and "delta is not much smaller than 1/n" in err


def test_unknown_solver_is_refused_before_any_charge(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TINY_TOML.format(rho="4").replace('[output]\ndir = "runs"', '[output]\ndir = "runs"\n\n[postprocess]\n'
                                             'solver = "OSQQ"')
    tiny_release.write_text(text)
    code, err = run_release(tiny_release, capsys)
    assert code != 0 and "postprocess.solver" in err and "OSQQ" in err
    assert_nothing_published(tiny_release)
