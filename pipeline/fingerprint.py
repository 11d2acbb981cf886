"""Keyed fingerprints of a dataset's content, so that the ledger charges the same data to the same budget.

The budget belongs to the people in the data, not to a file: a copy in another folder, under another name,
converted between CSV and Parquet, or with its rows shuffled is the same dataset and must not start a fresh
lifetime cap.  A release therefore computes, before its charge, an HMAC-SHA256 digest (key: 32 random bytes
kept in the ledger, ``PrivacyLedger.fingerprint_key``) of a canonical form of the microdata *file*:

- ``rows``: the sorted multiset of its rows, every column of a text, number or date type included (columns
  in name order, each value as text).  It does not depend on the configuration at all, so no choice of
  geocode columns, attributes, mappings or levels makes the same file look new; and matching it needs the
  whole file's content, so a crafted file of one's own cannot test a guess about a few people;
- ``lines`` (only for a CSV whose body does not parse): the sorted multiset of its raw lines.

Fingerprints are computed before any value is validated, so computing them never fails on bad values (which
would turn a refusal into a free query).  Without the key a digest reveals nothing about the content.

What it cannot catch: a subset or a sample of the data, a copy with records added, removed or edited, with
columns renamed, added or dropped, values re-coded (``01`` written as ``1``), or a ledger other than the
installation's.  Those are the data curator's responsibility (SECURITY.md).
"""

from __future__ import annotations

import hashlib
import hmac
from enum import StrEnum

import polars as pl

from pipeline.microdata import InputFiles

_NULL = "\x00"  # stands for a missing value; cannot occur in CSV text read by this package
_FIELD, _ROW = "\x1f", "\n"
_BATCH = 200_000


class FingerprintKind(StrEnum):
    ROWS = "rows"
    LINES = "lines"


def data_fingerprints(files: InputFiles, key: bytes) -> dict[str, str]:
    """The keyed fingerprints of the microdata file (kind -> hex digest), independent of path and row order."""
    frame = files.microdata
    if frame is None:  # a body that does not parse: its raw lines, in order-free form
        path = files.config.input.path
        assert path is not None
        lines = sorted(path.read_bytes().splitlines()[1:])
        mac = _mac(key, FingerprintKind.LINES)
        for line in lines:
            mac.update(line + _ROW.encode())
        return {FingerprintKind.LINES.value: mac.hexdigest()}
    # nested or binary columns have no text form: they are left out (a configuration never reads them)
    names = sorted(c for c, t in frame.schema.items() if not (t.is_nested() or t in (pl.Binary, pl.Object)))
    text = frame.select([pl.col(n).cast(pl.Utf8).fill_null(_NULL).alias(f"c{i}") for i, n in enumerate(names)])
    rows = text.group_by(text.columns).len().sort(text.columns)
    fields = [pl.lit(f"{n}=") + pl.col(f"c{i}") for i, n in enumerate(names)]
    lines_text = rows.select(pl.concat_str([*fields, pl.col("len").cast(pl.Utf8)], separator=_FIELD)).to_series()
    mac = _mac(key, FingerprintKind.ROWS)
    for start in range(0, len(lines_text), _BATCH):
        mac.update((_ROW.join(lines_text.slice(start, _BATCH).to_list()) + _ROW).encode())
    return {FingerprintKind.ROWS.value: mac.hexdigest()}


def _mac(key: bytes, kind: FingerprintKind) -> hmac.HMAC:
    return hmac.new(key, f"censusdp-fingerprint-v1:{kind.value}{_ROW}".encode(), hashlib.sha256)


def seeded_noise_secret(key: bytes, fingerprints: dict[str, str]) -> bytes:
    """What a seeded (test) source is bound to (``RandomSource.bind``): the ledger's key and the data's
    fingerprint, so the seed alone never reveals a release's noise."""
    material = "".join(f"{k}={v};" for k, v in sorted(fingerprints.items()))
    return hmac.new(key, f"censusdp-seeded-noise-v1:{material}".encode(), hashlib.sha256).digest()
