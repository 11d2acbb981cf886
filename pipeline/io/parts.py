"""The microdata's parts: one file, or every Parquet file of a dataset folder, and their batched reading.

What a folder may hold, how its parts are labelled and what is refused at file level (before any charge: nothing
here looks at a value): docs/input.md.  Readers open files by path with globbing off, or by handle.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.pipeline.config.model import Format
from censusdp.pipeline.errors import InputError, InputProblem

PARQUET_SUFFIX = ".parquet"


@dataclass(frozen=True)
class InputPart:
    """One file of the microdata: ``partition`` is its label (the concatenated hive values of its path inside
    the dataset folder, or its plain top-level folder's name; None for a single file or a part at the top);
    ``hive`` the path's ``name=value`` segments, outermost first."""

    path: Path
    partition: str | None = None
    hive: tuple[tuple[str, str], ...] = ()
    identity: tuple[int, ...] = ()  # the file's inode, size and times when listed (``check_unchanged``)


def _identity(path: Path) -> tuple[int, ...]:
    # no device number: a worker mounting the same file system may see another one; ctime cannot be set back
    info = path.stat()
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


class ChangedFileError(InputError):
    """A part changed after it was listed: never a fallback's cue, always a refusal (a FILE problem)."""


def check_unchanged(part: InputPart) -> None:
    """The part is the file it was when listed, so the rows charged, checked and measured are one content (a file
    swapped after the charge would spend another dataset's budget).  Every reader checks before and after."""
    try:
        same = not part.identity or _identity(part.path) == part.identity
    except OSError:
        same = False
    if not same:
        raise ChangedFileError(str(part.path), "changed while the release was reading it (the data must stay as "
                               "it was charged)", category=InputProblem.FILE)


def _file_error(path: Path, problem: str) -> InputError:
    return InputError(str(path), problem, category=InputProblem.FILE)


def discover_parts(path: Path, fmt: Format) -> tuple[InputPart, ...]:
    """The parts of ``input.path``: the file itself, or every Parquet file of a dataset folder (file level)."""
    if not path.exists():
        raise _file_error(path, "no such file")
    if path.resolve().is_file():
        return (InputPart(path, identity=_identity(path)),)
    if not path.resolve().is_dir():
        raise _file_error(path, "not a file or a folder")
    if fmt is not Format.PARQUET:
        raise _file_error(path, f"a folder is read as a Parquet dataset only (format parquet, not {fmt})")
    root = path.resolve()
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            if (Path(folder) / name).is_symlink():
                raise _file_error(path / Path(folder).relative_to(root) / name,
                                  "a symbolic link inside a dataset folder is not accepted (it could read one "
                                  "file several times)")
        found.extend(Path(folder) / f for f in files if f.endswith(PARQUET_SUFFIX))
    if not found:
        raise _file_error(path, "a dataset folder with no Parquet file (*.parquet)")
    relative = sorted(p.relative_to(root) for p in found)
    parts = tuple(_part(path / r, r) for r in relative)
    _refuse_identical(parts)
    return parts


def _part(path: Path, relative: Path) -> InputPart:
    folders = relative.parts[:-1]
    hive = tuple((s.split("=", 1)[0], s.split("=", 1)[1]) for s in folders if "=" in s and not s.startswith("="))
    if hive:
        return InputPart(path, "".join(value for _, value in hive), hive, _identity(path))
    return InputPart(path, folders[0] if folders else None, identity=_identity(path))


def _refuse_identical(parts: tuple[InputPart, ...]) -> None:
    """Two parts with the same bytes are a copy (hard links included): refused, whatever their content."""
    seen: dict[bytes, Path] = {}
    for part in parts:
        with part.path.open("rb") as handle:
            earlier = seen.setdefault(hashlib.file_digest(handle, "sha256").digest(), part.path)
        if earlier != part.path:
            raise _file_error(part.path, f"has the same bytes as {earlier} (a dataset holds each record once)")


def separator(path: Path, fmt: Format | str) -> str:
    first = path.open("r", errors="replace").readline()
    return "|" if fmt in (Format.MDF_PL94, Format.MDF_UNITS) and first.count("|") > first.count(",") else ","


def unreadable(path: Path, fmt: Format | str, error: BaseException) -> InputError:
    kind = "Parquet" if fmt == "parquet" else "CSV"
    return InputError(str(path), f"not a readable {kind} file ({type(error).__name__})", category=InputProblem.FILE)


def parquet_row_groups(path: Path) -> list[int] | None:
    """A Parquet file's row groups' row counts, from its footer (no value is read); None where the footer's own
    total disagrees with them (a reader could then read other rows than it counts)."""
    try:
        with path.open("rb") as handle:
            meta = pq.ParquetFile(handle).metadata
            groups = [int(meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
            total = int(meta.num_rows)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise unreadable(path, "parquet", error) from None
    return groups if total == sum(groups) and all(g >= 0 for g in groups) else None


def read_header(path: Path, fmt: Format | str) -> dict[str, pl.DataType]:
    """The file's columns and types, from its Parquet schema or CSV header only (no value is read)."""
    if not path.exists():
        raise _file_error(path, "no such file")
    if not path.resolve().is_file():  # a folder or a glob would read several files as one: other "data"
        raise _file_error(path, "not a file (a folder or a pattern is not accepted)")
    try:
        with path.open("rb") as handle:  # a handle: no glob or folder expansion by the reader
            if fmt == "parquet":
                return dict(pl.read_parquet_schema(handle))
            frame = pl.read_csv(handle, infer_schema=False, separator=separator(path, fmt), n_rows=0)
        return dict(frame.schema)
    except (pl.exceptions.PolarsError, OSError, ValueError) as error:
        raise unreadable(path, fmt, error) from None


def part_header(part: InputPart, fmt: Format | str) -> dict[str, pl.DataType]:
    """A part's columns: its file's, and a text column for each hive segment the file has no column for."""
    header = read_header(part.path, fmt)
    return header | {name: pl.Utf8() for name, _ in part.hive if name not in header}


def read_body(path: Path, fmt: Format | str, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The whole file as it is, or only ``columns`` (a file whose header was read and has them); a failure here
    depends on values."""
    wanted = list(columns) if columns is not None else None
    try:
        with path.open("rb") as handle:
            if fmt == "parquet":
                return pl.read_parquet(handle, columns=wanted)
            # every column parsed: a row with more fields than the header is refused, whatever is kept of it
            frame = pl.read_csv(handle, infer_schema=False, separator=separator(path, fmt))
            return frame.select(wanted) if wanted is not None else frame
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001 - a polars panic too: reported after the charge, by type
        raise unreadable(path, fmt, error) from None


def with_hive(frame: pl.DataFrame, part: InputPart) -> pl.DataFrame:
    """``frame`` with the part's hive columns the file lacks (constant text, as ``part_header`` says)."""
    missing = [pl.lit(value, dtype=pl.Utf8).alias(name) for name, value in part.hive if name not in frame.columns]
    return frame.with_columns(missing) if missing else frame


def read_batches(part: InputPart, fmt: Format | str, batch_rows: int, *, hive: bool = True,
                 rows: tuple[int, int | None] | None = None) -> Iterator[pl.DataFrame]:
    """The part's rows in order (a Parquet part's ``rows`` [start, stop) only; stop None: to the end), streamed, at
    most ``batch_rows`` per frame (with ``hive``, the hive columns the file lacks added).  A body that does not
    parse raises ``unreadable`` (a FILE problem that depends on values)."""
    if batch_rows < 1:
        raise ValueError("batch_rows must be >= 1")
    if rows is not None and fmt != "parquet":
        raise ValueError("only a Parquet part is read by row ranges")
    check_unchanged(part)
    source = str(part.path.resolve())
    try:
        if fmt == "parquet":
            scan = pl.scan_parquet(source, glob=False, hive_partitioning=False)
            scan = scan if rows is None else scan.slice(rows[0], None if rows[1] is None else rows[1] - rows[0])
        else:
            scan = pl.scan_csv(source, glob=False, infer_schema=False, separator=separator(part.path, fmt))
        for batch in scan.collect_batches(chunk_size=batch_rows, maintain_order=True, lazy=True):
            # the reader's chunk size is a target: cut anything larger, so a batch never exceeds batch_rows
            for start in range(0, batch.height, batch_rows):
                piece = batch.slice(start, batch_rows)
                yield with_hive(piece, part) if hive else piece
        check_unchanged(part)
    except (KeyboardInterrupt, SystemExit, GeneratorExit, InputError):
        raise
    except BaseException as error:  # noqa: BLE001 - a polars panic too: reported after the charge, by type
        raise unreadable(part.path, fmt, error) from None
