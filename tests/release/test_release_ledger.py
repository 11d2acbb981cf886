"""Budget honestly spent: charges before noise, refusals, free post-processing, resume without new noise."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.config.ledger_location import default_ledger_location
from censusdp.pipeline.release import reconcile_chunk, stages
from tests.helpers.configs import edit_config
from tests.helpers.releases import cli, release_with
from tests.helpers.tiny import TINY_TOML


def ledger_of(config: Path) -> PrivacyLedger:
    """The installation's ledger (this test's user data directory): never a file beside the data."""
    assert not (config.parent / ".censusdp-ledger.sqlite").exists()
    return PrivacyLedger(default_ledger_location())


def test_two_releases_then_a_refused_third_then_a_free_postprocess(tiny_release: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('cap_rho = "1000"', 'cap_rho = "10"'))
    release = ["release", str(tiny_release), "--no-prefect", "--insecure-seed", "5"]
    first = cli(capsys, *release)
    second = cli(capsys, *release)
    assert first[0] == 0 and second[0] == 0
    ledger = ledger_of(tiny_release)
    assert ledger.spent("tiny") == 8 and ledger.remaining("tiny") == 2
    code, out, err = cli(capsys, *release)  # 4 more would pass the cap of 10
    errors = [line for line in err.splitlines() if "error" in line]
    assert code != 0 and len(errors) == 1 and "exceeds the remaining budget" in errors[0]
    assert len(list((tiny_release.parent / "runs").iterdir())) == 2  # nothing published, no partial folder
    assert ledger.spent("tiny") == 8  # a refused charge leaves nothing behind
    run_dir = Path(first[1])
    code, out, _ = cli(capsys, "postprocess", str(run_dir), "--solver", "CLARABEL")
    assert code == 0
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    assert manifest["postprocess_of"] == run_dir.name and manifest["charged_rho"] == "0"
    assert manifest["measurements"]["unit"] == str(run_dir / "measurements" / "unit.parquet")
    assert not (Path(out) / "measurements").exists()
    assert ledger.spent("tiny") == 8
    statuses = [c.status for c in ledger.charges("tiny")]
    assert statuses == ["published", "published", "postprocess"]
    code, out, _ = cli(capsys, "ledger", "--json")  # the installation's ledger, without --ledger
    assert code == 0 and "postprocess" in out
    assert json.loads(out)["ledger"] == default_ledger_location()


def test_postprocess_reproduces_the_tables_from_measurements_alone(
        tiny_release: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Rounding ties are broken at random by design: each chunk's tie keys come from a stream seeded by the
    # release's CSPRNG, or by the OS in a post-processing run, which may not draw from the run's source
    # (pipeline.release.stages.chunk_tasks).  So a plain re-run may differ wherever a tie is re-drawn, and below it
    # (seen with this seed: at every level).  Two precise checks instead of a tolerance: with the tie keys
    # pinned, the re-run is the release exactly (everything else is rebuilt from the measurements alone);
    # with fresh keys, everything the invariants fix is unchanged.
    def tables(run_dir: Path) -> dict[str, list[tuple[object, ...]]]:
        return {level: pl.read_parquet(run_dir / "tables" / f"{level}.parquet").sort("geoid", "colour", "adult").rows()
                for level in ("root", "region", "district", "unit")}

    def node_totals(run_dir: Path, level: str) -> dict[str, int]:
        table = pl.read_parquet(run_dir / "tables" / f"{level}.parquet")
        return dict(table.group_by("geoid").agg(pl.col("count").sum()).rows())

    real_stream = reconcile_chunk.seeded_random_source
    with monkeypatch.context() as pinned:
        pinned.setattr(reconcile_chunk, "seeded_random_source", lambda tie_seed: real_stream(0))
        code, out, _ = cli(capsys, "release", str(tiny_release), "--no-prefect", "--insecure-seed", "9")
        assert code == 0
        run_dir = Path(out)
        (tiny_release.parent / "microdata.parquet").unlink()  # post-processing must not need the microdata
        code, again, _ = cli(capsys, "postprocess", str(run_dir), "--out", str(tiny_release.parent / "pp"))
        assert code == 0
    assert tables(Path(again)) == tables(run_dir)
    code, fresh, _ = cli(capsys, "postprocess", str(run_dir), "--out", str(tiny_release.parent / "fresh"))
    assert code == 0
    for level in ("root", "region"):  # the total is an invariant at root and region
        assert node_totals(Path(fresh), level) == node_totals(run_dir, level), level
    for level in ("district", "unit"):  # below, only the sum over the level (the root's total) is fixed
        assert sum(node_totals(Path(fresh), level).values()) == sum(node_totals(run_dir, level).values()), level


def test_a_run_that_died_after_measuring_is_resumed_without_new_noise(
        tiny_release: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    real = stages.reconcile

    def crash_at_district(release: stages.Release, universe: stages.UniverseRun, level: int,
        runner: object = None) -> None:
        if level == 2:
            raise RuntimeError("simulated crash")
        real(release, universe, level, runner)

    with pytest.raises(RuntimeError, match="simulated crash"):
        release_with(tiny_release, 13, reconcile=crash_at_district)
    runs = tiny_release.parent / "runs"
    partial = next(runs.iterdir())
    assert partial.name.startswith(".") and partial.name.endswith(".partial")
    run_id = partial.name[1: -len(".partial")]
    noisy_before = pl.read_parquet(partial / "measurements" / "unit.parquet")["noisy_value"].to_numpy()
    ledger = ledger_of(tiny_release)
    assert [c.status for c in ledger.charges("tiny")] == ["failed"]
    code, out, err = cli(capsys, "release", str(tiny_release), "--resume", run_id)
    assert code == 0, err
    final = Path(out)
    assert final.name == run_id and not partial.exists()
    noisy_after = pl.read_parquet(final / "measurements" / "unit.parquet")["noisy_value"].to_numpy()
    assert np.array_equal(noisy_before, noisy_after)  # noise is never drawn twice for one charge
    assert [(c.run_id, c.status) for c in ledger.charges("tiny")] == [(run_id, "published")]
    assert ledger.spent("tiny") == Fraction(4)
    assert json.loads((final / "manifest.json").read_text())["resumed"] is True


def test_bad_values_are_charged_and_named_by_category_only(tiny_release: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_release.parent / "microdata.parquet"
    pl.read_parquet(path).with_columns(pl.lit("purple").alias("COLOUR")).write_parquet(path)
    code, _, err = cli(capsys, "release", str(tiny_release), "--no-prefect")
    assert code != 0 and "COLOUR" not in err and "purple" not in err and "domain problem" in err
    assert [(c.status, c.reason) for c in ledger_of(tiny_release).charges()] == [("failed",
                                                                                  "input-validation:domain")]


def test_a_config_without_a_ledger_is_refused(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TINY_TOML.format(rho="4").replace('[ledger]\ndataset = "tiny"\ncap_rho = "1000"\n', "")
    tiny_release.write_text(text)
    code, _, err = cli(capsys, "release", str(tiny_release), "--no-prefect")
    assert code != 0 and "ledger" in err and "missing" in err


def test_resume_refuses_a_changed_budget(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:

    def crash(release: stages.Release, universe: stages.UniverseRun, level: int,
        runner: object = None) -> None:
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        release_with(tiny_release, 2, reconcile=crash)
    run_id = next((tiny_release.parent / "runs").iterdir()).name[1: -len(".partial")]
    code, _, err = cli(capsys, "release", str(tiny_release), "--resume", run_id, "--rho", "1/100")
    assert code != 0 and "--resume" in err
    # editing the config file does not change what the resumed run reports: the saved configuration is used
    edit_config(tiny_release, {"budget.rho": "1/100"})
    code, out, err = cli(capsys, "release", str(tiny_release), "--resume", run_id)
    assert code == 0, err
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    assert manifest["privacy"]["rho_exact"] == "4" and manifest["random_source"]["publishable"] is False


def test_postprocess_takes_publishable_from_the_ledger_not_the_manifest(
        tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "release", str(tiny_release), "--no-prefect", "--insecure-seed", "4")
    manifest_path = Path(out) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["random_source"]["publishable"] = True  # an edited manifest
    manifest_path.write_text(json.dumps(manifest))
    code, again, _ = cli(capsys, "postprocess", out)
    assert code == 0
    assert json.loads((Path(again) / "manifest.json").read_text())["random_source"]["publishable"] is False
