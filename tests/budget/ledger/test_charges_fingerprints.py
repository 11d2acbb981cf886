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
    charge(ledger, "old", Fraction(1, 2))
    for fingerprints in ({"rows": A.upper()}, {"rows": "abc"}, {"rows": 12345}, {"no kind": A}, {"": A},
                         {"rows": A, "lines": "not hex"}):
        with pytest.raises(CensusDPError) as info:
            release(ledger, "r1", Fraction(1, 4), fingerprints)
        one_line_naming(info, "a fingerprint must be a kind and a lowercase hex digest")
    assert len(ledger.charges()) == 1


def test_the_fingerprint_key_is_made_once(ledger: PrivacyLedger, ledger_location: str, tmp_path: Path) -> None:
    key = ledger.fingerprint_key()
    assert isinstance(key, bytes) and len(key) == 32
    assert ledger.fingerprint_key() == key and PrivacyLedger(ledger_location).fingerprint_key() == key
    assert PrivacyLedger(tmp_path / "another.sqlite").fingerprint_key() != key
    assert raw_rows(ledger_location, "SELECT name, value FROM censusdp_keys") == [("fingerprint_key", key.hex())]


# --- the configuration a charge records --------------------------------------------------------------------------


