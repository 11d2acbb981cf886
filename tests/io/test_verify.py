"""``censusdp verify``: a real release keeps every promise; a copy of it with one promise broken is caught by the
matching rule, and the command exits 1 (2 for a missing or unreadable file)."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from censusdp.geography.levels import Level
from censusdp.pipeline.cli import main
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.options import random_source
from censusdp.pipeline.config.schema import Attribute, Schema
from censusdp.pipeline.io.verify import RuleCheck, RunFileError, persons_units_checks, verify_run
from censusdp.pipeline.release.stages import run_release
from censusdp.pipeline.synth.population import write_synthetic
from tests.helpers.configs import preset_config
from tests.helpers.releases import cli

LINE = re.compile(r"(\d+) violations  (.+)  \[(\w+)\]  \((\d+) checked\)")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A seeded release of 5,000 synthetic persons and their housing units with the pl94 preset (P1-P5, H1, the
    units' invariants and structural zeros, the persons-per-unit rules), charged to a ledger of its own."""
    folder = tmp_path_factory.mktemp("verify")
    files = write_synthetic(5000, 7, folder / "data")
    preset_config(folder / "pl94.toml", "pl94", {"ledger.cap_rho": "1000"}, files=files)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CENSUSDP_LEDGER", str(folder / "ledger.sqlite"))
        yield run_release(load_config(folder / "pl94.toml"), folder / "runs", random_source(5))


def broken(checks: list[RuleCheck]) -> set[tuple[str, str | None]]:
    return {(c.rule, c.level) for c in checks if c.violations}


def test_a_release_keeps_every_promise(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checks = verify_run(run)
    assert broken(checks) == set()
    rules = {c.rule for c in checks}
    for rule in ("persons: children sum to their parent", "units: structural zeros are 0",
                 "persons: invariant total equals its published value", "units: invariant hhgq equals its published "
                 "value", "pl94: P5 total <= P1 total", "pl94: H1 columns = sums of the units' cells they are defined "
                 "from", "households: no persons without units", "group quarters hhgq=3: at most max_persons per unit"):
        assert rule in rules
    assert all(c.checked > 0 for c in checks)
    code, out, _ = cli(capsys, "verify", str(run))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(checks) and all(LINE.fullmatch(line) for line in lines)


def test_a_run_folder_named_with_glob_characters_is_read_as_named(run: Path, tmp_path: Path) -> None:
    """``runs[2020]``: a file's name is a name, never a pattern."""
    copy = tmp_path / "runs[2020]" / "run*?"
    shutil.copytree(run, copy)
    checks = verify_run(copy)
    assert checks and not [c for c in checks if c.violations]


def rewrite(path: Path, change: Callable[[pl.DataFrame], pl.DataFrame]) -> None:
    """Replace a published table (a file or a folder of parts) by one file holding ``change`` of its rows."""
    frame = pl.read_parquet(path / "*.parquet" if path.is_dir() else path)
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    change(frame).write_parquet(path)


def first_row(column: str, value: Callable[[pl.Expr], pl.Expr]) -> Callable[[pl.DataFrame], pl.DataFrame]:
    return lambda frame: frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(value(pl.col(column))).otherwise(pl.col(column)).alias(column))


def occupied_units(frame: pl.DataFrame, times: int) -> pl.DataFrame:
    """The first block with occupied housing units: ``times`` as many (0: the row gone)."""
    occupied = (pl.col("hhgq") == "0") & (pl.col("occupancy") == "1")
    block = frame.filter(occupied)["geoid"][0]
    chosen = occupied & (pl.col("geoid") == block)
    return frame.with_columns(pl.when(chosen).then(pl.col("count") * times).otherwise(pl.col("count"))
                              .alias("count")).filter(~chosen | (pl.col("count") > 0))


def vacant_facility(frame: pl.DataFrame) -> pl.DataFrame:
    row = frame.head(1).with_columns(pl.lit("3").alias("hhgq"), pl.lit("2").alias("occupancy"),
                                     pl.lit(1, dtype=pl.Int64).alias("count"))
    return pl.concat([frame, row])


