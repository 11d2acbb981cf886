"""The persistent privacy-loss ledger: every release on a dataset spends its lifetime zCDP budget again.

Releases on the same data compose: rho adds (Thm 19.37(i)).  A re-run is a further query (§19.7 pitfall): every
release is charged, re-runs and failed runs included, BEFORE any noise is drawn, and nothing is refunded.  Only
post-processing from saved measurements is free (Thm 19.25; rho = 0, status "postprocess").  Storage: docs/ledger.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any

from censusdp.pipeline.budget.ledger.fingerprints import HEX as _HEX
from censusdp.pipeline.budget.ledger.fingerprints import ID as _ID
from censusdp.pipeline.budget.ledger.fingerprints import check_fingerprints as _check_fingerprints
from censusdp.pipeline.budget.ledger.fingerprints import now as _now
from censusdp.pipeline.budget.ledger.fingerprints import record_fingerprints as _record_fingerprints
from censusdp.pipeline.budget.ledger.store import SQL, Store, open_store
from censusdp.pipeline.config.ledger_location import public_config_raw
from censusdp.pipeline.dp.accounting import compose_zcdp, epsilon_cks20
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.exact import parse_rational

ID_PATTERN = _ID  # dataset and run ids; a run folder is named by its run id (cli/evaluate checks with it)
_FINGERPRINT_KEY = "fingerprint_key"


class ChargeStatus(StrEnum):
    """What became of a charged run (the ledger's ``status`` column; its CHECK constraint lists the same words)."""

    CHARGED = "charged"  # budget spent, nothing published yet (running, or stopped before publishing)
    PUBLISHED = "published"
    FAILED = "failed"  # the charge stands: budget is never refunded
    POSTPROCESS = "postprocess"  # a re-run of free post-processing (rho = 0)


class FailureReason(StrEnum):
    """Why a charged run failed, as recorded in the ledger: a category, never a row number or a value."""

    INPUT_VALIDATION = "input-validation"  # the microdata or geography failed a value check after the charge
    RUN_ERROR = "run-error"  # anything else (solver, disk, interrupted)


@dataclass(frozen=True)
class Charge:
    """One charge: ``rho`` spent on ``dataset`` by run ``run_id``; ``epsilon`` is its CKS20 conversion at ``delta``."""

    run_id: str
    dataset: str
    time: str  # UTC, ISO 8601
    rho: Fraction
    delta: float
    epsilon: float
    config_hash: str
    status: ChargeStatus
    publishable: bool
    reason: str | None = None  # a FailureReason category (and its detail category) for a failed run
    measurements: str | None = None  # SHA-256 of the noisy measurements the run drew (once all were saved)


class BudgetExceededError(CensusDPError):
    """A charge would take the dataset past its lifetime cap; the message carries public budget numbers only."""

    def __init__(self, dataset: str, requested: Fraction, remaining: Fraction, cap: Fraction) -> None:
        super().__init__(
            f"ledger: dataset {dataset!r}: requested rho {requested} exceeds the remaining budget "
            f"rho {remaining} (lifetime cap {cap}); nothing was charged and no noise was drawn"
        )
        self.dataset, self.requested, self.remaining, self.cap = dataset, requested, remaining, cap


def config_hash(text: bytes) -> str:
    """The SHA-256 hex digest of a configuration file's bytes (what the ledger records, never the file)."""
    return hashlib.sha256(text).hexdigest()


def config_digest(raw: dict[str, Any]) -> str:
    """What a charge records of its configuration: the hash of the table as applied (overrides included), in
    the form every run writes it (``public_config_raw``), so a run's recorded configuration can be checked."""
    return config_hash(json.dumps(public_config_raw(raw), sort_keys=True, default=str).encode())


class PrivacyLedger:
    """Lifetime zCDP budgets per dataset and every charge made against them, at a file path or ``postgresql://`` URL."""

    def __init__(self, location: str | Path) -> None:
        self._store: Store = open_store(location)

    @property
    def location(self) -> str:
        """Where the ledger lives (a PostgreSQL URL with any password removed)."""
        return self._store.display

    def ensure_dataset(self, dataset: str, cap_rho: Fraction) -> None:
        """Register ``dataset`` with lifetime cap ``cap_rho``; a no-op if it exists with the same cap, else an error."""
        _check_id(dataset, "dataset id")
        cap = _positive_cap(cap_rho)
        with self._store.transaction() as sql:
            self._register(sql, dataset, cap)

    def charge(self, dataset: str, run_id: str, rho: Fraction, delta: float, config_hash: str,
               publishable: bool) -> Charge:
        """Atomically charge ``rho`` to the registered ``dataset`` for run ``run_id``, before any noise is drawn;
        ``BudgetExceededError`` if spent + rho > cap.  A run id is charged once only (a release: ``charge_release``)."""
        entry = self._entry(dataset, run_id, rho, delta, config_hash, publishable)
        try:
            with self._store.transaction() as sql:
                self._insert_charge(sql, entry)
        except self._store.integrity_errors:  # the same run id inserted concurrently for another dataset
            raise _duplicate(run_id) from None
        return entry

    def charge_release(self, dataset: str, cap_rho: Fraction, fingerprints: Mapping[str, str], run_id: str,
                       rho: Fraction, delta: float, config_hash: str, publishable: bool) -> Charge:
        """Charge a release to the dataset its data belongs to, in one atomic step (a refusal records nothing).

        ``fingerprints`` (kind -> keyed digest, ``pipeline.io.fingerprint``) identify the data whatever its path,
        format or row order; if any is registered, that dataset and its cap are charged, whatever ``dataset`` names
        (``Charge.dataset`` says which), else ``dataset`` is registered with ``cap_rho`` if new.
        """
        _check_fingerprints(fingerprints)
        cap = _positive_cap(cap_rho)
        try:
            with self._store.transaction() as sql:
                self._lock_charges(sql)
                found: set[str] = set()
                for digest in fingerprints.values():
                    found.update(d for (d,) in sql("SELECT dataset FROM censusdp_fingerprints WHERE fingerprint = ?",
                                                   (digest,)))
                owners = sorted(found)
                if len(owners) > 1:
                    raise CensusDPError(f"ledger: this data matches datasets {owners[0]!r} and {owners[1]!r}; "
                                        "nothing was charged (a data curator must decide which it is)")
                target = owners[0] if owners else dataset
                entry = self._entry(target, run_id, rho, delta, config_hash, publishable)
                if not owners:
                    self._register(sql, dataset, cap)
                _record_fingerprints(sql, fingerprints, target, run_id)
                self._insert_charge(sql, entry)
        except self._store.integrity_errors:
            raise _duplicate(run_id) from None
        return entry

    def fingerprint_key(self) -> bytes:
        """The ledger's secret key for content fingerprints (32 random bytes, made once, never changed)."""
        with self._store.transaction() as sql:
            sql("INSERT INTO censusdp_keys (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                (_FINGERPRINT_KEY, secrets.token_hex(32)))
            (value,), = sql("SELECT value FROM censusdp_keys WHERE name = ?", (_FINGERPRINT_KEY,))
        return bytes.fromhex(value)

    def set_status(self, run_id: str, status: ChargeStatus, reason: str | None = None) -> None:
        """Record what became of a charged run; the charge itself stays (budget is never refunded).  ``reason`` (for
        a failed run) is a ``FailureReason``, optionally ``:`` and a category: never a value."""
        _check_id(run_id, "run id")
        if status not in set(ChargeStatus):
            raise CensusDPError(f"ledger: status must be one of {', '.join(ChargeStatus)}, got {status!r}")
        if reason is not None and (not _REASON.fullmatch(reason) or reason.split(":")[0] not in set(FailureReason)):
            raise CensusDPError("ledger: a failure reason must be a FailureReason category")
        with self._store.transaction() as sql:
            if not sql("SELECT 1 FROM censusdp_charges WHERE run_id = ?", (run_id,)):
                raise CensusDPError(f"ledger: no charge with run id {run_id!r}")
            sql("UPDATE censusdp_charges SET status = ?, reason = ? WHERE run_id = ?", (str(status), reason, run_id))

    def charges(self, dataset: str | None = None) -> list[Charge]:
        """Every charge (of ``dataset`` if given), oldest first."""
        query = ("SELECT run_id, dataset, charged_at, rho, delta, epsilon, config_hash, status, publishable, reason, "
                 "measurements FROM censusdp_charges")
        params: tuple[str, ...] = ()
        if dataset is not None:
            query, params = query + " WHERE dataset = ?", (dataset,)
        with self._store.transaction(write=False) as sql:
            rows = sql(query + " ORDER BY seq", params)
        return [Charge(r[0], r[1], r[2], Fraction(r[3]), float(r[4]), float(r[5]), r[6], ChargeStatus(r[7]),
                       bool(r[8]), r[9], r[10]) for r in rows]

    def record_measurements(self, run_id: str, digest: str) -> None:
        """Tie a charge to the measurements it drew (once): ``postprocess`` and ``--resume`` trust a run's
        publishable flag only for measurements whose digest the ledger holds, not for an edited run id."""
        _check_id(run_id, "run id")
        if not _HEX.fullmatch(digest):
            raise CensusDPError("ledger: a measurements digest must be a lowercase hex digest")
        with self._store.transaction() as sql:
            sql("UPDATE censusdp_charges SET measurements = ? WHERE run_id = ? AND measurements IS NULL",
                (digest, run_id))

    def charge_of(self, run_id: str) -> Charge | None:
        """The charge of run ``run_id``, whichever dataset it went to."""
        return next((c for c in self.charges() if c.run_id == run_id), None)

    def _entry(self, dataset: str, run_id: str, rho: Fraction, delta: float, config_hash: str,
               publishable: bool) -> Charge:
        _check_id(dataset, "dataset id")
        _check_id(run_id, "run id")
        amount = parse_rational(rho, "ledger: rho")
        if amount < 0:
            raise CensusDPError(f"ledger: rho must be >= 0, got {amount}")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
            raise CensusDPError(f"ledger: delta must be a number in (0, 1), got {delta!r}")
        if not isinstance(config_hash, str) or not _HEX.fullmatch(config_hash):
            raise CensusDPError("ledger: config hash must be a lowercase hex digest (see config_hash())")
        if not isinstance(publishable, bool):
            raise CensusDPError(f"ledger: publishable must be True or False, got {publishable!r}")
        return Charge(run_id, dataset, _now(), amount, float(delta), epsilon_cks20(amount, float(delta)),
                      config_hash, ChargeStatus.CHARGED, publishable)

    def _lock_charges(self, sql: SQL) -> None:
        """Serialise charges as a whole where the store needs it (``Store.charge_lock``)."""
        if self._store.charge_lock:
            sql(self._store.charge_lock)

    def _insert_charge(self, sql: SQL, entry: Charge) -> None:
        """Check the cap and insert, inside the caller's write transaction (the dataset row locked)."""
        cap = self._cap(sql, entry.dataset, lock=True)
        if sql("SELECT 1 FROM censusdp_charges WHERE run_id = ?", (entry.run_id,)):
            raise _duplicate(entry.run_id)
        spent = compose_zcdp(Fraction(r) for (r,) in sql(
            "SELECT rho FROM censusdp_charges WHERE dataset = ?", (entry.dataset,)))
        if spent + entry.rho > cap:
            raise BudgetExceededError(entry.dataset, entry.rho, cap - spent, cap)
        sql("INSERT INTO censusdp_charges (run_id, dataset, charged_at, rho, delta, epsilon, config_hash, "
            "status, publishable) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry.run_id, entry.dataset, entry.time, _frac(entry.rho), entry.delta, entry.epsilon,
             entry.config_hash, str(entry.status), int(entry.publishable)))

    def _register(self, sql: SQL, dataset: str, cap: Fraction) -> None:
        """Register ``dataset`` with ``cap`` unless it exists; an existing dataset's cap is never changed."""
        _check_id(dataset, "dataset id")
        sql("INSERT INTO censusdp_datasets (id, cap_rho, created) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
            (dataset, _frac(cap), _now()))
        existing = Fraction(sql("SELECT cap_rho FROM censusdp_datasets WHERE id = ?", (dataset,))[0][0])
        if existing != cap:
            raise CensusDPError(f"ledger: dataset {dataset!r} already has lifetime cap rho {existing}, "
                                f"not {cap}; a cap is never changed (a new dataset id is for new data only)")

    def spent(self, dataset: str) -> Fraction:
        """Total rho ever charged to ``dataset``, every status included (zCDP composition, Thm 19.37(i))."""
        with self._store.transaction(write=False) as sql:
            self._cap(sql, dataset)
            return compose_zcdp(Fraction(r) for (r,) in sql(
                "SELECT rho FROM censusdp_charges WHERE dataset = ?", (dataset,)))

    def remaining(self, dataset: str) -> Fraction:
        """cap - spent: the rho that later releases on ``dataset`` may still spend, in total."""
        with self._store.transaction(write=False) as sql:
            cap = self._cap(sql, dataset)
            spent = compose_zcdp(Fraction(r) for (r,) in sql(
                "SELECT rho FROM censusdp_charges WHERE dataset = ?", (dataset,)))
        return cap - spent

    def datasets(self) -> dict[str, Fraction]:
        """Every dataset id and its lifetime cap in rho."""
        with self._store.transaction(write=False) as sql:
            return {d: Fraction(c) for d, c in sql("SELECT id, cap_rho FROM censusdp_datasets ORDER BY id")}

    def _cap(self, sql: SQL, dataset: str, *, lock: bool = False) -> Fraction:
        rows = sql("SELECT cap_rho FROM censusdp_datasets WHERE id = ?" + (self._store.lock_suffix if lock else ""),
                   (dataset,))
        if not rows:
            raise CensusDPError(f"ledger: unknown dataset {dataset!r} (register it with its lifetime cap first)")
        return Fraction(rows[0][0])


_REASON = re.compile(r"[a-z-]{1,40}(:[a-z-]{1,40})?")


def _positive_cap(cap_rho: Fraction | int | str) -> Fraction:
    cap = parse_rational(cap_rho, "ledger: cap rho")
    if cap <= 0:
        raise CensusDPError(f"ledger: cap rho must be > 0, got {cap}")
    return cap


def _duplicate(run_id: str) -> CensusDPError:
    return CensusDPError(f"ledger: run id {run_id!r} has already been charged; a run is charged once only "
                         "(a re-run is a new run with a new id, and spends budget again)")


def _check_id(value: str, name: str) -> None:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise CensusDPError(f"ledger: {name} must be 1-200 characters of letters, digits and ._:@+- "
                            "starting with a letter or digit")


def _frac(value: Fraction) -> str:
    """The stored form of an exact budget: always "p/q"."""
    return f"{value.numerator}/{value.denominator}"
