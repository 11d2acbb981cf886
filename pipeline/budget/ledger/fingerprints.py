"""The ledger's records of which data each dataset is: content fingerprints (``pipeline.io.fingerprint``).

A fingerprint kind is the canonical form a digest was computed from; a release's fingerprints may carry a
universe prefix (``units-rows-set``: the units universe's file of the same dataset).  Kinds come in two
generations: the legacy ones (``rows``, ``lines``: the whole dataset in memory) and the streamed ones
(``rows-set``, ``lines-set``).  Data is found by any kind it shares with the ledger, so the same data must be
fingerprinted with a kind the ledger holds for it: ``needs_legacy`` says when a legacy kind is still the only one
on record for some dataset (then a release computes both generations, and records both).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from censusdp.pipeline.budget.ledger.store import SQL
from censusdp.pipeline.errors import CensusDPError

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}")
HEX = re.compile(r"[0-9a-f]{8,128}")
LEGACY_KINDS = ("rows", "lines")
STREAMED_KINDS = ("rows-set", "lines-set")
CURRENT_KINDS = LEGACY_KINDS + STREAMED_KINDS  # pipeline.io.fingerprint.FingerprintKind: older kinds never match
UNIVERSE_PREFIXES = ("", "units-")  # pipeline.release.charging: the units universe's file's kinds


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def unbound(sql: SQL) -> list[str]:
    """Datasets charged before this ledger kept fingerprints (no fingerprint of a current kind)."""
    return [d for (d,) in sql(
        "SELECT id FROM censusdp_datasets d WHERE NOT EXISTS (SELECT 1 FROM censusdp_fingerprints f "
        f"WHERE f.dataset = d.id AND f.kind IN ({', '.join(repr(k) for k in CURRENT_KINDS)})) AND EXISTS "
        "(SELECT 1 FROM censusdp_charges c WHERE c.dataset = d.id AND c.rho <> '0/1') ORDER BY id")]


def needs_legacy(sql: SQL) -> bool:
    """Whether some dataset has, for some universe, a legacy kind on record and no streamed one: only a legacy
    digest finds that data, so a release must compute the legacy kinds too (else the data would look new and
    get a fresh lifetime cap)."""
    kinds: dict[str, set[str]] = {}
    for dataset, kind in sql("SELECT dataset, kind FROM censusdp_fingerprints"):
        kinds.setdefault(dataset, set()).add(kind)
    return any(any(p + k in recorded for k in LEGACY_KINDS) and not any(p + k in recorded for k in STREAMED_KINDS)
               for recorded in kinds.values() for p in UNIVERSE_PREFIXES)


def check_fingerprints(fingerprints: Mapping[str, str]) -> None:
    for kind, digest in fingerprints.items():
        if not isinstance(digest, str) or not HEX.fullmatch(digest) or not ID.fullmatch(kind):
            raise CensusDPError("ledger: a fingerprint must be a kind and a lowercase hex digest")


def record_fingerprints(sql: SQL, fingerprints: Mapping[str, str], dataset: str, first_run: str) -> None:
    """Bind each fingerprint to ``dataset`` unless it is bound already (never re-pointed: see the triggers)."""
    for kind, digest in fingerprints.items():
        sql("INSERT INTO censusdp_fingerprints (fingerprint, kind, dataset, first_run, created) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (fingerprint) DO NOTHING", (digest, kind, dataset, first_run, now()))


def refuse_while_unbound(sql: SQL) -> None:
    """Data that matches no fingerprint may not be charged while the ledger holds datasets charged before
    fingerprints existed: any of them could be this very data under another name or id."""
    names = unbound(sql)
    if names:
        raise CensusDPError(f"ledger: datasets charged before this ledger kept fingerprints ({', '.join(names)}) "
                            "must first be bound to their data by a data curator (censusdp ledger bind DATASET "
                            "CONFIG --microdata FILE); nothing was charged")
