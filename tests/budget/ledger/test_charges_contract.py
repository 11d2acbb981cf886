"""The privacy ledger's contract (``pipeline.budget.ledger.charges``), on both backends: what a charge records,
what is refused and how the refusal is worded, and how content fingerprints bind a budget to its data.

zCDP budgets add over every release on the same data (Thm 19.37(i)); a re-run is a further query (§19.7 pitfall),
so every charge is kept as an exact ``Fraction`` whatever its status, and the data's fingerprints, not the name a
configuration gives it, decide which lifetime cap pays.  Error messages are one line naming what is wrong, never a
value that could be data.
"""

from __future__ import annotations

import hashlib
import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from pipeline.budget.ledger.charges import (
    STATUSES,
    BudgetExceededError,
    Charge,
    FailureReason,
    PrivacyLedger,
    config_digest,
    config_hash,
)
from pipeline.dp.accounting import epsilon_cks20
from pipeline.errors import CensusDPError
from tests.helpers.ledgers import DELTA, HASH, charge, raw_rows

A, B, C = "a1" * 32, "b2" * 32, "c3" * 32  # fingerprints (keyed digests) of three pieces of data
OTHER_HASH = config_hash(b"another configuration")


def release(ledger: PrivacyLedger, run_id: str, rho: Fraction, fingerprints: dict[str, str], dataset: str = "pa",
            cap: Fraction | str = Fraction(1)) -> Charge:
    return ledger.charge_release(dataset, cap, fingerprints, run_id, rho, DELTA, HASH, True)


def fingerprint_rows(ledger_location: str) -> list[tuple[Any, ...]]:
    return raw_rows(ledger_location, "SELECT fingerprint, kind, dataset, first_run FROM censusdp_fingerprints "
                                     "ORDER BY fingerprint")


def one_line_naming(error: pytest.ExceptionInfo[BaseException], *names: str) -> str:
    text = str(error.value)
    assert "\n" not in text and text.startswith("ledger"), text
    for name in names:
        assert name in text, text
    return text


# --- what a charge records ----------------------------------------------------------------------------------


