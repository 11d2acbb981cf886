"""Keyed fingerprints of a dataset's content, so that the ledger charges the same data to the same budget.

The budget belongs to the people in the data, not to a file: a copy in another folder, under another name,
converted from CSV to Parquet or MDF, or with its rows shuffled is the same dataset and must not start a fresh
lifetime cap.  A release therefore computes, before its charge, HMAC-SHA256 digests (key: 32 random bytes kept
in the ledger, ``PrivacyLedger.fingerprint_key``) of two canonical forms of its content:

- ``records``: the sorted histogram of (lowest-level unit code, each attribute's value after the configured
  mapping), i.e. the detailed histogram in the configuration's own terms;
- ``units``: the sorted count of persons per lowest-level unit code, which does not depend on the attributes,
  so the same people released under another schema (an attribute dropped, values regrouped) are recognised.

Both are built from the values as read, before any value-level validation, so computing them never fails on bad
values (which would turn a refusal into a free query).  Without the key a digest reveals nothing about the
content; with it, it can only confirm a guess of the *entire* dataset (or of every unit's count).

What it cannot catch: a subset or a sample of the data, a copy with records added, removed or edited (unless
every unit's count is unchanged), a re-coding of the geography (other unit codes), or a ledger other than the
installation's.  Those are the data curator's responsibility (SECURITY.md).
"""

from __future__ import annotations

import hashlib
import hmac
from enum import StrEnum

import polars as pl

from pipeline.microdata import InputFiles, geocode_columns

_NULL = "\x00"  # stands for a missing value; cannot occur in CSV text read by this package
_FIELD, _ROW = "\x1f", "\n"
_BATCH = 200_000


class FingerprintKind(StrEnum):
    RECORDS = "records"
    UNITS = "units"


def data_fingerprints(files: InputFiles, key: bytes) -> dict[str, str]:
    """The keyed fingerprints of ``files.microdata`` (kind -> hex digest), independent of path and row order."""
    config, frame = files.config, files.microdata
    attributes = sorted(config.schema.attributes, key=lambda a: a.name)
    code = pl.concat_str([_text(c) for c in geocode_columns(config)]).alias("code")
    keys = frame.select([code] + [_text(a.column, a.mapping).alias(f"a{j}") for j, a in enumerate(attributes)])
    records = keys.group_by(keys.columns).len().sort(keys.columns)
    fields = [pl.col("code")] + [pl.lit(f"{a.name}=") + pl.col(f"a{j}") for j, a in enumerate(attributes)]
    record_lines = records.select(pl.concat_str([*fields, pl.col("len").cast(pl.Utf8)], separator=_FIELD)
                                  ).to_series()
    units = keys.group_by("code").len().sort("code")
    unit_lines = units.select(pl.concat_str([pl.col("code"), pl.col("len").cast(pl.Utf8)], separator=_FIELD)
                              ).to_series()
    return {FingerprintKind.RECORDS.value: _digest(key, FingerprintKind.RECORDS, record_lines),
            FingerprintKind.UNITS.value: _digest(key, FingerprintKind.UNITS, unit_lines)}


def _text(column: str, mapping: dict[str, str] | None = None) -> pl.Expr:
    """A column as text, with the configured mapping applied (unmapped values kept as they are)."""
    expr = pl.col(column).cast(pl.Utf8)
    if mapping:
        expr = expr.replace(mapping)
    return expr.fill_null(_NULL)


def _digest(key: bytes, kind: FingerprintKind, lines: pl.Series) -> str:
    mac = hmac.new(key, f"censusdp-fingerprint-v1:{kind.value}{_ROW}".encode(), hashlib.sha256)
    for start in range(0, len(lines), _BATCH):
        mac.update((_ROW.join(lines.slice(start, _BATCH).to_list()) + _ROW).encode())
    return mac.hexdigest()
