"""The streamed fingerprint (``rows-set``): the same rows give the same digest however they are stored (one file,
a dataset folder, shuffled, split differently, CSV or Parquet, any batch size); other rows give another; bad
values never make it fail."""

from __future__ import annotations

import hashlib
import hmac
import pickle
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.io.fingerprint import (
    FingerprintKind,
    MultisetDigest,
    data_fingerprints,
    part_digests,
    pieces,
    row_texts,
)
from censusdp.pipeline.io.microdata import InputFiles, read_input_files
from tests.helpers.datasets import write_hive_dataset

KEY = bytes(range(32))


def files_at(config: Path, path: Path, fmt: str = "parquet") -> InputFiles:
    return read_input_files(load_config(config, {"input.path": str(path), "input.format": fmt}))


def test_one_file_a_dataset_and_shuffled_rows_share_the_digest(tiny_release: Path) -> None:
    folder = tiny_release.parent
    micro = pl.read_parquet(folder / "microdata.parquet")
    original = data_fingerprints(files_at(tiny_release, folder / "microdata.parquet"), KEY)
    assert set(original) == {"rows-set"}
    write_hive_dataset(micro, folder / "by-region", "region", pl.col("geocode").str.slice(0, 1))
    write_hive_dataset(micro.sample(fraction=1.0, shuffle=True, seed=3), folder / "by-adult", "ADULT", parts=3)
    write_hive_dataset(micro.with_columns(R=pl.col("geocode").str.slice(0, 1)), folder / "path-only", "R",
                       keep_column=False)  # R's values in the path only: the same rows as a file with R
    micro.with_columns(R=pl.col("geocode").str.slice(0, 1)).write_parquet(folder / "with-r.parquet")
    micro.sample(fraction=1.0, shuffle=True, seed=1).write_csv(folder / "shuffled.csv")
    by_region = data_fingerprints(files_at(tiny_release, folder / "by-region"), KEY)
    assert by_region["rows-set"] == original["rows-set"]  # "region" is a label of the path, no column of the rows
    assert set(by_region) == {"rows-set", "rows-set-with-paths"}
    assert data_fingerprints(files_at(tiny_release, folder / "by-adult"), KEY, batch_rows=13) == original
    assert data_fingerprints(files_at(tiny_release, folder / "shuffled.csv", "csv"), KEY, batch_rows=101) == original
    path_only = data_fingerprints(files_at(tiny_release, folder / "path-only"), KEY)
    with_r = data_fingerprints(files_at(tiny_release, folder / "with-r.parquet"), KEY)["rows-set"]
    assert path_only == {"rows-set": original["rows-set"], "rows-set-with-paths": with_r} and with_r != original[
        "rows-set"]  # either layout of the data finds it
    assert data_fingerprints(files_at(tiny_release, folder / "microdata.parquet"), bytes(32)) != original  # keyed


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 2999), column=st.sampled_from(["geocode", "COLOUR", "ADULT"]),
       change=st.sampled_from(["edit", "drop", "duplicate"]))
def test_a_changed_row_changes_the_digest(tiny_release: Path, row: int, column: str, change: str) -> None:
    path = tiny_release.parent / "microdata.parquet"
    micro = pl.read_parquet(path)
    original = data_fingerprints(files_at(tiny_release, path), KEY)
    if change == "edit":
        values = micro[column].to_list()
        values[row] = values[row] + "x"
        changed = micro.with_columns(pl.Series(column, values))
    elif change == "drop":
        changed = pl.concat([micro.slice(0, row), micro.slice(row + 1)])
    else:
        changed = pl.concat([micro, micro.slice(row, 1)])
    changed.write_parquet(tiny_release.parent / "changed.parquet")
    assert data_fingerprints(files_at(tiny_release, tiny_release.parent / "changed.parquet"), KEY) != original


def test_partial_digests_merge_to_the_whole(tiny_release: Path) -> None:
    """Per-partition digests (on workers) merged on the driver are the digest of all rows."""
    texts = [t.encode() for t in row_texts(pl.read_parquet(tiny_release.parent / "microdata.parquet")).to_list()]
    whole, parts = MultisetDigest(KEY, FingerprintKind.ROWS_SET), MultisetDigest(KEY, FingerprintKind.ROWS_SET)
    whole.add(texts)
    for start in range(0, len(texts), 700):
        piece = MultisetDigest(KEY, FingerprintKind.ROWS_SET)
        piece.add(reversed(texts[start:start + 700]))
        parts.merge(piece)
    assert parts.hexdigest() == whole.hexdigest()
    with pytest.raises(ValueError, match="one kind"):
        parts.merge(MultisetDigest(KEY, FingerprintKind.LINES_SET))
    folder = tiny_release.parent / "by-region"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                       pl.col("geocode").str.slice(0, 1))
    files = files_at(tiny_release, folder)
    merged = MultisetDigest(KEY, FingerprintKind.ROWS_SET)
    for index in reversed(range(len(files.parts))):  # as workers would, in any order
        merged.merge(part_digests(files, index, KEY, with_paths=False, batch_rows=50)[0])
    assert merged.hexdigest() == whole.hexdigest() == data_fingerprints(files, KEY)["rows-set"]


def test_fingerprints_never_fail_on_bad_values(tiny_release: Path) -> None:
    csv = tiny_release.parent / "micro.csv"
    csv.write_text("geocode,COLOUR,ADULT\n1101,r,1\n1102,\"g,1\n")
    kinds = data_fingerprints(files_at(tiny_release, csv, "csv"), KEY)
    assert set(kinds) == {"lines-set"}
    reordered = tiny_release.parent / "reordered.csv"
    reordered.write_text("geocode,COLOUR,ADULT\n1102,\"g,1\n1101,r,1\n")
    assert data_fingerprints(files_at(tiny_release, reordered, "csv"), KEY) == kinds
    path = tiny_release.parent / "microdata.parquet"
    frame = pl.read_parquet(path)
    days = [0] * frame.height
    days[5] = 10**8  # a date polars cannot write as text
    frame.with_columns(pl.Series("BIRTH", days, dtype=pl.Int32).cast(pl.Date)).write_parquet(path)
    assert data_fingerprints(files_at(tiny_release, path), KEY)