def test_every_field_of_a_charge_round_trips(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    ledger.ensure_dataset("nj", Fraction(2))
    first = ledger.charge("pa", "run-1", Fraction(1, 3), 1e-9, HASH, False)
    second = ledger.charge("nj", "run-2", Fraction(2, 7), 0.25, OTHER_HASH, True)
    assert (first.run_id, first.dataset, first.rho, first.delta, first.config_hash, first.status,
            first.publishable, first.reason, first.measurements) == (
        "run-1", "pa", Fraction(1, 3), 1e-9, HASH, "charged", False, None, None)
    assert first.epsilon == epsilon_cks20(Fraction(1, 3), 1e-9) and second.epsilon == epsilon_cks20(Fraction(2, 7),
                                                                                                    0.25)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", first.time), first.time
    assert first.time <= second.time
    assert ledger.charges() == [first, second]
    assert ledger.charges("pa") == [first] and ledger.charges("nj") == [second] and ledger.charges("zz") == []
    ledger.set_status("run-1", "failed", "input-validation:bad-geocode")
    ledger.record_measurements("run-1", "d4" * 32)
    [stored] = ledger.charges("pa")
    assert stored == Charge("run-1", "pa", first.time, Fraction(1, 3), 1e-9, first.epsilon, HASH, "failed", False,
                            "input-validation:bad-geocode", "d4" * 32)
    assert type(stored.rho) is Fraction and type(stored.publishable) is bool
    assert ledger.charge_of("run-2") == second and ledger.charge_of("run-1") == stored
    assert ledger.charge_of("run-3") is None


def test_charges_are_listed_oldest_first(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    for run_id in ("z", "b", "m", "a"):
        charge(ledger, run_id, Fraction(1, 8))
    assert [c.run_id for c in ledger.charges()] == ["z", "b", "m", "a"]


def test_budget_arithmetic_is_exact(ledger: PrivacyLedger) -> None:
    cap = Fraction(10**30 + 1, 3 * 10**29)
    ledger.ensure_dataset("pa", cap)
    spent = Fraction(0)
    for i, rho in enumerate([Fraction(1, 3), Fraction(10**29 + 7, 10**30), "1/7", 0, " 2/9 "]):
        c = charge(ledger, f"r{i}", rho)
        spent += Fraction(str(rho).strip())
        assert c.rho == Fraction(str(rho).strip())
        assert ledger.spent("pa") == spent and ledger.remaining("pa") == cap - spent
    with pytest.raises(BudgetExceededError) as info:
        charge(ledger, "over", cap - spent + Fraction(1, 10**40))
    assert (info.value.dataset, info.value.requested, info.value.remaining, info.value.cap) == (
        "pa", cap - spent + Fraction(1, 10**40), cap - spent, cap)
    charge(ledger, "exact", cap - spent)  # the cap itself is reachable
    assert ledger.remaining("pa") == 0


def test_a_duplicate_run_id_is_refused_before_the_budget_is_checked(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1))
    with pytest.raises(CensusDPError, match="already been charged") as info:
        charge(ledger, "r1", Fraction(1))  # over the cap too: the run id is what is wrong
    assert not isinstance(info.value, BudgetExceededError)


# --- refusals and their words -------------------------------------------------------------------------------


GOOD = {"dataset": "pa", "run_id": "r1", "rho": Fraction(1, 4), "delta": DELTA, "config_hash": HASH,
        "publishable": True}
INVALID_CHARGES: list[tuple[dict[str, Any], str]] = [
    ({"dataset": "row 17: age 42"}, "dataset id must be 1-200 characters"),
    ({"dataset": 17}, "dataset id must be"),
    ({"run_id": "-starts-with-a-dash"}, "run id must be 1-200 characters"),
    ({"run_id": "x" * 201}, "run id must be"),
    ({"rho": True}, "rho must be exact (a Fraction, int or string such as '1/4'), got bool"),
    ({"rho": 0.25}, "rho must be exact"),
    ({"rho": "1/0"}, "rho is not an exact rational number"),
    ({"rho": "one quarter"}, "rho is not an exact rational number"),
    ({"rho": Fraction(-1, 10**9)}, "rho must be >= 0"),
    ({"delta": "0.5"}, "delta must be a number in (0, 1)"),
    ({"delta": Fraction(1, 2)}, "delta must be a number in (0, 1)"),
    ({"delta": True}, "delta must be a number in (0, 1)"),
    ({"delta": 0}, "delta must be"),
    ({"delta": 1}, "delta must be"),
    ({"delta": -1e-10}, "delta must be"),
    ({"config_hash": 1234}, "config hash must be a lowercase hex digest"),
    ({"config_hash": b"ab" * 32}, "config hash must be"),
    ({"config_hash": HASH.upper()}, "config hash must be"),
    ({"publishable": None}, "publishable must be True or False"),
]


def test_invalid_charges_are_refused_naming_what_is_wrong(ledger: PrivacyLedger) -> None:
    """Through ``charge`` and ``charge_release`` alike."""
    ledger.ensure_dataset("pa", Fraction(1))
    for change, names in INVALID_CHARGES:
        args = GOOD | change
        with pytest.raises(CensusDPError) as info:
            ledger.charge(**args)
        one_line_naming(info, names)
        assert "row 17" not in str(info.value) and "age 42" not in str(info.value)  # ids are not echoed
        with pytest.raises(CensusDPError) as again:
            ledger.charge_release(args["dataset"], Fraction(1), {}, args["run_id"], args["rho"], args["delta"],
                                  args["config_hash"], args["publishable"])
        one_line_naming(again, names)
    assert ledger.charges() == [] and ledger.spent("pa") == 0 and ledger.datasets() == {"pa": 1}


VALID_CHARGES: list[dict[str, Any]] = [
    {"delta": 0.5}, {"delta": 1e-300}, {"delta": 1 - 1e-16}, {"rho": 0}, {"rho": "3"}, {"rho": 1},
    {"run_id": "a" * 200}, {"run_id": "2024-01-01T00:00:00Z.r+1@host_x"}, {"config_hash": "0123abcd"},
    {"publishable": False},
]


def test_valid_charges_at_the_boundaries(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(100))
    made = []
    for i, good in enumerate(VALID_CHARGES):
        args = GOOD | {"run_id": f"r{i}"} | good
        made.append(ledger.charge(**args))
        assert made[-1].delta == float(args["delta"]) and made[-1].rho == Fraction(args["rho"])
    assert ledger.charges() == made


INVALID_CAPS: list[tuple[Any, str]] = [
    (Fraction(0), "cap rho must be > 0, got 0"),
    ("-1/2", "cap rho must be > 0"),
    (0.5, "cap rho must be exact"),
    (True, "cap rho must be exact"),
    ("1/0", "cap rho is not an exact rational number"),
]


def test_invalid_caps_are_refused(ledger: PrivacyLedger) -> None:
    for cap, names in INVALID_CAPS:
        with pytest.raises(CensusDPError) as info:
            ledger.ensure_dataset("pa", cap)
        one_line_naming(info, names)
        with pytest.raises(CensusDPError) as info:
            release(ledger, "r1", Fraction(0), {"rows": A}, cap=cap)
        one_line_naming(info, names)
    assert ledger.datasets() == {} and ledger.charges() == []


def test_a_tiny_positive_cap_is_a_cap(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1, 10**50))
    ledger.ensure_dataset("nj", " 7/2 ")
    assert ledger.datasets() == {"nj": Fraction(7, 2), "pa": Fraction(1, 10**50)}
    with pytest.raises(CensusDPError) as info:
        ledger.ensure_dataset("pa", Fraction(2, 10**50))
    one_line_naming(info, "'pa'", "already has lifetime cap rho 1/100000000000000000000000000000000000000000000000000",
                    "not 1/50000000000000000000000000000000000000000000000000")


