"""Bad input: one clear line naming file and column/row or key, a non-zero exit, nothing published."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from pipeline.cli import main
from tests.conftest import TINY_TOML, tiny_microdata

MARKER_ROW = 1234  # the bad value is planted in this row (1-based data row)


def plant(column: str, value: object) -> Callable[[pl.DataFrame], pl.DataFrame]:
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
}


def run_cli(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", "7", *extra])
    return code, capsys.readouterr().err


def assert_nothing_published(config: Path) -> None:
    runs = config.parent / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a failed run left files behind"


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
    assert "purple" not in err and "9911" not in err  # values are never echoed
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
