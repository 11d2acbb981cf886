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
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from censusdp.pipeline.budget.ledger.charges import (
    BudgetExceededError,
    Charge,
    ChargeStatus,
    FailureReason,
    PrivacyLedger,
    config_digest,
)
from censusdp.pipeline.dp.accounting import epsilon_cks20
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.ledgers import DELTA, HASH, OTHER_HASH, A, charge, one_line_naming, release

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
    ({"rho": True},
     "ledger: rho: must be exact (a Fraction, an integer or a string such as '0.5', '1/4' or '1e-3'), got bool"),
    ({"rho": 0.25}, "ledger: rho: must be exact"),
    ({"rho": "1/0"}, "ledger: rho: not an exact number"),
    ({"rho": "one quarter"}, "ledger: rho: not an exact number"),
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
    (0.5, "ledger: cap rho: must be exact"),
    (True, "ledger: cap rho: must be exact"),
    ("1/0", "ledger: cap rho: not an exact number"),
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
    assert [s.value for s in ChargeStatus] == ["charged", "published", "failed", "postprocess"]
    for status in (*ChargeStatus, "published"):  # a member or its word
        ledger.set_status("r1", status)
        read = ledger.charge_of("r1").status  # type: ignore[union-attr]
        assert read == status and type(read) is ChargeStatus
    with pytest.raises(CensusDPError) as info:
        ledger.set_status("r1", "refunded")
    one_line_naming(info, "status must be one of charged, published, failed, postprocess, got 'refunded'")
    with pytest.raises(CensusDPError) as info:
        ledger.set_status("r2", "failed")
    one_line_naming(info, "no charge with run id 'r2'")
    assert {r.value for r in FailureReason} == {"input-validation", "run-error"}


def test_a_charge_reads_the_cap_under_the_row_lock(ledger: PrivacyLedger, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap is read with the store's row lock (PostgreSQL: FOR UPDATE) by every charge, so that two charges
    cannot both see the same spent budget; shown by a marker in place of the lock clause."""
    store, seen = ledger._store, []
    monkeypatch.setattr(store, "lock_suffix", " /* row lock */")
    transaction = store.transaction

    @contextmanager
    def recording(write: bool = True) -> Iterator[Any]:
        with transaction(write) as sql:
            yield lambda query, params=(): seen.append(query) or sql(query, params)

    monkeypatch.setattr(store, "transaction", recording)
    release(ledger, "r1", Fraction(1, 4), {"rows": A}, dataset="nj")  # charge_release, then charge
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r2", Fraction(1, 8))
    locked = "SELECT cap_rho FROM censusdp_datasets WHERE id = ? /* row lock */"
    assert seen.count(locked) == 2 and (ledger.spent("nj"), ledger.spent("pa")) == (Fraction(1, 4), Fraction(1, 8))


def test_the_stored_status_words_are_the_enum() -> None:
    """The table's CHECK constraint (pipeline.budget.ledger.store) allows exactly the ChargeStatus words."""
    from censusdp.pipeline.budget.ledger.store import _DDL

    allowed = re.search(r"CHECK \(status IN \(([^)]*)\)\)", " ".join(_DDL))
    assert allowed is not None
    assert [w.strip(" '") for w in allowed.group(1).split(",")] == [s.value for s in ChargeStatus]


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

