"""When a release must still compute the legacy fingerprint kinds (``needs_legacy_fingerprints``), on both
backends: while some dataset, in some universe, has a legacy kind on record and no streamed one."""

from __future__ import annotations

from fractions import Fraction

import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from tests.helpers.ledgers import A, B, C, release

D, E = "d4" * 32, "e5" * 32


def test_a_fresh_ledger_needs_no_legacy_kind(ledger: PrivacyLedger) -> None:
    assert not ledger.needs_legacy_fingerprints()
    release(ledger, "r1", Fraction(1, 4), {"rows-set": A})
    assert not ledger.needs_legacy_fingerprints()


@pytest.mark.parametrize("legacy", ["rows", "lines"])
def test_a_dataset_known_by_a_legacy_kind_only_needs_it_until_it_has_a_streamed_one(
        ledger: PrivacyLedger, legacy: str) -> None:
    release(ledger, "old", Fraction(1, 4), {legacy: A})  # as a release before the streamed kinds recorded it
    release(ledger, "other", Fraction(1, 4), {"rows-set": B}, dataset="other")
    assert ledger.needs_legacy_fingerprints()
    release(ledger, "upgrade", Fraction(1, 4), {legacy: A, "lines-set": C}, dataset="renamed")  # found by A
    assert [c.dataset for c in ledger.charges()] == ["pa", "other", "pa"]
    assert not ledger.needs_legacy_fingerprints()


def test_each_universe_needs_its_streamed_kind(ledger: PrivacyLedger) -> None:
    """The units file's digests find the dataset too: its legacy kind stays needed until its own streamed one is
    on record, whatever the persons' file has."""
    release(ledger, "old", Fraction(1, 4), {"rows": A, "units-rows": B})
    release(ledger, "persons-only", Fraction(1, 4), {"rows": A, "rows-set": C})
    assert ledger.needs_legacy_fingerprints()
    release(ledger, "both", Fraction(1, 4), {"rows": A, "rows-set": C, "units-rows": B, "units-rows-set": D})
    assert not ledger.needs_legacy_fingerprints()
    release(ledger, "variant", Fraction(1, 4), {"rows-set": E, "rows-set-with-paths": "f6" * 32}, dataset="new")
    assert not ledger.needs_legacy_fingerprints()
