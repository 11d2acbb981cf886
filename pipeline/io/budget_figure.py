"""The release's one figure, ``budget_shares.png``: public values from the manifest, drawn with matplotlib's object
API (imported when a figure is drawn: the core release does not pay for it, or depend on it, until it publishes; no
backend or other global setting is chosen: a figure of its own renders itself, in any thread).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np


def figure_png(figure: Any, label: str | None) -> bytes:
    """Title (an evaluation's NOT PRIVATE banner, if given), lay out, render as PNG at 110 dpi."""
    if label:
        figure.suptitle(label, color="darkred", fontsize=10, fontweight="bold")
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, dpi=110, format="png")
    return png.getvalue()


def budget_shares(run: dict[str, Any], path: Path, label: str | None = None) -> Path:
    """``budget_shares_png`` written to ``path``."""
    path.write_bytes(budget_shares_png(run, label))
    return path


def budget_shares_png(run: dict[str, Any], label: str | None = None) -> bytes:
    """The shares of rho by level and query, from the manifest (public values; no banner unless given)."""
    allocation = run.get("allocation", [])
    levels = [lv["name"] for lv in run["levels"]]
    total = sum(a["rho"] for a in allocation) or 1.0
    queries = list(dict.fromkeys(a["query"] for a in allocation))
    rho_of: dict[tuple[str, str], float] = {}  # (level, query) -> rho, keyed by name as the manifest writes it
    for a in allocation:
        rho_of[(a["level"], a["query"])] = rho_of.get((a["level"], a["query"]), 0.0) + a["rho"]
    import matplotlib
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.2))
    axis = figure.subplots()
    bottom = np.zeros(len(levels))
    colours = matplotlib.colormaps["tab20"]
    for k, query in enumerate(queries):
        shares = np.array([rho_of.get((lv, query), 0.0) / total for lv in levels])
        axis.bar(levels, shares, bottom=bottom, color=colours(k % 20), label=query)
        bottom += shares
    axis.set_ylabel("share of total rho")
    axis.set_title("budget shares by level and query (public values from the manifest)")
    axis.legend(fontsize=7, ncol=2)
    return figure_png(figure, label)
