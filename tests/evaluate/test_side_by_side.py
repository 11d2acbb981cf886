"""``censusdp evaluate`` with several releases: side by side against the same true data (NOT PRIVATE)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from censusdp.pipeline.cli import main
from censusdp.pipeline.evaluate.metrics import LABEL
from tests.helpers.releases import release_dir


def test_two_releases_side_by_side(tiny_release: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    first, second = release_dir(capsys, tiny_release, seed=3), release_dir(capsys, tiny_release, seed=4)
    out = tmp_path / "compared"
    truth = str(tiny_release.parent / "microdata.parquet")
    assert main(["-q", "evaluate", "--truth", truth, "--release", str(first), "--release", str(second),
                 "--out", str(out)]) == 0
    assert LABEL in capsys.readouterr().err
    assert {p.name for p in out.iterdir()} == {"comparison.parquet", "comparison.md", first.name, second.name}
    assert (out / first.name / "evaluation.md").is_file() and (out / second.name / "evaluation.parquet").is_file()
    combined = pl.read_parquet(out / "comparison.parquet")
    assert set(combined["run_id"]) == {first.name, second.name}
    for run in (first, second):  # each release's rows are its own evaluation's
        own = pl.read_parquet(out / run.name / "evaluation.parquet")
        assert combined.filter(pl.col("run_id") == run.name).drop("run_id").equals(own)
    report = (out / "comparison.md").read_text()
    assert report.startswith(f"# {LABEL}") and f"`{first.name}`" in report and f"`{second.name}`" in report
    rows = [line for line in report.splitlines() if line.startswith("| unit |")]
    assert len(rows) == 2 and all(len(r.strip("|").split("|")) == 1 + 2 * 3 for r in rows)  # 2 runs x 3 methods
    mae = combined.filter((pl.col("run_id") == second.name) & (pl.col("method") == "reconciled")
                          & (pl.col("level") == "unit") & (pl.col("query") == "detailed")
                          & (pl.col("metric") == "mae") & (pl.col("group") == "all"))["value"][0]
    assert f"{mae:.3f}" == rows[1].split("|")[6].strip()  # release 2's reconciled column of the detailed table


def test_no_evaluation_inside_any_of_the_runs(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = release_dir(capsys, tiny_release, seed=3), release_dir(capsys, tiny_release, seed=4)
    assert main(["evaluate", "--truth", str(tiny_release.parent / "microdata.parquet"), "--release", str(first),
                 "--release", str(second), "--out", str(second / "evaluation")]) == 1
    assert "not private" in capsys.readouterr().err and not (second / "evaluation").exists()


def test_outputs_never_land_in_a_release(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    """An OUT that holds the runs would put OUT/<run id> inside them; a run id edited into a path, a run given
    twice, or an OUT that is another release are refused before anything is written."""
    import json
    import shutil

    first, second = release_dir(capsys, tiny_release, seed=3), release_dir(capsys, tiny_release, seed=4)
    before = sorted(p.relative_to(first.parent) for p in first.parent.rglob("*"))
    truth = str(tiny_release.parent / "microdata.parquet")

    def refused(*argv: str, needle: str) -> None:
        assert main(["-q", "evaluate", "--truth", truth, *argv]) == 1
        assert needle in capsys.readouterr().err

    refused("--release", str(first), "--release", str(second), "--out", str(first.parent), needle="not private")
    refused("--release", str(first), "--release", str(first), "--out", str(tmp_path / "x"), needle="given twice")
    other = release_dir(capsys, tiny_release, seed=6)
    refused("--release", str(first), "--out", str(other), needle="not private")
    copy = tmp_path / "copy"
    shutil.copytree(second, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "run_id": "../../victim"}))
    refused("--release", str(first), "--release", str(copy), "--out", str(tmp_path / "y"), needle="not a valid run id")
    assert sorted(p.relative_to(first.parent) for p in first.parent.rglob("*") if other not in p.parents
                  and p != other) == before
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists() and not (tmp_path.parent / "victim").exists()
