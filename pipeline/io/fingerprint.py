"""Keyed fingerprints of a dataset's content, so the ledger charges the same data to the same budget (SECURITY.md).

Kinds: ``rows-set``, a keyed multiset hash of every row's canonical text (``row_texts``, ``MultisetDigest``), with
a ``rows-set-with-paths`` variant that counts a part's path-only hive columns; ``lines-set``, the same over the raw
lines, only where ``rows-set`` cannot be computed.  Computed before any value is validated, and never failing on a
bad value (which would turn a refusal into a free query): a kind that cannot be computed falls back.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from enum import StrEnum
from functools import partial
from typing import Any

import numpy as np
import polars as pl

from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.microdata import BATCH_ROWS, InputFiles
from censusdp.pipeline.io.parts import (
    ChangedFileError,
    check_unchanged,
    parquet_row_groups,
    read_batches,
    read_header,
    with_hive,
)

_NULL = "\x00"  # stands for a missing value; cannot occur in CSV text read by this package
_FIELD = "\x1f"
_MODULUS = 1 << 256
WITH_PATHS = "-with-paths"  # the variant of a kind that counts a part's path-only hive columns


# map_parts(function, pieces or part indices) -> the function's results (any order: the digests are a sum)
PartMap = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]
Piece = tuple[int, tuple[int, int | None] | None]  # a part's index, its rows [start, stop) (None: all; stop None: on)
PIECE_ROWS = 1 << 18  # rows of a Parquet part digested by one task


class FingerprintKind(StrEnum):
    ROWS_SET = "rows-set"
    LINES_SET = "lines-set"


def data_fingerprints(files: InputFiles, key: bytes, *, batch_rows: int = BATCH_ROWS,
                      map_parts: PartMap | None = None, piece_rows: int = PIECE_ROWS) -> dict[str, str]:
    """The keyed fingerprints of the microdata (kind -> hex digest), independent of path, parts and row order:
    ``rows-set`` (else ``lines-set``).  ``map_parts(function, pieces)`` computes the pieces' digests (``pieces``: a
    Parquet part's rows in ranges of ``piece_rows``, so one large file is shared out too; a CSV part whole), in
    any order and anywhere (a Dask runner's workers: they then hold the key); by default one after another here."""
    # Only a part's content may send the digest to its fallback kind, never the machinery that computes it: an
    # error out of ``map_parts`` itself (a worker lost, a file it cannot see) propagates and the release is not
    # charged, else killing a worker would give the same data another dataset's fingerprint (a fresh budget)
    run = map_parts or map
    try:  # the variant needs every part's rows: decided up front
        with_paths = any(name not in read_header(part.path, files.format) for part in files.parts
                         for name, _ in part.hive)
    except (KeyboardInterrupt, SystemExit, ChangedFileError):
        raise
    except BaseException:  # noqa: BLE001 - a header that does not parse: fall back, never refuse
        with_paths = None
    if with_paths is not None:
        parts = list(run(partial(part_digests, files, key=key, with_paths=with_paths, batch_rows=batch_rows),
                         pieces(files, piece_rows)))
        if all(part is not None for part in parts):
            digest = MultisetDigest(key, FingerprintKind.ROWS_SET)
            variant = MultisetDigest(key, FingerprintKind.ROWS_SET)
            for part, part_variant in parts:
                digest.merge(part)
                if part_variant is not None:
                    variant.merge(part_variant)
            return {digest.kind.value: digest.hexdigest()} | (
                {f"{digest.kind.value}{WITH_PATHS}": variant.hexdigest()} if with_paths else {})
    lines = MultisetDigest(key, FingerprintKind.LINES_SET)
    for part in run(partial(part_lines_set, files, key=key), range(len(files.parts))):
        lines.merge(part)
    return {lines.kind.value: lines.hexdigest()}


class MultisetDigest:
    """A keyed multiset hash (Clarke et al.'s MSet-Add-Hash), added to by batch (``add``), mergeable (``merge``)."""

    def __init__(self, key: bytes, kind: FingerprintKind) -> None:
        self.kind = kind
        # this kind's own key: digests of two kinds never combine
        self._key = hmac.new(key, f"censusdp-fingerprint-v1:{kind.value}\n".encode(), hashlib.sha256).digest()
        self._total = 0

    def add(self, items: Iterable[bytes]) -> None:
        # keyed BLAKE2b (RFC 7693's MAC mode, a PRF under the key) per row, 4 to 8 times cheaper in Python than
        # HMAC-SHA256's per-call key setup; each row's hash starts from a copy of one keyed state (the same digest
        # as hashing with the key; the keyed constructor's setup is done once, not per row)
        keyed = hashlib.blake2b(key=self._key, digest_size=32).copy
        macs = b"".join(_mac(keyed, item) for item in items)
        if macs:  # 8 big-endian 32-bit limbs per MAC, summed exactly in 64 bits (a batch is far below 2^32 rows)
            limbs = np.frombuffer(macs, dtype=">u4").reshape(-1, 8).sum(axis=0, dtype=np.uint64)
            self._total = (self._total + sum(int(s) << (32 * (7 - i)) for i, s in enumerate(limbs))) % _MODULUS

    def merge(self, other: MultisetDigest) -> None:
        if other.kind is not self.kind or other._key != self._key:
            raise ValueError("only digests of one kind under one key merge")
        self._total = (self._total + other._total) % _MODULUS

    def hexdigest(self) -> str:
        return hmac.new(self._key, b"total:" + self._total.to_bytes(32, "big"), hashlib.sha256).hexdigest()


def _mac(keyed: Callable[[], Any], item: bytes) -> bytes:
    state = keyed()
    state.update(item)
    return state.digest()


def row_texts(frame: pl.DataFrame) -> pl.Series:
    """Every row's canonical text: every column of a text, number or date type in name order, ``name=value``
    (dates and times as their integer form, a missing value as NUL); nested or binary columns have no text form:
    left out (a configuration never reads them)."""
    names = sorted(c for c, t in frame.schema.items() if not (t.is_nested() or t in (pl.Binary, pl.Object)))
    columns = [pl.col(n).to_physical() if frame.schema[n].is_temporal() else pl.col(n) for n in names]
    fields = [pl.lit(f"{n}=") + c.cast(pl.Utf8).fill_null(_NULL) for n, c in zip(names, columns, strict=True)]
    if not fields:
        return pl.Series("row", [""] * frame.height, dtype=pl.Utf8)
    return frame.select(pl.concat_str(fields, separator=_FIELD).alias("row")).to_series()


def pieces(files: InputFiles, piece_rows: int = PIECE_ROWS) -> list[Piece]:
    """The parts as pieces of work: a Parquet part's whole row groups in runs of at least ``piece_rows`` rows, the
    last run to the file's end (a footer whose total disagrees with its row groups, or that does not read: the part
    whole, as the measurement reads it), a CSV part whole.  At most one piece per row group."""
    found: list[Piece] = []
    for index, part in enumerate(files.parts):
        try:
            groups = parquet_row_groups(part.path) if files.format == "parquet" else None
        except InputError:
            groups = None
        if not groups:
            found.append((index, None))
            continue
        starts, start, taken = [0], 0, 0
        for rows in groups[:-1]:
            start, taken = start + rows, taken + rows
            if taken >= piece_rows:
                starts.append(start)
                taken = 0
        found.extend((index, (a, b)) for a, b in zip(starts, [*starts[1:], None], strict=True))
    return found


def part_digests(files: InputFiles, piece: Piece | int, key: bytes, *, with_paths: bool,
                 batch_rows: int = BATCH_ROWS) -> tuple[MultisetDigest, MultisetDigest | None] | None:
    """One piece's ``rows-set`` digest (and, with ``with_paths``, its ``-with-paths`` one), streamed: the pieces'
    digests ``merge`` into the dataset's, in any order (a part index: the whole part).  None where the part's
    content does not parse as rows (then the dataset's digest is ``lines-set``); a part changed while read raises."""
    index, rows = (piece, None) if isinstance(piece, int) else piece
    part = files.parts[index]
    digest = MultisetDigest(key, FingerprintKind.ROWS_SET)
    variant = MultisetDigest(key, FingerprintKind.ROWS_SET) if with_paths else None
    read = 0
    try:
        for frame in read_batches(part, files.format, batch_rows, hive=False, rows=rows):
            read += frame.height
            texts = row_texts(frame).cast(pl.Binary).to_list()
            digest.add(texts)
            if variant is not None:
                full = with_hive(frame, part)
                variant.add(texts if full.width == frame.width else row_texts(full).cast(pl.Binary).to_list())
    except (KeyboardInterrupt, SystemExit, ChangedFileError):
        raise
    except BaseException:  # noqa: BLE001 - a body that does not parse, a polars panic: fall back, never refuse
        return None
    if rows is not None and rows[1] is not None and read != rows[1] - rows[0]:
        # row groups that do not hold the rows their footer counts: the pieces could miss rows the measurement reads
        raise ChangedFileError(str(part.path), "its row groups do not hold the rows its footer counts",
                               category=InputProblem.FILE)
    return digest, variant


def part_lines_set(files: InputFiles, part_index: int, key: bytes) -> MultisetDigest:
    """One part's ``lines-set`` digest (every line but the first, a CSV's header), mergeable as ``part_digests``'."""
    part = files.parts[part_index]
    lines = MultisetDigest(key, FingerprintKind.LINES_SET)
    check_unchanged(part)
    with part.path.open("rb") as handle:
        handle.readline()  # the header (a CSV's): a label, not data
        for block in iter(lambda: handle.readlines(1 << 24), []):
            lines.add(line.rstrip(b"\r\n") for line in block)
    check_unchanged(part)
    return lines


def seeded_noise_secret(key: bytes, fingerprints: dict[str, str], release: str) -> bytes:
    """What a seeded (test) source is bound to (``RandomSource.bind``): the ledger's key, the data's
    fingerprint and ``release``, a digest of everything else that decides which count each draw lands on (the
    configuration as applied, the geography file, the code version).  So the seed alone never reveals a
    release's noise, and the same noise never lands on two different layouts of the same data (subtracting
    two such releases would cancel it); only an identical release repeats it, which reveals nothing new."""
    material = "".join(f"{k}={v};" for k, v in sorted(fingerprints.items())) + release
    return hmac.new(key, f"censusdp-seeded-noise-v2:{material}".encode(), hashlib.sha256).digest()
