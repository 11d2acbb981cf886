"""``censusdp areas``: the output, its agreement with the published tables, and the coverage of its intervals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.evaluate.compare import true_histograms
from censusdp.pipeline.io.assignments import read_assignment
from censusdp.pipeline.io.run_folder import LoadedRun, load_run
from censusdp.pipeline.uncertainty.areas import LABEL, area_table, area_variables
from censusdp.pipeline.uncertainty.estimates import gls_levels, redrawn_measurements
from censusdp.postprocess.gls import QuerySpec, plan_levels, solve_gls
from censusdp.postprocess.gls_areas import area_estimates, area_terms, area_variances
from tests.helpers.configs import preset_config
from tests.helpers.releases import cli, release_dir
from tests.helpers.tiny import TINY_TOML, require_shared_data, tiny_microdata

COLUMNS = ["area", "variable", "published", "estimate", "std_error", "ci_low", "ci_high", "published_error_bound"]


@pytest.fixture
def tiny_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    micro, geo = tiny_microdata(seed=3, persons=6000)
    micro.write_parquet(tmp_path / "microdata.parquet")
    geo.write_parquet(tmp_path / "geography.parquet")
    (tmp_path / "config.toml").write_text(TINY_TOML.format(rho="2"))
    return release_dir(capsys, tmp_path / "config.toml", seed=17)


def plans(run: LoadedRun, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Areas of three kinds over the units (area index per unit, -1 outside): contiguous runs of units, whole
    districts, and areas scattered across districts and regions."""
    n = run.tree.n_nodes(run.tree.depth - 1)
    runs = np.full(n, -1)
    start = 0
    for area in range(10):
        width = int(rng.integers(2, 7))
        runs[start:start + width] = area
        start += width + int(rng.integers(0, 3))
    districts = run.tree.parent[-1].copy()
    scattered = rng.integers(-1, 8, n)  # each unit to one of 8 areas, or none
    return {"runs": runs, "districts": districts, "scattered": scattered}


def test_areas_cover_the_truth_95_percent_for_every_kind(tiny_run: Path) -> None:
    """Fresh measurements of the true data with the release's own mechanisms and σ², 300 times: the interval
    estimate ± 1.96·std_error holds the true count 93-97% of the time for areas of every kind, over the total
    and every detailed cell; with half the standard error it would not."""
    run = load_run(tiny_run)
    truth = true_histograms(run)
    variables = area_variables(run, ["total", "detailed"])
    rng = seeded_random_source(99)  # test-only
    shape = run.config.schema.shape
    assignments = plans(run, np.random.default_rng(4))  # test-only
    base = gls_levels(run)
    planned = plan_levels(base, shape)
    terms = {kind: area_terms(planned, shape, leaf, int(leaf.max()) + 1) for kind, leaf in assignments.items()}
    sd = {kind: np.sqrt(area_variances(t, variables.weights)) for kind, t in terms.items()}
    true = {kind: np.stack([variables.weights @ truth[-1][leaf == a].sum(axis=0) for a in range(int(leaf.max()) + 1)])
            for kind, leaf in assignments.items()}
    inside = {kind: 0 for kind in assignments}
    inside_half = dict(inside)
    replicates = 300
    for _ in range(replicates):
        result = solve_gls(gls_levels(run, redrawn_measurements(run, truth, rng)), shape)
        for kind, leaf in assignments.items():
            error = np.abs(area_estimates(result.stream, leaf, int(leaf.max()) + 1, variables.weights) - true[kind])
            counted = sd[kind] > 1e-6  # an exact value (an empty area) is no test of the interval
            inside[kind] += int((error <= 1.959964 * sd[kind])[counted].sum())
            inside_half[kind] += int((error <= 0.98 * sd[kind])[counted].sum())
    for kind in assignments:
        cells = replicates * int((sd[kind] > 1e-6).sum())
        assert 0.93 <= inside[kind] / cells <= 0.97, (kind, inside[kind] / cells)
        assert inside_half[kind] / cells < 0.75


