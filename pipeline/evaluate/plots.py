"""PNG plots of an evaluation (matplotlib, Agg backend; the four files: docs/uncertainty.md).  Every figure carries
the NOT PRIVATE label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from censusdp.pipeline.evaluate.metrics import DIVERSITY_BINS, LABEL, SIZE_BINS, method_values  # noqa: E402
from censusdp.pipeline.io.budget_figure import budget_shares, figure_png  # noqa: E402

METHOD_STYLE = {"noisy": ("tab:gray", "o"), "reconciled": ("tab:blue", "s"), "gls": ("tab:green", "^"),
                "bottom_up": ("tab:red", "x")}
METHOD_NAME = {"noisy": "noisy measurements", "reconciled": "reconciled tables", "gls": "GLS estimates",
               "bottom_up": "bottom-up baseline (evaluation only)"}


def finish_figure(figure: Any, path: Path, label: str) -> Path:
    """Write a pyplot figure as PNG and close it (pyplot keeps every figure it made until closed)."""
    path.write_bytes(figure_png(figure, label))
    plt.close(figure)
    return path


def error_by_level(metrics: pl.DataFrame, run: dict[str, Any], path: Path) -> Path:
    levels = [lv["name"] for lv in run["levels"]]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, query in zip(axes, ("total", "detailed"), strict=True):
        by_level = {level: method_values(metrics, level, query, "mae") for level in levels}
        for method, (colour, marker) in METHOD_STYLE.items():
            ys = [by_level[level].get(method, np.nan) for level in levels]
            axis.plot(levels, ys, marker=marker, color=colour, label=METHOD_NAME[method])
        axis.set_title(f"mean absolute error: {query}")
        axis.set_yscale("symlog", linthresh=0.1)
        axis.set_xlabel("level")
        axis.tick_params(axis="x", rotation=30)
    axes[0].set_ylabel("persons")
    axes[1].legend(fontsize=8)
    return finish_figure(figure, path, LABEL)


def bias_by(metrics: pl.DataFrame, run: dict[str, Any], group: str, path: Path) -> Path:
    bins = SIZE_BINS if group == "size" else DIVERSITY_BINS
    levels = [lv["name"] for lv in run["levels"]][-2:]
    figure, axes = plt.subplots(1, len(levels), figsize=(11, 4.2), squeeze=False)
    width = 0.8 / len(METHOD_STYLE)
    for axis, level in zip(axes[0], levels, strict=True):
        for k, (method, (colour, _)) in enumerate(METHOD_STYLE.items()):
            rows = metrics.filter((pl.col("method") == method) & (pl.col("query") == "detailed")
                                  & (pl.col("level") == level) & (pl.col("metric") == "bias")
                                  & (pl.col("group") == group))
            values = dict(zip(rows["bin"].to_list(), rows["value"].to_list(), strict=True))
            xs = np.arange(len(bins)) + (k - (len(METHOD_STYLE) - 1) / 2) * width
            axis.bar(xs, [values.get(b, np.nan) for b in bins], width, color=colour, label=METHOD_NAME[method])
        axis.axhline(0, color="black", linewidth=0.8)
        axis.set_xticks(np.arange(len(bins)), bins)
        axis.set_title(f"bias of detailed cells at {level}")
        axis.set_xlabel("true cell count" if group == "size" else "area diversity (entropy of race x ethnicity)")
    axes[0][0].set_ylabel("mean signed error (persons)")
    axes[0][-1].legend(fontsize=8)
    return finish_figure(figure, path, LABEL)


def write_plots(metrics: pl.DataFrame, run: dict[str, Any], out_dir: Path) -> list[Path]:
    """All four PNGs in ``out_dir``; returns their paths."""
    return [error_by_level(metrics, run, out_dir / "error_by_level.png"),
            bias_by(metrics, run, "size", out_dir / "bias_by_size.png"),
            bias_by(metrics, run, "diversity", out_dir / "bias_by_diversity.png"),
            budget_shares(run, out_dir / "budget_shares.png", LABEL)]
