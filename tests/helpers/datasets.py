"""Writing microdata as a Parquet dataset folder (hive ``name=value`` folders or plain ones), for the tests of
streamed reading and of fingerprints."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def write_hive_dataset(frame: pl.DataFrame, folder: Path, by: str, values: pl.Expr | None = None,
                       parts: int = 2, keep_column: bool = True) -> list[Path]:
    """``frame`` split by ``values`` (default: the column ``by``) into ``folder/by=value/part-i.parquet``, each
    value's rows cut into ``parts`` files, in row order; without ``keep_column`` the files lack the column ``by``
    (as ``pyarrow.parquet.write_to_dataset`` writes them: the value is in the path only).  Returns the files in
    sorted order (the order a dataset is read in)."""
    labelled = frame.with_columns((values if values is not None else pl.col(by)).cast(pl.Utf8).alias("__value"))
    written = []
    for value in sorted(labelled["__value"].unique().to_list()):
        rows = labelled.filter(pl.col("__value") == value).drop("__value")
        if not keep_column:
            rows = rows.drop(by)
        size = -(-rows.height // parts)
        (folder / f"{by}={value}").mkdir(parents=True)
        for i in range(parts):
            path = folder / f"{by}={value}" / f"part-{i}.parquet"
            rows.slice(i * size, size).write_parquet(path)
            written.append(path)
    return sorted(written)