def test_the_areas_table_agrees_with_the_published_tables(tiny_run: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    run = load_run(tiny_run)
    units = run.tree.geoids[-1]
    district = run.tree.geoids[-2][run.tree.parent[-1]]
    plan = tiny_run.parent / "plan.csv"
    pl.DataFrame({"geoid": units[::2], "plan": [f"d{d}" for d in district[::2]]}).write_csv(plan)
    code, out, err = cli(capsys, "areas", str(tiny_run), "--assign", str(plan), "--query", "colour")
    assert code == 0, err
    written = pq.read_table(out)
    assert written.column_names == COLUMNS
    assert written.schema.metadata[b"censusdp.label"].decode() == LABEL
    table = pl.from_arrow(written)
    assert set(table["variable"]) == {"colour[red]", "colour[green]", "colour[blue]"}
    published = pl.read_parquet(tiny_run / "tables" / "unit.parquet").filter(pl.col("geoid").is_in(units[::2]))
    expected = (published.with_columns(area=pl.col("geoid").str.slice(0, 2).map_elements(lambda g: f"d{g}",
                                                                                         return_dtype=pl.String))
                .group_by("area", "colour").agg(pl.col("count").sum()))
    got = table.with_columns(colour=pl.col("variable").str.extract(r"\[(\w+)\]")).join(
        expected, on=["area", "colour"], how="left").with_columns(pl.col("count").fill_null(0))
    assert (got["published"] == got["count"]).all()
    assert ((got["ci_low"] < got["estimate"]) & (got["estimate"] < got["ci_high"])).all()
    np.testing.assert_allclose(got["ci_high"] - got["estimate"], 1.959963984540054 * got["std_error"], rtol=1e-12)
    bound = np.maximum((got["published"] - got["ci_low"]).abs(), (got["ci_high"] - got["published"]).abs())
    np.testing.assert_allclose(got["published_error_bound"], bound, rtol=1e-12)


def test_an_area_that_is_a_whole_district_gets_that_district_s_gls_figures(tiny_run: Path) -> None:
    run = load_run(tiny_run)
    leaf = np.where(run.tree.parent[-1] == 2, 0, -1)
    plan = tiny_run.parent / "one.csv"
    pl.DataFrame({"geoid": run.tree.geoids[-1][leaf == 0], "area": "x"}).write_csv(plan)
    table = pl.from_arrow(area_table(run, read_assignment(plan, run.tree.geoids[-1]), area_variables(run)))
    result = solve_gls(gls_levels(run), run.config.schema.shape)
    total = run.config.schema.parse_query("total")
    assert table["variable"].to_list() == ["total"]
    assert table["estimate"][0] == pytest.approx(float(result.estimate(2, QuerySpec(()))[2, 0]), rel=1e-9)
    assert table["std_error"][0] ** 2 == pytest.approx(float(result.variance(2, QuerySpec(()))[2, 0]), rel=1e-9)
    assert table["published"][0] == int(run.table(2)[2].sum()) and total.name == "total"


def test_bad_plans_fail_with_one_line_and_write_nothing(tiny_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tiny_run.parent / "bad.csv"
    plan.write_text("geoid,area\n1101,a\n9999,b\n")
    code, _, err = cli(capsys, "areas", str(tiny_run), "--assign", str(plan))
    assert code != 0 and "'9999' is not a block of the release" in err and "row 2" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    assert not (tiny_run / "areas").exists()
    code, out, err = cli(capsys, "areas", str(tiny_run), "--assign", str(plan), "--skip-unknown-blocks")
    assert code == 0 and "skipped 1 rows" in err
    assert pl.read_parquet(out)["area"].to_list() == ["a"]


@pytest.mark.slow
def test_perry_county_plan_gets_p_table_variables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pl94 preset on the real PPMF sample: every P1-P5 variable for every district of a plan; the published
    P1_001N of a district is the sum of its blocks' P1_001N in tables/pl94/block.parquet."""
    shared_data = require_shared_data()
    preset_config(tmp_path / "pl94.toml", "pl94", {"input.geography": None,
                                                  "ledger.path": str(tmp_path / "ledger.sqlite")})
    run_dir = release_dir(capsys, tmp_path / "pl94.toml", "--microdata", str(shared_data), "--format", "mdf-pl94",
                          "--no-units")
    blocks = pl.read_parquet(run_dir / "tables" / "pl94" / "block.parquet")
    plan = blocks.select("GEOID", "P1_001N").with_columns(DISTRICT=(pl.int_range(pl.len()) % 4).cast(pl.String))
    plan.select("GEOID", "DISTRICT").write_csv(tmp_path / "plan.csv", separator="|")
    code, out, err = cli(capsys, "areas", str(run_dir), "--assign", str(tmp_path / "plan.csv"))
    assert code == 0, err
    table = pl.read_parquet(out)
    assert table.height == 4 * 298
    totals = table.filter(pl.col("variable") == "P1_001N").sort("area")
    assert totals["published"].to_list() == plan.group_by("DISTRICT").agg(pl.col("P1_001N").sum()).sort(
        "DISTRICT")["P1_001N"].to_list()
    assert (totals["std_error"] > 0).all()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert Path(out).parent == run_dir / "areas" and manifest["run_id"] in pq.read_schema(out).metadata[
        b"censusdp.run_id"].decode()
    # the report's expected errors: per level, the RMS over nodes of the per-node GLS standard errors
    run = load_run(run_dir)
    result = solve_gls(gls_levels(run), run.config.schema.shape)
    cenrace = run.config.schema.names.index("cenrace")
    errors = manifest["expected_errors"]["levels"]
    for level, spec in enumerate(run.config.levels):
        total = np.sqrt(result.variance(level, QuerySpec(())).mean())
        white = np.sqrt(result.variance(level, QuerySpec((cenrace,)))[:, 0].mean())
        assert errors[spec.name]["P1_001N"] == pytest.approx(total if total > 1e-6 else 0.0, rel=1e-6, abs=1e-9)
        assert errors[spec.name]["P1_003N"] == pytest.approx(white, rel=1e-6)
    report = (run_dir / "report.md").read_text()
    assert "## Expected error of the main P.L. 94-171 counts" in report and "| P1_001N total |" in report
    assert "used full-information reconciliation" in report
    # a free re-run level by level writes its own tables and says its published counts may be less accurate
    code, out, err = cli(capsys, "postprocess", str(run_dir), "--reconciliation", "level_by_level", "--ledger",
                         str(tmp_path / "ledger.sqlite"))
    assert code == 0, err
    rerun = Path(out.splitlines()[-1])
    again = json.loads((rerun / "manifest.json").read_text())
    assert again["postprocess_of"] == manifest["run_id"] and again["expected_errors"]["levels"] == errors
    assert "reconciled level by level" in (rerun / "report.md").read_text()
    block = pl.read_parquet(rerun / again["summary_tables"]["pl94"]["levels"]["block"])
    assert block["P1_001N"].sum() == 10588 and block.height == blocks.height