def test_parts_are_digested_where_map_parts_runs_them_and_its_own_errors_are_never_a_fallback(
        tiny_release: Path) -> None:
    """With ``map_parts`` (a Dask runner's workers in a release) every part's digest, of either kind, is computed
    through it, with the same result; an error of the machinery itself (a lost worker) propagates instead of
    choosing the ``lines-set`` kind, which would give the same data a digest no dataset on record has."""
    folder = tiny_release.parent
    micro = pl.read_parquet(folder / "microdata.parquet")
    write_hive_dataset(micro, folder / "by-region", "region", pl.col("geocode").str.slice(0, 1))
    good = files_at(tiny_release, folder / "by-region")
    bad = folder / "bad.csv"
    bad.write_text("geocode,COLOUR,ADULT\n1101,r,1\n1102,\"g,1\n")  # a body that does not parse
    unparsed = files_at(tiny_release, bad, "csv")
    ran: list[str] = []

    def elsewhere(function, indices):  # noqa: ANN001, ANN202 - a runner's map, in another process (pickled)
        shipped = pickle.loads(pickle.dumps(function))
        ran.extend(function.func.__name__ for _ in indices)
        return [shipped(i) for i in indices]

    for files, kinds in ((good, ["part_digests"] * len(good.parts)),
                         (unparsed, ["part_digests", "part_lines_set"])):
        ran.clear()
        assert data_fingerprints(files, KEY, map_parts=elsewhere) == data_fingerprints(files, KEY)
        assert ran == kinds

    def lost_worker(function, indices):  # noqa: ANN001, ANN202
        raise OSError("worker lost")

    with pytest.raises(OSError, match="worker lost"):
        data_fingerprints(good, KEY, map_parts=lost_worker)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=40))
def test_the_digest_is_the_documented_keyed_multiset_sum(rows: list[bytes]) -> None:
    """A ledger's fingerprints on record must keep matching the same data after any rewrite of the code (else the
    data would find a fresh budget): the digest is, as the module docstring defines it, HMAC-SHA256 under the
    kind's key of the sum modulo 2^256 of every row's keyed BLAKE2b-256, computed here independently."""
    kind_key = hmac.new(KEY, b"censusdp-fingerprint-v1:rows-set\n", hashlib.sha256).digest()
    total = sum(int.from_bytes(hashlib.blake2b(row, key=kind_key, digest_size=32).digest(), "big")
                for row in rows) % (1 << 256)
    expected = hmac.new(kind_key, b"total:" + total.to_bytes(32, "big"), hashlib.sha256).hexdigest()
    digest = MultisetDigest(KEY, FingerprintKind.ROWS_SET)
    half = len(rows) // 2
    digest.add(rows[:half])
    digest.add(iter(rows[half:]))
    assert digest.hexdigest() == expected


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def test_a_parquet_file_is_digested_in_pieces_of_row_groups_to_the_same_digest(tiny_release: Path) -> None:
    """One large file is shared out in runs of whole row groups (``pieces``), the last to the file's end: any piece
    size gives the whole file's digest; a footer whose row total disagrees with its row groups (edited to count
    fewer rows than the measurement reads) is digested whole, so it cannot buy the same records a new digest."""
    frame = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    grouped = tiny_release.parent / "grouped.parquet"
    pq.write_table(frame.to_arrow(), grouped, row_group_size=7)
    files = files_at(tiny_release, grouped)
    whole = data_fingerprints(files_at(tiny_release, tiny_release.parent / "microdata.parquet"), KEY)
    for piece_rows in (1, 7, 20, 64, frame.height + 1):
        found = pieces(files, piece_rows)
        starts = [rows[0] for _, rows in found]
        assert starts[0] == 0 and starts == sorted(set(starts)) and all(s % 7 == 0 for s in starts)
        assert found[-1][1][1] is None and all(rows[1] == nxt for (_, rows), nxt in zip(found[:-1], starts[1:],
                                                                                           strict=True))
        assert all(rows[1] - rows[0] >= piece_rows for _, rows in found[:-1])  # runs of at least piece_rows
        assert len(found) == -(-frame.height // max(7, -(-piece_rows // 7) * 7)) or piece_rows > frame.height
        assert data_fingerprints(files, KEY, piece_rows=piece_rows, batch_rows=4) == whole
    data = bytearray(grouped.read_bytes())  # the footer's num_rows field rewritten, nothing else
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    old, new = b"\x16" + _varint(2 * frame.height), b"\x16" + _varint(2 * (frame.height - 100))
    assert len(old) == len(new) and data.find(old, footer) > 0
    at = data.find(old, footer)
    data[at:at + len(old)] = new
    forged = tiny_release.parent / "forged.parquet"
    forged.write_bytes(bytes(data))
    assert pq.ParquetFile(forged).metadata.num_rows == frame.height - 100  # the footer lies; the rows are all there
    assert pieces(files_at(tiny_release, forged), 7) == [(0, None)]
    assert data_fingerprints(files_at(tiny_release, forged), KEY, piece_rows=7) == whole
    csv = tiny_release.parent / "micro.csv"
    frame.write_csv(csv)
    assert pieces(files_at(tiny_release, csv, "csv")) == [(0, None)]  # a CSV part is read whole
