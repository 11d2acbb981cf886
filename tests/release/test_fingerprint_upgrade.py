"""The upgrade to streamed fingerprints (SECURITY.md): data a ledger knows by its legacy ``rows`` digest only is
charged to its own dataset by the new release, which records the streamed kind too; later releases, of the file
or of the same rows as a dataset folder, find it by the streamed kind alone."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.io.fingerprint import legacy_fingerprints
from censusdp.pipeline.io.microdata import read_input_files
from tests.helpers.datasets import write_hive_dataset
from tests.helpers.ledgers import raw_rows
from tests.helpers.releases import cli, release
from tests.helpers.tiny import TINY_TOML


def test_a_ledger_of_legacy_fingerprints_charges_the_same_data_after_the_upgrade(
        tiny_release: Path, installation_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    installation_ledger.parent.mkdir(parents=True, exist_ok=True)
    old = PrivacyLedger(installation_ledger)  # as the earlier release left it: the 'rows' digest only
    digests = legacy_fingerprints(read_input_files(load_config(tiny_release)), old.fingerprint_key())
    assert set(digests) == {"rows"}
    old.charge_release("tiny", Fraction(10), digests, "old-run", Fraction(4), 1e-10, "ab" * 32, True)
    assert old.needs_legacy_fingerprints()
    # the same data, configured as a fresh dataset with a big cap: found by its legacy digest, charged to 'tiny'
    evasive = TINY_TOML.format(rho="4").replace('dataset = "tiny"', 'dataset = "tiny-fresh"')
    tiny_release.write_text(evasive)
    code, _, err = release(capsys, tiny_release)
    assert code == 0, err
    assert [(c.dataset, c.rho) for c in old.charges()] == [("tiny", 4), ("tiny", 4)]
    kinds = sorted(k for (k,) in raw_rows(installation_ledger, "SELECT kind FROM censusdp_fingerprints"))
    assert kinds == ["rows", "rows-set"] and not old.needs_legacy_fingerprints()
    # now the streamed kind alone finds it, for the same rows split into a dataset folder too: 4 + 4 + 4 > 10
    folder = tiny_release.parent / "by-region"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                       pl.col("geocode").str.slice(0, 1))
    code, _, err = release(capsys, tiny_release, "--microdata", str(folder))
    assert code != 0 and "dataset 'tiny'" in err and "exceeds the remaining budget" in err, err
    assert len(old.charges()) == 2 and set(old.datasets()) == {"tiny"}


def test_a_dataset_folder_binds_a_dataset_of_before_fingerprints(
        tiny_release: Path, installation_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``censusdp ledger bind`` reads a dataset folder like a release does; the file it was split from is then
    charged to the bound dataset."""
    installation_ledger.parent.mkdir(parents=True, exist_ok=True)
    old = PrivacyLedger(installation_ledger)  # a dataset charged before fingerprints existed
    old.ensure_dataset("old", Fraction(6))
    old.charge("old", "old-run", Fraction(4), 1e-10, "cd" * 32, True)
    folder = tiny_release.parent / "by-region"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                       pl.col("geocode").str.slice(0, 1))
    code, _, err = cli(capsys, "ledger", "bind", "old", str(tiny_release), "--microdata", str(folder))
    assert code == 0, err
    kinds = sorted(k for (k,) in raw_rows(installation_ledger, "SELECT kind FROM censusdp_fingerprints"))
    assert kinds == ["rows-set", "rows-set-with-paths"]
    code, _, err = release(capsys, tiny_release)  # the single file: 4 + 4 > 6 on 'old'
    assert code != 0 and "dataset 'old'" in err and "exceeds the remaining budget" in err, err
