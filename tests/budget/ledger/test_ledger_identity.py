"""The budget follows the data, not its file: one ledger per installation, keyed
content fingerprints, no credential in any written file, and a charge durable before the first noise draw."""

from __future__ import annotations

import json
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.fingerprint import data_fingerprints
from censusdp.pipeline.io.microdata import read_input_files
from censusdp.pipeline.release import stages
from tests.helpers.releases import cli, release
from tests.helpers.tiny import SHARED_DATA, TINY_TOML, tiny_microdata

CAPPED = TINY_TOML.format(rho="4").replace('cap_rho = "1000"', 'cap_rho = "10"')


def copies_of_the_same_data(folder: Path) -> list[tuple[str, ...]]:
    """The tiny microdata moved, renamed, converted to CSV and shuffled: (CLI options) per copy."""
    micro = pl.read_parquet(folder / "microdata.parquet")
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    micro.write_parquet(elsewhere / "microdata.parquet")
    micro.write_parquet(elsewhere / "renamed-2020.parquet")
    shuffled = micro.sample(fraction=1.0, shuffle=True, seed=3)
    assert not shuffled.equals(micro)
    shuffled.write_csv(elsewhere / "as.csv")
    return [("--microdata", str(elsewhere / "microdata.parquet")),
            ("--microdata", str(elsewhere / "renamed-2020.parquet")),
            ("--microdata", str(elsewhere / "as.csv"), "--format", "csv")]


