"""The ledger's records of which data each dataset is: content fingerprints (``pipeline.io.fingerprint``).

A kind is the canonical form a digest was computed from (``rows-set``, ``lines-set``), perhaps with a universe prefix
(``units-rows-set``); data is found by any kind it shares with the ledger.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from censusdp.pipeline.budget.ledger.store import SQL
from censusdp.pipeline.errors import CensusDPError

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}")
HEX = re.compile(r"[0-9a-f]{8,128}")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def check_fingerprints(fingerprints: Mapping[str, str]) -> None:
    for kind, digest in fingerprints.items():
        if not isinstance(digest, str) or not HEX.fullmatch(digest) or not ID.fullmatch(kind):
            raise CensusDPError("ledger: a fingerprint must be a kind and a lowercase hex digest")


def record_fingerprints(sql: SQL, fingerprints: Mapping[str, str], dataset: str, first_run: str) -> None:
    """Bind each fingerprint to ``dataset`` unless it is bound already (never re-pointed: see the triggers)."""
    for kind, digest in fingerprints.items():
        sql("INSERT INTO censusdp_fingerprints (fingerprint, kind, dataset, first_run, created) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (fingerprint) DO NOTHING", (digest, kind, dataset, first_run, now()))

