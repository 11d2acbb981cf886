"""Small helpers of the release: structural-zero masks and merging per-chunk reconciliation reports."""

from __future__ import annotations

from typing import Any

import numpy as np

from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.config.persons_per_unit import selection_mask


def structural_zero_mask(config: ReleaseConfig) -> np.ndarray | None:
    """Cells fixed at zero: those matching every attribute condition of any declared structural zero."""
    if not config.structural_zeros:
        return None
    return np.any([selection_mask(config.schema, tuple(zero.items())) for zero in config.structural_zeros], axis=0)


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's diagnostics from its chunks': counts and seconds add, violations take the max."""
    merged: dict[str, Any] = {"chunks": len(reports)}
    for report in reports:
        for key, value in report.items():
            if value is None:
                merged.setdefault(key, value)
            elif isinstance(value, bool | str):  # e.g. path, solvers: how many chunks had each value
                counts = merged.setdefault(key, {})
                counts[str(value)] = counts.get(str(value), 0) + 1
            elif key.startswith(("max_", "min_")):
                pick = max if key.startswith("max_") else min
                merged[key] = value if merged.get(key) is None else pick(merged[key], value)
            elif isinstance(value, int | float):
                merged[key] = merged.get(key, 0) + value
            elif isinstance(value, dict):
                inner = merged.setdefault(key, {})
                for k, v in value.items():
                    inner[k] = inner.get(k, 0) + v if isinstance(v, int | float) else v
            else:
                merged.setdefault(key, value)
    return merged
