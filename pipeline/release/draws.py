"""Each measurement's draw: the stream it comes from and the claim that lets it happen once per run (docs/dask.md).

A release is charged for one noisy measurement of each (level, query, node) (Thm 19.37(i)); a second, independent
draw of the same counts would be a second measurement, uncharged.  So every measurement task claims its draw
before it reads a record or draws a value (``claim_draw``), and the driver adopts only the parts of the attempt
that holds the claim (``check_claimed``).  The parts folder is made once by the driver and no task creates a
folder, so an attempt that starts after the run failed or was published creates nothing.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from censusdp.pipeline.budget.allocation import QueryAllocation
from censusdp.pipeline.errors import CensusDPError

CLAIM_SUFFIX = ".claim"  # a task's claim of its draw, in the run's parts folder
UPPER = "upper"  # the claim of the upper levels' task (a group's is its zero-padded index)


class MeasurementRepeatedError(CensusDPError):
    """A measurement task ran again in the same run, or after its run ended: it drew nothing, wrote nothing."""


def group_name(index: int) -> str:
    return f"{index:06d}"


def claim_path(out_dir: str | Path, name: str) -> Path:
    """Where task ``name``'s claim lives in the folder ``out_dir``."""
    return Path(out_dir) / f"{name}{CLAIM_SUFFIX}"


def claim_draw(out_dir: str, name: str) -> str:
    """Claim the one draw of task ``name`` in this run, atomically (``O_EXCL``), before anything is read or drawn;
    returns a fresh attempt id, written into the claim and the attempt's part names.  A second attempt, or one
    after the run ended (no folder: nothing created), raises ``MeasurementRepeatedError`` without drawing."""
    attempt = secrets.token_hex(8)
    try:
        descriptor = os.open(claim_path(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise MeasurementRepeatedError(f"measurement task {name} ran twice in this run (a lost Dask worker): its "
                                       "noise is never drawn again; the run failed, its charge stands") from None
    except FileNotFoundError:
        raise MeasurementRepeatedError(f"measurement task {name} started after its run ended: nothing was drawn "
                                       "or written") from None
    with os.fdopen(descriptor, "w") as claim:
        claim.write(attempt)
    return attempt


def part_name(index: int, attempt: str, level: str) -> str:
    """Group ``index``'s part file of ``level``, named by the attempt that claimed the group."""
    return f"{group_name(index)}-{attempt}-{level}.parquet"


def check_claimed(out_dir: str | None, index: int, part: Path) -> Path:
    """``part`` if the attempt that wrote it is the one that claimed group ``index``'s draw in the parts folder
    ``out_dir``, else refused: the parts of exactly one attempt are adopted."""
    name = group_name(index)
    claim = claim_path(out_dir, name) if out_dir is not None else None
    if claim is None or not claim.is_file() or not part.name.startswith(f"{name}-{claim.read_text()}-"):
        raise CensusDPError(f"measurement task {name} handed back a part its claim does not name: nothing was "
                            "published")
    return part


def chunk_label(universe: str, level: str, allocations: Sequence[QueryAllocation], start: int, stop: int) -> str:
    """A chunk's stream label: nodes [start, stop) of ``level`` (numbered in the whole tree) and its queries in
    drawing order, with their mechanisms.  Under a test seed it keys the chunk's stream: two layouts of one input
    cut a level into other chunks, and a label shared by chunks of different nodes would put one stream on two sets
    of counts (subtracting the two releases would cancel the noise).  In production it only names the chunk."""
    queries = ",".join(f"{a.query}/{a.mechanism}" for a in allocations)
    return f"{universe}:{level}:{start}-{stop}:{queries}"