def test_ids_are_checked_naming_which_id(ledger: PrivacyLedger) -> None:
    for call, names in ((lambda: ledger.ensure_dataset("secret row 9", Fraction(1)), "dataset id must be 1-200"),
                        (lambda: ledger.bind("secret row 9", {"rows": A}), "dataset id must be 1-200"),
                        (lambda: ledger.set_status("secret row 9", "failed"), "run id must be 1-200"),
                        (lambda: ledger.record_measurements("secret row 9", "ab" * 32), "run id must be 1-200")):
        with pytest.raises(CensusDPError) as info:
            call()
        assert "secret" not in one_line_naming(info, names)


# --- statuses and failure reasons ----------------------------------------------------------------------------


def test_a_failure_reason_is_a_category(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 2))
    for reason in (None, "run-error", "input-validation", "input-validation:bad-geocode", "run-error:" + "x" * 40):
        ledger.set_status("r1", "failed", reason)
        [c] = ledger.charges()
        assert (c.status, c.reason, c.rho) == ("failed", reason, Fraction(1, 2))  # a status never refunds
        ledger.set_status("r1", "published")
        assert ledger.charges()[0].reason is None and ledger.spent("pa") == Fraction(1, 2)
    for reason in ("other", "run-error:", "Run-Error", "row 17", "run-error:age 42", "input-validation:bad:geocode",
                   "x:run-error", "run-error:" + "x" * 41, ""):
        with pytest.raises(CensusDPError) as info:
            ledger.set_status("r1", "failed", reason)
        text = one_line_naming(info, "a failure reason must be a FailureReason category")
        assert "17" not in text and "42" not in text
    assert ledger.charges()[0].status == "published"


def test_every_status_and_no_other(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 2))
    for status in STATUSES:
        ledger.set_status("r1", status)
        assert ledger.charge_of("r1").status == status  # type: ignore[union-attr]
    with pytest.raises(CensusDPError) as info:
        ledger.set_status("r1", "refunded")
    one_line_naming(info, "status must be one of charged, published, failed, postprocess, got 'refunded'")
    with pytest.raises(CensusDPError) as info:
        ledger.set_status("r2", "failed")
    one_line_naming(info, "no charge with run id 'r2'")
    assert {r.value for r in FailureReason} == {"input-validation", "run-error"}


def test_measurements_are_recorded_once(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 2))
    charge(ledger, "r2", Fraction(1, 4))
    ledger.record_measurements("r1", "ab" * 32)
    ledger.record_measurements("r1", "cd" * 32)  # never re-pointed to other measurements
    ledger.record_measurements("nobody", "ef" * 32)  # no such run: nothing happens
    assert [(c.run_id, c.measurements) for c in ledger.charges()] == [("r1", "ab" * 32), ("r2", None)]
    for digest in ("AB" * 32, "abc", "zz" * 32, ""):
        with pytest.raises(CensusDPError) as info:
            ledger.record_measurements("r2", digest)
        one_line_naming(info, "a measurements digest must be a lowercase hex digest")
    assert ledger.charge_of("r2").measurements is None  # type: ignore[union-attr]


# --- fingerprints: the data, not its name, decides which budget pays -------------------------------------------


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


def test_config_digest_is_canonical_and_keeps_no_password() -> None:
    raw = {"budget": {"rho": Fraction(1, 2), "delta": "1e-10"}, "input": {"path": Path("/data/x.parquet")},
           "ledger": {"path": "postgresql://alice:s3cret@db/ledger", "dataset": "pa"}}
    reordered = {"ledger": {"dataset": "pa", "path": "postgresql://alice:other@db/ledger"},
                 "input": {"path": Path("/data/x.parquet")}, "budget": {"delta": "1e-10", "rho": Fraction(1, 2)}}
    digest = config_digest(raw)
    assert re.fullmatch(r"[0-9a-f]{64}", digest) and config_digest(reordered) == digest
    public = {"budget": {"delta": "1e-10", "rho": "1/2"}, "input": {"path": "/data/x.parquet"},
              "ledger": {"dataset": "pa", "path": "postgresql://alice@db/ledger"}}
    assert digest == hashlib.sha256(json.dumps(public, sort_keys=True).encode()).hexdigest()
    assert config_digest(raw | {"budget": {"rho": Fraction(1, 3), "delta": "1e-10"}}) != digest
    assert raw["ledger"]["path"] == "postgresql://alice:s3cret@db/ledger"  # the caller's table is not changed

