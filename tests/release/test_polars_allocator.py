"""Polars' freed pages go back to the system at once in a process that imports censusdp first
(``pipeline/__init__``), and a value set by the user is kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline import POLARS_ALLOCATOR_VARIABLE

PROBE = """
import sys
if sys.argv[1] == "censusdp":
    import pipeline
import os
import polars as pl, psutil
process = psutil.Process()
baseline = process.memory_info().rss
frame = pl.DataFrame({"code": pl.int_range(0, 4_000_000, eager=True).cast(pl.Utf8).str.zfill(15)})
frame = frame.sort("code", descending=True)
grown = process.memory_info().rss - baseline
del frame
print(os.environ.get("_RJEM_MALLOC_CONF", ""), grown, process.memory_info().rss - baseline)
"""


def _probe(first: str, env: dict[str, str]) -> tuple[str, int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, first], capture_output=True, text=True, check=True, env=env,
                         timeout=120).stdout.split()
    setting = out[0] if len(out) == 3 else ""  # polars may set the variable itself
    return setting, int(out[-2]), int(out[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="polars' jemalloc is Linux's")
def test_polars_frees_at_once_after_censusdp_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if k != POLARS_ALLOCATOR_VARIABLE}
    setting, grown, left = _probe("censusdp", env)
    # polars puts its own defaults first (jemalloc takes the last value of an option): ours must come last
    assert setting.endswith("dirty_decay_ms:0,muzzy_decay_ms:0"), setting
    assert grown > 100e6 and left < 40e6, (grown, left)
    setting, grown, left = _probe("polars-alone", env)  # polars' own default keeps the pages
    assert "decay_ms:0" not in setting and grown > 150e6 and left > 100e6, (setting, grown, left)


def test_a_setting_of_the_users_is_kept() -> None:
    env = {**os.environ, POLARS_ALLOCATOR_VARIABLE: "narenas:2"}
    setting = _probe("censusdp", env)[0]
    assert setting.endswith("narenas:2") and "decay_ms:0" not in setting, setting
