"""The README's walk-through, run verbatim: its command blocks, in order, in an empty folder, against a ledger of
the test's own (``$CENSUSDP_LEDGER``, as the README says)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent


def walk_through_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Walk-through"):text.index("\n## ", text.index("## Walk-through") + 1)]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def test_the_walk_through_runs_verbatim(tmp_path: Path) -> None:
    blocks = walk_through_blocks()
    assert len(blocks) == 5  # the README promises five steps
    env = {**os.environ, "CENSUSDP_LEDGER": str(tmp_path / "ledger.sqlite"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    outputs = []
    for block in blocks:
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
        assert ran.returncode == 0, f"{block}\n{ran.stdout[-2000:]}\n{ran.stderr[-2000:]}"
        outputs.append(ran.stdout + ran.stderr)
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "manifest.json").is_file() and "0 with violations" in outputs[3]
    assert "published" in outputs[3] and "pl94-state" in outputs[3]  # the ledger shows the charge
    districts = pl.read_parquet(tmp_path / "districts.parquet")
    plan = pl.read_csv(tmp_path / "plan.csv", schema_overrides={"GEOID": pl.Utf8, "DISTRICT": pl.Utf8})
    assert districts["area"].n_unique() == plan["DISTRICT"].n_unique() > 1
