"""Keyed fingerprints of a dataset's content, so that the ledger charges the same data to the same budget.

The budget belongs to the people in the data, not to a file: a copy in another folder, under another name,
converted between CSV and Parquet, or with its rows shuffled is the same dataset and must not start a fresh
lifetime cap.  A release therefore computes, before its charge, an HMAC-SHA256 digest (key: 32 random bytes
kept in the ledger, ``PrivacyLedger.fingerprint_key``) of a canonical form of the microdata *file*:

- ``rows``: the sorted multiset of its rows, every column of a text, number or date type included (columns
  in name order, each value as text).  It does not depend on the configuration at all, so no choice of
  geocode columns, attributes, mappings or levels makes the same file look new; and matching it needs the
  whole file's content, so a crafted file of one's own cannot test a guess about a few people;
- ``lines`` (only for a CSV whose body does not parse, or a value with no text form): the sorted multiset of
  the file's raw lines.

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

from pipeline.errors import CensusDPError
from pipeline.io.microdata import InputFiles

_NULL = "\x00"  # stands for a missing value; cannot occur in CSV text read by this package
_FIELD, _ROW = "\x1f", "\n"
_BATCH = 200_000


class FingerprintKind(StrEnum):
    ROWS = "rows"
    LINES = "lines"


def data_fingerprints(files: InputFiles, key: bytes) -> dict[str, str]:
    """The keyed fingerprints of the microdata file (kind -> hex digest), independent of path and row order."""
    frame = files.microdata
    if frame is not None:
        try:
            return {FingerprintKind.ROWS.value: _rows_digest(frame, key)}
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001 - e.g. a polars panic on an odd value: fall back, never refuse
            pass
    # a body that does not parse (or a value with no text form): its raw lines, in order-free form
    path = files.config.input.path
    if path is None:  # read_input_files refuses a configuration without one
        raise CensusDPError("internal error: fingerprinting input files that were never read")
    mac = _mac(key, FingerprintKind.LINES)
    for line in sorted(path.read_bytes().splitlines()[1:]):
        mac.update(line + _ROW.encode())
    return {FingerprintKind.LINES.value: mac.hexdigest()}


def _rows_digest(frame: pl.DataFrame, key: bytes) -> str:
    # nested or binary columns have no text form: they are left out (a configuration never reads them); dates
    # and times are written as their integer form, which every value has
    names = sorted(c for c, t in frame.schema.items() if not (t.is_nested() or t in (pl.Binary, pl.Object)))
    columns = [pl.col(n).to_physical() if frame.schema[n].is_temporal() else pl.col(n) for n in names]
    text = frame.select([c.cast(pl.Utf8).fill_null(_NULL).alias(f"c{i}") for i, c in enumerate(columns)])
    rows = text.group_by(text.columns).len().sort(text.columns)
    fields = [pl.lit(f"{n}=") + pl.col(f"c{i}") for i, n in enumerate(names)]
    lines_text = rows.select(pl.concat_str([*fields, pl.col("len").cast(pl.Utf8)], separator=_FIELD)).to_series()
    mac = _mac(key, FingerprintKind.ROWS)
    for start in range(0, len(lines_text), _BATCH):
        mac.update((_ROW.join(lines_text.slice(start, _BATCH).to_list()) + _ROW).encode())
    return mac.hexdigest()


def _mac(key: bytes, kind: FingerprintKind) -> hmac.HMAC:
    return hmac.new(key, f"censusdp-fingerprint-v1:{kind.value}{_ROW}".encode(), hashlib.sha256)


def seeded_noise_secret(key: bytes, fingerprints: dict[str, str], release: str) -> bytes:
    """What a seeded (test) source is bound to (``RandomSource.bind``): the ledger's key, the data's
    fingerprint and ``release``, a digest of everything else that decides which count each draw lands on (the
    configuration as applied, the geography file, the code version).  So the seed alone never reveals a
    release's noise, and the same noise never lands on two different layouts of the same data (subtracting
    two such releases would cancel it); only an identical release repeats it, which reveals nothing new."""
    material = "".join(f"{k}={v};" for k, v in sorted(fingerprints.items())) + release
    return hmac.new(key, f"censusdp-seeded-noise-v2:{material}".encode(), hashlib.sha256).digest()
