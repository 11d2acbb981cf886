"""Error metrics of one estimate of one query at one level against the true answers, as long-form rows
(docs/uncertainty.md).  Evaluation only, NOT PRIVATE: never to be published with a release."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

LABEL = "EVALUATION AGAINST TRUE DATA — NOT PRIVATE"
METHODS = ("noisy", "reconciled", "gls", "bottom_up")  # the estimates compared, in the order reports show them
SIZE_EDGES = (0, 1, 10, 50, 250)
SIZE_BINS = ("0", "1-9", "10-49", "50-249", "250+")
DIVERSITY_EDGES = (0.0, 0.5, 1.0, 2.0)
DIVERSITY_BINS = ("0-0.5 bits", "0.5-1 bits", "1-2 bits", "2+ bits")


def entropy_bits(counts: np.ndarray) -> np.ndarray:
    """Shannon entropy (bits) of each row's distribution; 0 for an empty row."""
    counts = np.asarray(counts, dtype=float)
    totals = counts.sum(axis=1, keepdims=True)
    p = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    logs = np.log2(p, out=np.zeros_like(p), where=p > 0)
    return -(p * logs).sum(axis=1)


def diversity_bin(entropy: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.asarray(DIVERSITY_EDGES), entropy, side="right") - 1


def size_bin(true: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.asarray(SIZE_EDGES), true, side="right") - 1


def total_variation(true: np.ndarray, estimate: np.ndarray) -> tuple[float, int]:
    """Mean over nodes with a positive true total of 0.5·Σ|p - p̂|, p̂ the estimate clipped at 0 and normalised
    (1 where the clipped estimate is all zero)."""
    totals = true.sum(axis=1)
    keep = totals > 0
    if not keep.any():
        return float("nan"), 0
    p = true[keep] / totals[keep, None]
    clipped = np.clip(estimate[keep].astype(float), 0, None)
    mass = clipped.sum(axis=1)
    q = np.divide(clipped, mass[:, None], out=np.zeros_like(clipped), where=mass[:, None] > 0)
    tvd = np.where(mass > 0, 0.5 * np.abs(p - q).sum(axis=1), 1.0)
    return float(tvd.mean()), int(keep.sum())


def _basic(errors: np.ndarray) -> dict[str, float]:
    if errors.size == 0:
        return {}
    return {"mae": float(np.abs(errors).mean()), "rmse": float(np.sqrt((errors**2).mean())),
            "max_abs": float(np.abs(errors).max()), "bias": float(errors.mean())}


def method_values(metrics: pl.DataFrame, level: str, query: str, metric: str) -> dict[str, float]:
    """Each method's ``metric`` over every cell of ``query`` at ``level``."""
    rows = metrics.filter((pl.col("level") == level) & (pl.col("query") == query)
                          & (pl.col("metric") == metric) & (pl.col("group") == "all"))
    return dict(zip(rows["method"].to_list(), rows["value"].to_list(), strict=True))


def query_metrics(true: np.ndarray, estimate: np.ndarray, diversity: np.ndarray) -> list[dict[str, Any]]:
    """Rows for one (method, level, query): ``true``, ``estimate`` and ``diversity`` (the diversity bin of each
    cell's node) are (n_nodes, q_cells)."""
    errors = estimate.astype(float) - true
    rows = [{"metric": k, "group": "all", "bin": "all", "value": v, "n": errors.size}
            for k, v in _basic(errors.ravel()).items()]
    if true.shape[1] > 1:
        tvd, nodes = total_variation(true, estimate)
        rows.append({"metric": "tvd", "group": "all", "bin": "all", "value": tvd, "n": nodes})
    for group, bins, index in (("size", SIZE_BINS, size_bin(true)), ("diversity", DIVERSITY_BINS, diversity)):
        for b, name in enumerate(bins):
            selected = errors[index == b]
            rows += [{"metric": k, "group": group, "bin": name, "value": v, "n": selected.size}
                     for k, v in _basic(selected).items() if k in ("mae", "bias", "rmse")]
    return rows
