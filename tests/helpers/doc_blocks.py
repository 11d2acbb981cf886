"""A document's command blocks run verbatim: the ```bash blocks of one section, in order, in an empty folder,
against a ledger of the test's own (``$CENSUSDP_LEDGER``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def section_blocks(document: str, heading: str) -> list[str]:
    """The ```bash blocks of the section ``heading`` (a ``## `` line) of ``document`` (relative to the repository)."""
    text = (ROOT / document).read_text()
    start = text.index(heading)
    return re.findall(r"```bash\n(.*?)```", text[start:text.index("\n## ", start + 1)], flags=re.S)


def run_blocks(blocks: list[str], folder: Path) -> list[str]:
    """Run each block with bash -euo pipefail in ``folder``; every block must succeed; returns their outputs."""
    env = {**os.environ, "CENSUSDP_LEDGER": str(folder / "ledger.sqlite"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    outputs = []
    for block in blocks:
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=folder, env=env, capture_output=True,
                             text=True, timeout=600)
        assert ran.returncode == 0, f"{block}\n{ran.stdout[-2000:]}\n{ran.stderr[-2000:]}"
        outputs.append(ran.stdout + ran.stderr)
    return outputs
