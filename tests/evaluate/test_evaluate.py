"""censusdp evaluate: metrics against the true data, labelled NOT PRIVATE everywhere, plots and report."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from censusdp.pipeline.cli.evaluate import add_evaluate
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.evaluate.compare import evaluate
from censusdp.pipeline.evaluate.metrics import LABEL, entropy_bits, query_metrics, size_bin, total_variation
from tests.helpers.releases import release_dir


def unit_tvd(truth: Path, run_dir: Path) -> float:
    """Mean over populated units of the total variation distance between the true and the published detailed
    distributions, from the microdata and tables/unit.parquet directly (units are the 4-digit geocodes)."""
    colours = {"r": "red", "g": "green", "b": "blue"}
    keys = ["geoid", "colour", "adult"]
    true = (pl.read_parquet(truth).select(geoid=pl.col("geocode"), colour=pl.col("COLOUR").replace_strict(colours),
                                           adult=pl.col("ADULT")).group_by(keys).agg(true=pl.len()))
    published = pl.read_parquet(run_dir / "tables" / "unit.parquet").select(*keys, pl.col("count").cast(pl.Float64))
    cells = true.join(published, on=keys, how="full", coalesce=True).fill_null(0)
    shares = cells.with_columns(p=pl.col("true") / pl.col("true").sum().over("geoid"),
                                q=pl.col("count") / pl.col("count").sum().over("geoid"))
    distance = 0.5 * (pl.col("p") - pl.col("q")).abs().sum()
    per_unit = (shares.group_by("geoid").agg(pl.col("true").sum(), mass=pl.col("count").sum(), tvd=distance)
                .filter(pl.col("true") > 0))
    return float(per_unit.select(pl.when(pl.col("mass") > 0).then(pl.col("tvd")).otherwise(1.0).mean()).item())


def run_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_evaluate(parser.add_subparsers())
    args = parser.parse_args(["evaluate", *argv])
    return args.handler(args)


def test_metric_helpers() -> None:
    assert entropy_bits(np.array([[1, 1], [4, 0], [0, 0]])).tolist() == [1.0, 0.0, 0.0]
    assert size_bin(np.array([0, 1, 9, 10, 49, 50, 249, 250, 10**6])).tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    tvd, nodes = total_variation(np.array([[2, 2], [0, 0], [1, 0]]), np.array([[4, 0], [3, 3], [-1, -2]]))
    assert nodes == 2 and tvd == pytest.approx((0.5 + 1.0) / 2)  # an all-negative estimate counts as 1
    rows = query_metrics(np.array([[0, 10]]), np.array([[2, 7]]), np.array([[0, 0]]))
    values = {(r["metric"], r["group"], r["bin"]): r["value"] for r in rows}
    assert values[("mae", "all", "all")] == 2.5 and values[("bias", "all", "all")] == -0.5
    assert values[("max_abs", "all", "all")] == 3 and values[("bias", "size", "10-49")] == -3


def test_evaluate_a_tiny_release(tiny_release: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run_dir = release_dir(capsys, tiny_release, seed=3)
    truth = tiny_release.parent / "microdata.parquet"
    metrics = evaluate(truth, run_dir, seed=1)
    assert set(metrics["method"].unique()) == {"noisy", "reconciled", "gls", "bottom_up"}
    assert (metrics["label"] == LABEL).all()

    def value(method: str, level: str, query: str, metric: str = "mae") -> float:
        row = metrics.filter((pl.col("method") == method) & (pl.col("level") == level) & (pl.col("query") == query)
                             & (pl.col("metric") == metric) & (pl.col("group") == "all"))
        return float(row["value"][0])

    assert value("reconciled", "root", "total") == 0 and value("gls", "region", "total") < 1e-9  # invariants
    assert value("noisy", "unit", "detailed") > 0
    assert value("bottom_up", "root", "total") > 0  # the baseline has no invariant
    assert metrics.filter((pl.col("method") == "noisy") & (pl.col("level") == "unit")
                          & (pl.col("query") == "total")).height == 0  # not measured there
    assert {"size", "diversity", "all"} <= set(metrics["group"].unique())
    assert value("reconciled", "unit", "detailed", "tvd") == pytest.approx(unit_tvd(truth, run_dir), rel=1e-12)

    # areas of the user's own (units by their last digit): the published sums' error, from the files directly
    plan = tmp_path / "plan.csv"
    units = pl.read_parquet(tiny_release.parent / "geography.parquet")["geocode"]
    pl.DataFrame({"GEOID": units, "area": units.str.slice(3, 1)}).write_csv(plan)
    with_areas = evaluate(truth, run_dir, seed=1, areas=[plan])
    true = pl.read_parquet(truth).group_by(area=pl.col("geocode").str.slice(3, 1)).agg(true=pl.len())
    published = (pl.read_parquet(run_dir / "tables" / "unit.parquet")
                 .group_by(area=pl.col("geoid").str.slice(3, 1)).agg(pl.col("count").sum()))
    sums = pl.DataFrame({"area": units.str.slice(3, 1).unique()}).join(true, on="area", how="left").join(
        published, on="area", how="left").fill_null(0)
    expected = float((sums["count"] - sums["true"]).abs().mean())
    row = with_areas.filter((pl.col("method") == "reconciled") & (pl.col("level") == "areas:plan")
                            & (pl.col("query") == "total") & (pl.col("metric") == "mae") & (pl.col("group") == "all"))
    assert expected > 0 and float(row["value"][0]) == pytest.approx(expected, rel=1e-12)
    assert int(row["n"][0]) == sums.height

    out = tmp_path / "evaluation"
    assert run_command(["--truth", str(truth), "--release", str(run_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert LABEL in printed.err
    names = {p.name for p in out.iterdir()}
    assert {"evaluation.parquet", "evaluation.md", "error_by_level.png", "bias_by_size.png",
            "bias_by_diversity.png", "budget_shares.png"} <= names
    assert pq.read_metadata(out / "evaluation.parquet").metadata[b"censusdp.label"].decode() == LABEL
    report = (out / "evaluation.md").read_text()
    assert report.startswith(f"# {LABEL}") and "![error_by_level.png](error_by_level.png)" in report
    assert (out / "error_by_level.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluation_is_never_written_inside_the_run(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release, seed=3)
    with pytest.raises(CensusDPError, match="not private"):
        run_command(["--truth", str(tiny_release.parent / "microdata.parquet"), "--release", str(run_dir),
                     "--out", str(run_dir / "evaluation")])
