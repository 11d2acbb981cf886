"""Several releases evaluated against the same true data, side by side (NOT PRIVATE): ``censusdp evaluate
--release RUN_A --release RUN_B ...``, beside each release's own full evaluation folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from censusdp.pipeline.evaluate.metrics import LABEL, method_values
from censusdp.pipeline.evaluate.plots import METHOD_NAME

COMPARED = ("noisy", "reconciled", "gls")


def comparison_markdown(results: list[tuple[dict[str, Any], pl.DataFrame]]) -> str:
    """The side-by-side report of ``(manifest, metrics)`` pairs, in the order given."""
    levels = list(dict.fromkeys(lv["name"] for run, _ in results for lv in run["levels"]))
    lines = [f"# {LABEL}", "", f"**{LABEL}.** {len(results)} releases compared with the true microdata they were "
             "made from; for synthetic or test data only, never to be published with a release.", ""]
    for i, (run, _) in enumerate(results, 1):
        privacy = run.get("privacy", {})
        lines.append(f"- release {i}: `{run.get('run_id')}` ({Path(str(run.get('config', {}).get('source', '?'))).name}"
                     f", rho {privacy.get('rho_exact', '?')})")
    for query, title in (("total", "Total population"), ("detailed", "Detailed cells")):
        header = " | ".join(f"{i}: {METHOD_NAME[m]}" for i in range(1, len(results) + 1) for m in COMPARED)
        lines += ["", f"## {title}: mean absolute error by level", "", f"| level | {header} |",
                  "|---" * (1 + len(results) * len(COMPARED)) + "|"]
        for level in levels:
            values = [method_values(metrics, level, query, "mae") for _, metrics in results]
            cells = ["—" if v.get(m) is None else f"{v[m]:.3f}" for v in values for m in COMPARED]
            lines.append(f"| {level} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_comparison(results: list[tuple[dict[str, Any], pl.DataFrame]], out_dir: Path) -> list[Path]:
    """comparison.parquet (every release's metrics, with its run id) and comparison.md in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pl.concat([metrics.with_columns(pl.lit(str(run.get("run_id"))).alias("run_id"))
                       for run, metrics in results]).to_arrow()
    parquet = out_dir / "comparison.parquet"
    pq.write_table(table.replace_schema_metadata({"censusdp.label": LABEL}), parquet)
    report = out_dir / "comparison.md"
    report.write_text(comparison_markdown(results))
    return [parquet, report]
