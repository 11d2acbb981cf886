"""Content fingerprints bind a budget to its data (``pipeline.budget.ledger.charges``), on both backends: the data,
not the name a configuration gives it, decides which lifetime cap pays (zCDP budgets add over every release on the
same data, Thm 19.37(i))."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.budget.ledger.charges import BudgetExceededError, PrivacyLedger
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.ledgers import A, B, C, charge, fingerprint_rows, one_line_naming, raw_rows, release


def test_new_data_registers_its_dataset_and_binds_its_fingerprints(ledger: PrivacyLedger,
                                                                    ledger_location: str) -> None:
    c = release(ledger, "r1", Fraction(1, 4), {"rows": A, "lines": B}, cap="3/4")
    assert (c.dataset, c.run_id, c.rho, c.status) == ("pa", "r1", Fraction(1, 4), "charged")
    assert ledger.datasets() == {"pa": Fraction(3, 4)} and ledger.charges() == [c]
    assert fingerprint_rows(ledger_location) == [(A, "rows", "pa", "r1"), (B, "lines", "pa", "r1")]
    assert ledger.unbound_datasets() == []


def test_known_data_under_another_name_pays_from_its_own_dataset(ledger: PrivacyLedger,
                                                                 ledger_location: str) -> None:
    release(ledger, "r1", Fraction(1, 2), {"rows": A}, dataset="pa", cap=Fraction(1))
    # the same rows, read from another file (another "lines" digest), configured as a new dataset with a big cap
    c = release(ledger, "r2", Fraction(1, 4), {"rows": A, "lines": C}, dataset="fresh", cap=Fraction(100))
    assert c.dataset == "pa" and ledger.charge_of("r2") == c
    assert ledger.datasets() == {"pa": 1} and ledger.spent("pa") == Fraction(3, 4)
    assert fingerprint_rows(ledger_location) == [(A, "rows", "pa", "r1"), (C, "lines", "pa", "r2")]
    with pytest.raises(BudgetExceededError) as info:  # pa's cap applies, not the configured one
        release(ledger, "r3", Fraction(1, 2), {"lines": C}, dataset="fresh", cap=Fraction(100))
    assert (info.value.dataset, info.value.remaining, info.value.cap) == ("pa", Fraction(1, 4), 1)
    assert len(ledger.charges()) == 2


def test_data_matching_two_datasets_is_refused(ledger: PrivacyLedger, ledger_location: str) -> None:
    release(ledger, "r1", Fraction(1, 8), {"rows": A}, dataset="zz")
    release(ledger, "r2", Fraction(1, 8), {"rows": B}, dataset="mm")
    with pytest.raises(CensusDPError) as info:
        release(ledger, "r3", Fraction(1, 8), {"rows": A, "lines": B}, dataset="new")
    one_line_naming(info, "this data matches datasets 'mm' and 'zz'", "nothing was charged")
    assert [c.run_id for c in ledger.charges()] == ["r1", "r2"] and set(ledger.datasets()) == {"zz", "mm"}
    assert len(fingerprint_rows(ledger_location)) == 2


def test_a_refused_release_records_nothing(ledger: PrivacyLedger, ledger_location: str) -> None:
    with pytest.raises(BudgetExceededError):
        release(ledger, "r1", Fraction(2), {"rows": A}, cap=Fraction(1))
    assert ledger.datasets() == {} and ledger.charges() == [] and fingerprint_rows(ledger_location) == []
    release(ledger, "r1", Fraction(1), {"rows": A}, cap=Fraction(1))
    with pytest.raises(CensusDPError, match="already been charged"):
        release(ledger, "r1", Fraction(0), {"rows": B}, dataset="other")
    assert fingerprint_rows(ledger_location) == [(A, "rows", "pa", "r1")] and set(ledger.datasets()) == {"pa"}


def test_an_existing_dataset_keeps_its_cap(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    with pytest.raises(CensusDPError) as info:
        release(ledger, "r1", Fraction(1, 4), {"rows": A}, cap=Fraction(2))
    one_line_naming(info, "'pa' already has lifetime cap rho 1, not 2")
    c = release(ledger, "r1", Fraction(1, 4), {"rows": A}, cap="2/2")
    assert c.dataset == "pa" and ledger.datasets() == {"pa": 1}


def test_malformed_fingerprints_are_refused(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "old", Fraction(1, 2))  # an unbound dataset, for bind
    for fingerprints in ({"rows": A.upper()}, {"rows": "abc"}, {"rows": 12345}, {"no kind": A}, {"": A},
                         {"rows": A, "lines": "not hex"}):
        for call in (lambda: release(ledger, "r1", Fraction(1, 4), fingerprints),  # noqa: B023 - called at once
                     lambda: ledger.bind("pa", fingerprints)):  # noqa: B023
            with pytest.raises(CensusDPError) as info:
                call()
            one_line_naming(info, "a fingerprint must be a kind and a lowercase hex digest")
    assert len(ledger.charges()) == 1 and ledger.unbound_datasets() == ["pa"]


# --- datasets charged before fingerprints: bind ----------------------------------------------------------------


def test_unbound_datasets_block_new_data_until_bound(ledger: PrivacyLedger, ledger_location: str) -> None:
    ledger.ensure_dataset("old-b", Fraction(1))
    ledger.ensure_dataset("old-a", Fraction(1))
    ledger.ensure_dataset("never-charged", Fraction(1))
    ledger.ensure_dataset("free-only", Fraction(1))
    charge(ledger, "b1", Fraction(1, 2), dataset="old-b")
    charge(ledger, "a1", Fraction(1, 2), dataset="old-a")
    charge(ledger, "f1", Fraction(0), dataset="free-only")  # post-processing spends nothing: no data to bind
    assert ledger.unbound_datasets() == ["old-a", "old-b"]
    with pytest.raises(CensusDPError) as info:
        release(ledger, "r1", Fraction(1, 4), {"rows": A}, dataset="new")
    one_line_naming(info, "(old-a, old-b) must first be bound", "nothing was charged")
    assert "new" not in ledger.datasets()
    ledger.bind("old-a", {"rows": A, "lines": B})
    assert fingerprint_rows(ledger_location) == [(A, "rows", "old-a", "bind"), (B, "lines", "old-a", "bind")]
    assert ledger.unbound_datasets() == ["old-b"]
    c = release(ledger, "r1", Fraction(1, 4), {"rows": A}, dataset="new")  # bound data is charged meanwhile
    assert c.dataset == "old-a" and ledger.spent("old-a") == Fraction(3, 4)
    with pytest.raises(CensusDPError, match=r"\(old-b\) must first be bound"):
        release(ledger, "r2", Fraction(1, 4), {"rows": C}, dataset="new")
    ledger.bind("old-b", {"rows": C})
    assert ledger.unbound_datasets() == []
    assert release(ledger, "r2", Fraction(1, 4), {"rows": "d4" * 32}, dataset="new").dataset == "new"


def test_bind_is_refused_for_data_of_another_dataset(ledger: PrivacyLedger) -> None:
    release(ledger, "r1", Fraction(1, 4), {"rows": A}, dataset="bound")
    ledger.ensure_dataset("old", Fraction(1))
    charge(ledger, "o1", Fraction(1, 4), dataset="old")
    with pytest.raises(CensusDPError) as info:
        ledger.bind("old", {"lines": B, "rows": A})
    one_line_naming(info, "this data is already dataset 'bound'", "nothing was bound")
    assert ledger.unbound_datasets() == ["old"]
    with pytest.raises(CensusDPError) as info:
        ledger.bind("bound", {"rows": B})
    one_line_naming(info, "dataset 'bound' is not waiting to be bound", "nothing was bound")
    with pytest.raises(CensusDPError) as info:
        ledger.bind("nobody", {"rows": B})
    one_line_naming(info, "unknown dataset 'nobody'")


def test_bind_accepts_the_datasets_own_fingerprint_of_an_older_kind(ledger: PrivacyLedger,
                                                                    ledger_location: str) -> None:
    """A fingerprint of a retired kind does not bind a dataset, but it is the dataset's own: binding with it is no
    conflict, and it stays as it was (never re-pointed)."""
    release(ledger, "r1", Fraction(1, 4), {"rows-v0": A}, dataset="old")
    assert ledger.unbound_datasets() == ["old"]
    ledger.bind("old", {"rows-v0": A, "rows": B})
    assert ledger.unbound_datasets() == []
    assert fingerprint_rows(ledger_location) == [(A, "rows-v0", "old", "r1"), (B, "rows", "old", "bind")]


def test_the_fingerprint_key_is_made_once(ledger: PrivacyLedger, ledger_location: str, tmp_path: Path) -> None:
    key = ledger.fingerprint_key()
    assert isinstance(key, bytes) and len(key) == 32
    assert ledger.fingerprint_key() == key and PrivacyLedger(ledger_location).fingerprint_key() == key
    assert PrivacyLedger(tmp_path / "another.sqlite").fingerprint_key() != key
    assert raw_rows(ledger_location, "SELECT name, value FROM censusdp_keys") == [("fingerprint_key", key.hex())]


# --- the configuration a charge records --------------------------------------------------------------------------


