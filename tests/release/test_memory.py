"""The driver returns freed heap pages to the system between stages (glibc's ``malloc_trim``)."""

from __future__ import annotations

import sys

import psutil
import pytest

from pipeline.release.memory import return_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_freed_heap_pages_go_back_to_the_system() -> None:
    # 2 KiB blocks (above pymalloc's 512 bytes: glibc's heap), every 64th kept so the heap's top never frees
    # itself: ~200 MB of holes that only a trim returns
    blocks = [bytes(2048) + i.to_bytes(4, "little") for i in range(100_000)]
    keep = blocks[::64]
    del blocks
    process = psutil.Process()
    before = process.memory_info().rss
    return_freed_memory()
    after = process.memory_info().rss
    assert before - after > 100e6, (before, after)
    assert len(keep) == 1563