def test_the_default_ledger_is_the_installations_not_beside_the_data(
        tiny_release: Path, installation_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = release(capsys, tiny_release)
    assert code == 0, err
    assert not [p for p in tiny_release.parent.iterdir() if "ledger" in p.name]
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    assert manifest["ledger"]["location"] == str(installation_ledger) and installation_ledger.is_file()
    assert installation_ledger.stat().st_mode & 0o077 == 0, "the ledger (and its key) is readable by others"
    code, out, _ = cli(capsys, "ledger", "--json")
    assert code == 0 and json.loads(out)["ledger"] == str(installation_ledger)


@pytest.mark.parametrize("how", ["copied", "renamed", "as CSV, shuffled"])
def test_the_same_data_elsewhere_is_charged_to_the_same_budget(
        how: str, tiny_release: Path, ledger_location: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CENSUSDP_LEDGER", ledger_location)
    tiny_release.write_text(CAPPED)
    copy = copies_of_the_same_data(tiny_release.parent)[["copied", "renamed", "as CSV, shuffled"].index(how)]
    assert release(capsys, tiny_release)[0] == 0
    assert release(capsys, tiny_release, *copy)[0] == 0  # rho 8 of 10 spent
    # under another dataset id too: the data, not the id, decides which budget pays
    tiny_release.write_text(CAPPED.replace('dataset = "tiny"', 'dataset = "fresh-looking-id"'))
    code, _, err = release(capsys, tiny_release, *copy)
    assert code != 0 and "dataset 'tiny'" in err and "exceeds the remaining budget" in err
    ledger = PrivacyLedger(ledger_location)
    assert ledger.spent("tiny") == 8 and set(ledger.datasets()) == {"tiny"}


def test_known_data_under_another_id_is_charged_to_its_own_dataset(
        tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert release(capsys, tiny_release)[0] == 0
    copy = copies_of_the_same_data(tiny_release.parent)[2]
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('dataset = "tiny"', 'dataset = "other"'))
    code, out, err = release(capsys, tiny_release, *copy)
    assert code == 0, err
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    assert manifest["ledger"]["dataset"] == "tiny" and manifest["ledger"]["configured_dataset"] == "other"
    assert any("charged to 'tiny'" in w for w in manifest["warnings"])


def test_different_datasets_are_independent(tiny_release: Path, ledger_location: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CENSUSDP_LEDGER", ledger_location)
    tiny_release.write_text(CAPPED)
    other = tiny_release.parent / "other.parquet"
    tiny_microdata(seed=2)[0].write_parquet(other)
    assert release(capsys, tiny_release)[0] == 0
    assert release(capsys, tiny_release)[0] == 0
    tiny_release.write_text(CAPPED.replace('dataset = "tiny"', 'dataset = "tiny-2"'))
    assert release(capsys, tiny_release, "--microdata", str(other))[0] == 0
    assert release(capsys, tiny_release, "--microdata", str(other))[0] == 0
    ledger = PrivacyLedger(ledger_location)
    assert ledger.spent("tiny") == 8 and ledger.spent("tiny-2") == 8


def test_mdf_and_parquet_of_the_same_file_share_a_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    if not SHARED_DATA.exists():
        pytest.fail(f"the shared PPMF sample is missing: {SHARED_DATA}")
    text = "\n".join(line for line in preset_text("pl94").splitlines() if not line.startswith("geography = "))
    (tmp_path / "pl94.toml").write_text(text.replace('cap_rho = "10.24"', 'cap_rho = "4"'))
    parquet = tmp_path / "ppmf.parquet"
    pl.read_csv(SHARED_DATA, infer_schema=False).reverse().write_parquet(parquet)  # the MDF file as Parquet
    as_parquet = text.replace('geocode_column = "geocode"',
                              'geocode_columns = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]')
    (tmp_path / "parquet.toml").write_text(as_parquet.replace('cap_rho = "10.24"', 'cap_rho = "4"')
                                           .replace('dataset = "pl94-state"', 'dataset = "perry-parquet"'))
    first = release(capsys, tmp_path / "pl94.toml", "--microdata", str(SHARED_DATA), "--format", "mdf-pl94",
                    "--no-units", "--rho", "2")
    assert first[0] == 0, first[2]
    code, _, err = release(capsys, tmp_path / "parquet.toml", "--microdata", str(parquet), "--no-units", "--rho", "3")
    assert code != 0 and "dataset 'pl94-state'" in err and "exceeds the remaining budget" in err  # 2 + 3 > 4


def test_another_view_of_the_same_file_is_the_same_dataset(tiny_release: Path, installation_ledger: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The configuration cannot make the same file look new: other geocode columns, another level, another
    dataset id and cap (the attack of the hostile review)."""
    tiny_release.write_text(CAPPED)
    assert release(capsys, tiny_release)[0] == 0
    evasive = CAPPED.replace('dataset = "tiny"', 'dataset = "tiny-fresh"').replace('cap_rho = "10"',
                                                                                  'cap_rho = "1000000"')
    evasive = evasive.replace('format = "parquet"', 'format = "parquet"\ngeocode_columns = ["geocode", "ADULT"]')
    evasive = evasive.replace('geography = "geography.parquet"\n', "")  # units from the (5-character) codes
    tiny_release.write_text(evasive.replace("width = 4", "width = 5"))
    code, _, err = release(capsys, tiny_release)
    assert code == 0, err
    code, _, err = release(capsys, tiny_release)
    assert code != 0 and "dataset 'tiny'" in err and "exceeds the remaining budget" in err
    assert set(PrivacyLedger(installation_ledger).datasets()) == {"tiny"}


def test_fingerprints_ignore_order_format_and_configuration_and_see_content(tiny_release: Path) -> None:
    config = load_config(tiny_release)
    key, other_key = bytes(range(32)), bytes(range(1, 33))
    original = data_fingerprints(read_input_files(config), key)
    csv = tiny_release.parent / "shuffled.csv"
    pl.read_parquet(tiny_release.parent / "microdata.parquet").sample(fraction=1.0, shuffle=True, seed=1) \
        .write_csv(csv)
    converted = load_config(tiny_release, {"input.path": str(csv), "input.format": "csv"})
    assert data_fingerprints(read_input_files(converted), key) == original
    assert data_fingerprints(read_input_files(config), other_key) != original  # keyed
    other_view = load_config(tiny_release, {"input.geocode_columns": ["geocode", "ADULT"], "levels": [
        {"name": "root", "width": 0}, {"name": "region", "width": 1}, {"name": "district", "width": 2},
        {"name": "unit", "width": 5}]})
    assert data_fingerprints(read_input_files(other_view), key) == original  # the configuration plays no part
    edited = tiny_release.parent / "edited.parquet"
    frame = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    colours = frame["COLOUR"].to_list()
    colours[7] = "g" if colours[7] != "g" else "r"
    frame.with_columns(pl.Series("COLOUR", colours)).write_parquet(edited)
    changed = data_fingerprints(read_input_files(load_config(tiny_release, {"input.path": str(edited)})), key)
    assert changed != original
    assert all(len(d) == 64 and set(d) <= set("0123456789abcdef") for d in original.values())


def test_a_config_cannot_move_the_installations_ledger(tiny_release: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    installation = tmp_path / "installation.sqlite"
    monkeypatch.setenv("CENSUSDP_LEDGER", str(installation))
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('cap_rho = "1000"',
                                                              'cap_rho = "1000"\npath = "fresh.sqlite"'))
    code, _, err = release(capsys, tiny_release)
    assert code != 0 and "ledger.path" in err and "CENSUSDP_LEDGER" in err
    assert not (tiny_release.parent / "fresh.sqlite").exists()
    tiny_release.write_text(TINY_TOML.format(rho="4"))
    code, out, _ = release(capsys, tiny_release)
    assert code == 0 and json.loads((Path(out) / "manifest.json").read_text())["ledger"]["location"] == \
        str(installation)


class WatchedSource:
    """A seeded source that, at its first draw, records what a separate connection sees in the ledger."""

    can_draw = True

    def __init__(self, location: str) -> None:
        self._inner = seeded_random_source(1)
        self.name, self.publishable = self._inner.name, self._inner.publishable
        self.location, self.seen_at_first_draw = location, None

    def _look(self) -> None:
        if self.seen_at_first_draw is None:
            self.seen_at_first_draw = [(c.status, c.rho) for c in PrivacyLedger(self.location).charges()]

    def uniform_uint64(self, size: int) -> np.ndarray:
        self._look()
        return self._inner.uniform_uint64(size)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        self._look()
        return self._inner.uniform_below(bound, size)

    def bind(self, secret: bytes) -> None:
        self._inner.bind(secret)


def test_the_charge_is_committed_before_the_first_noise_draw(tiny_release: Path, ledger_location: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENSUSDP_LEDGER", ledger_location)
    source = WatchedSource(ledger_location)
    stages.run_release(load_config(tiny_release), tiny_release.parent / "runs", source)
    assert source.seen_at_first_draw == [("charged", Fraction(4))]
    if not ledger_location.startswith("postgresql"):
        store = PrivacyLedger(ledger_location)._store
        with store.transaction(write=False) as sql:  # the setting every ledger connection runs with
            assert sql("PRAGMA synchronous") == [(2,)]  # FULL
        with sqlite3.connect(ledger_location) as plain:
            assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_folder_of_copies_is_not_new_data(tiny_release: Path, installation_ledger: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset folder of links to one file, or of copies of it, would read each person k times (k times the
    counts, under a fingerprint never charged): refused at file level, uncharged; so is a pattern."""
    links, copies = tiny_release.parent / "links", tiny_release.parent / "copies"
    links.mkdir()
    copies.mkdir()
    for name in ("a.parquet", "b.parquet"):
        (links / name).symlink_to(tiny_release.parent / "microdata.parquet")
        shutil.copy(tiny_release.parent / "microdata.parquet", copies / name)
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('dataset = "tiny"', 'dataset = "tiny-v2"'))
    for target, refusal in ((links, "a.parquet: a symbolic link"), (copies, "b.parquet: has the same bytes as"),
                            (links / "*.parquet", "no such file")):
        code, _, err = release(capsys, tiny_release, "--microdata", str(target))
        assert code != 0 and refusal in err, err
    assert not installation_ledger.exists() or PrivacyLedger(installation_ledger).charges() == []


def test_a_value_with_no_text_form_does_not_refuse_before_the_charge(
        tiny_release: Path, installation_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_release.parent / "microdata.parquet"
    frame = pl.read_parquet(path)
    days = [0] * frame.height
    days[5] = 10**8  # a date polars cannot write as text
    frame.with_columns(pl.Series("BIRTH", days, dtype=pl.Int32).cast(pl.Date)).write_parquet(path)
    code, _, err = release(capsys, tiny_release)
    assert code == 0, err
    assert PrivacyLedger(installation_ledger).charges()[0].status == "published"