CORRUPTIONS = {  # a file of the run, what is done to it, and a rule that must report it
    "child": ("tables/block.parquet", first_row("count", lambda c: c + 1),
              ("persons: children sum to their parent", "block_group")),
    "negative": ("tables/tract.parquet", first_row("count", lambda c: -c),
                 ("persons: counts are non-negative integers", "tract")),
    "invariant": ("measurements/invariants.parquet", lambda f: f.with_columns(pl.col("value") + 1),
                  ("persons: invariant total equals its published value", "state")),
    "P1": ("tables/pl94/county.parquet", first_row("P1_003N", lambda c: c + 1),
           ("pl94: P1 columns = sums of the persons' cells they are defined from", "county")),
    "P1 row missing": ("tables/pl94/block.parquet", lambda f: f.sort("P1_001N", descending=True).slice(1),
                       ("pl94: P1 columns = sums of the persons' cells they are defined from", "block")),
    "H1": ("tables/pl94/tract.parquet", first_row("H1_002N", lambda c: c + 1),
           ("pl94: H1_001N = H1_002N + H1_003N", "tract")),
    "H1 from units": ("tables/pl94/tract.parquet", first_row("H1_001N", lambda c: c + 1),
                      ("pl94: H1 columns = sums of the units' cells they are defined from", "tract")),
    "structural zero": ("units/tables/block.parquet", vacant_facility, ("units: structural zeros are 0", "block")),
    "more units": ("units/tables/block.parquet", lambda f: occupied_units(f, 1000),
                   ("households: at least min_persons per unit", "block")),
    "no units": ("units/tables/block.parquet", lambda f: occupied_units(f, 0),
                 ("households: no persons without units", "block")),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_broken_promise_is_caught(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    file, change, rule = CORRUPTIONS[name]
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    rewrite(copy / file, change)
    code, out, _ = cli(capsys, "verify", str(copy))
    assert code == 1
    reported = {(m[2], m[3]): int(m[1]) for m in map(LINE.fullmatch, out.splitlines()) if m}
    assert reported[rule] > 0, out


@pytest.mark.parametrize("damage", ["missing", "unreadable"])
def test_a_missing_or_unreadable_file_is_one_line_and_status_2(run: Path, tmp_path: Path, damage: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    table = copy / "tables" / "pl94" / "county.parquet"
    table.unlink() if damage == "missing" else table.write_bytes(b"not parquet")
    code, out, err = cli(capsys, "verify", str(copy))
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and str(table) in err
    assert main(["-q", "verify", str(tmp_path / "nowhere")]) == 2


def test_persons_units_rules_count_each_node_once() -> None:
    """A rule given as an object (the hook works on anything with the rule's fields): per node, persons with no
    units, fewer than min per unit, or more than max per unit; nodes absent from a table hold zeros."""
    rule = SimpleNamespace(name="households", persons=(("hhgq", ("0",)),), units=(("hhgq", ("0",)), ("occ", ("1",))),
                           min_persons=1, max_persons=3, levels=("block",))
    hhgq, occ = Attribute("hhgq", "hhgq", ("0", "1")), Attribute("occ", "occ", ("1", "2"))
    config = SimpleNamespace(levels=(Level("root", 0), Level("block", 2)), persons_per_unit=(rule,),
                             schema=Schema((hhgq,)), units=SimpleNamespace(schema=Schema((hhgq, occ))))
    # the long form's cells: a person's hhgq; a unit's (hhgq, occ) in C order
    persons = pl.DataFrame({"geoid": ["01", "01", "02", "03", "04", "05"], "_cell": [0, 1, 0, 0, 0, 0],
                            "count": [2, 9, 5, 1, 4, 3]})
    units = pl.DataFrame({"geoid": ["01", "03", "03", "04", "05", "06"], "_cell": [0, 0, 1, 0, 2, 0],
                          "count": [1, 2, 7, 1, 1, 1]})
    # 01: 2 persons, 1 unit (ok); 02: 5 persons, no unit; 03: 1 person, 2 units (too few); 04: 4 persons,
    # 1 unit (too many); 05: 3 persons, its only unit of another type (none); 06: a unit, nobody (too few)
    checks = persons_units_checks(config, {"block": persons}, {"block": units})  # type: ignore[arg-type]
    assert [(c.rule, c.level, c.checked, c.violations) for c in checks] == [
        ("households: no persons without units", "block", 6, 2),
        ("households: at least min_persons per unit", "block", 6, 2),
        ("households: at most max_persons per unit", "block", 6, 1)]
    assert persons_units_checks(SimpleNamespace(levels=config.levels), {}, {}) == []  # type: ignore[arg-type]


def as_tuples(checks: list[RuleCheck]) -> list[tuple[str, str, int, int]]:
    return sorted((c.rule, c.level or "", c.checked, c.violations) for c in checks)


def regrouped(path: Path, *, shuffle: bool) -> None:
    """Rewrite a published table as one file of 40 row groups, its rows in code order or in a random order (a
    range's row groups are then scattered, and every range reads most of them)."""
    frame = pl.read_parquet(path / "*.parquet" if path.is_dir() else path)
    code = "GEOID" if "GEOID" in frame.columns else "geoid"
    frame = frame.sample(fraction=1.0, shuffle=True, seed=3) if shuffle else frame.sort(code, nulls_last=False)
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    frame.write_parquet(path, row_group_size=max(1, frame.height // 40))


LOWER_TABLES = ("tables/block.parquet", "tables/block_group.parquet", "units/tables/block.parquet",
                "tables/pl94/block.parquet", "measurements/invariants.parquet")


@pytest.mark.parametrize("shuffle", [False, True])
def test_ranges_of_codes_give_the_counts_of_one_range(run: Path, tmp_path: Path, shuffle: bool) -> None:
    """Checked a few hundred rows at a time (many ranges at the lower levels), a run gives the checks it gives read
    whole, rule by rule, the items checked and the violations alike: the run as published, and a copy with broken
    promises whose lower tables are in row groups in code order, or shuffled."""
    from censusdp.pipeline.io.verify_ranges import IndexedTable, code_ranges

    whole = verify_run(run, bucket_rows=1 << 40)
    assert verify_run(run) == whole  # the default: this small run in one range
    assert as_tuples(verify_run(run, bucket_rows=300)) == as_tuples(whole)
    # the levels apart, each job sent to another process (a release's workers): the same checks
    elsewhere = verify_run(run, map_levels=lambda check, jobs: [check(pickle.loads(pickle.dumps(job))) for job in jobs])
    assert elsewhere == whole
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    names = ("child", "P1 row missing", "more units", "structural zero")
    for name in names:
        file, change, _ = CORRUPTIONS[name]
        rewrite(copy / file, change)
    for table in LOWER_TABLES:
        regrouped(copy / table, shuffle=shuffle)
    assert len(code_ranges(IndexedTable([copy / "tables/block.parquet"], "geoid"), 12, 300)) > 1
    broken_whole = verify_run(copy, bucket_rows=1 << 40)
    assert {(c.rule, c.level) for c in broken_whole if c.violations} >= {CORRUPTIONS[name][2] for name in names}
    assert as_tuples(verify_run(copy, bucket_rows=300)) == as_tuples(broken_whole)


def test_a_range_reads_only_row_groups_that_hold_its_codes(tmp_path: Path) -> None:
    """Which codes a row group holds is read from its rows (a footer's statistics are not trusted), and a range
    keeps exactly its codes, the first one also the rows without a code."""
    from censusdp.pipeline.io.verify_ranges import IndexedTable, code_ranges

    path = tmp_path / "table.parquet"
    codes = ["0101", "0102", None, "0201", "0202", "0301", "0302", "0401"]
    pl.DataFrame({"geoid": codes, "count": list(range(8))}).write_parquet(path, row_group_size=2)
    table = IndexedTable([path], "geoid")
    assert [(c.least, c.greatest, c.nulls) for c in table.codes] == [
        ("0101", "0102", False), ("0201", "0201", True), ("0202", "0301", False), ("0302", "0401", False)]
    ranges = code_ranges(table, 2, bucket_rows=3)
    assert ranges[0][0] is None and ranges[-1][1] is None and all(len(b) == 2 for r in ranges for b in r if b)
    seen = [table.read(["geoid", "count"], lo, hi)["count"].to_list() for lo, hi in ranges]
    assert sorted(n for part in seen for n in part) == list(range(8))  # every row once
    assert 2 in seen[0]  # the row without a code: the first range's
    for (lo, hi), part in zip(ranges, seen, strict=True):
        assert all((lo is None or codes[n] >= lo) and (hi is None or codes[n] < hi) for n in part if codes[n])
        families = {codes[n][:2] for n in part if codes[n]}
        assert all(not any(codes[m] and codes[m][:2] == f for m in range(8) if m not in part) for f in families)
    assert table.read(["count"], "", "").height == 0  # the empty range


def test_codes_of_any_type_are_ranged_as_the_checks_read_them(run: Path, tmp_path: Path) -> None:
    """A hostile review's cases: geoids stored as floats (text "1.0" to the checks) index and filter alike, so
    small ranges hide no row; a manifest without node counts takes them from the tables; and a folder whose parts
    differ in their columns, or a table whose geoids do not read as text, is unreadable (exit 2), not checked."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    county = pl.read_parquet(copy / "tables/county.parquet")
    first = pl.int_range(pl.len()) < county.height // 2
    county = county.with_columns(pl.when(first).then(1.0).otherwise(1.5).alias("geoid"),
                                 pl.when(first).then(-5).otherwise(pl.col("count")).alias("count"))
    county.write_parquet(copy / "tables/county.parquet", row_group_size=10)
    manifest = json.loads((copy / "manifest.json").read_text())
    for level in manifest["levels"]:
        level.pop("nodes", None)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    whole = verify_run(copy, bucket_rows=1 << 40)
    negative = next(c for c in whole if c.rule == "persons: counts are non-negative integers" and c.level == "county")
    assert negative.violations == county.height // 2
    for rows in (1, 7):
        assert as_tuples(verify_run(copy, bucket_rows=rows)) == as_tuples(whole)
    parts = copy / "tables/block.parquet"
    frame = pl.read_parquet(parts / "*.parquet" if parts.is_dir() else parts)
    shutil.rmtree(parts) if parts.is_dir() else parts.unlink()
    parts.mkdir()
    frame.head(10).write_parquet(parts / "part-000000.parquet")
    frame.slice(10).with_columns(pl.col("count").cast(pl.Float64)).write_parquet(parts / "part-000001.parquet")
    with pytest.raises(RunFileError, match="block.parquet"):
        verify_run(copy)
    binary = run / "tables/tract.parquet"
    shutil.rmtree(parts)
    frame.write_parquet(parts)
    pl.read_parquet(binary).with_columns(pl.col("geoid").cast(pl.Binary) + b"\xff").write_parquet(
        copy / "tables/tract.parquet")
    for rows in (1 << 40, 7):
        with pytest.raises(RunFileError):
            verify_run(copy, bucket_rows=rows)
