"""The driver returns freed heap pages to the system after every stage (glibc's ``malloc_trim``)."""

from __future__ import annotations

import platform
import sys
from types import SimpleNamespace

import psutil
import pytest

from pipeline.release import stages
from pipeline.release.memory import return_freed_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
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


def test_every_stage_call_is_followed_by_a_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(stages, "return_freed_memory", lambda: events.append("trim"))
    monkeypatch.setattr(stages, "tabulate", lambda run: None)
    monkeypatch.setattr(stages, "reconcile", lambda run, level, runner: None)
    run = SimpleNamespace(config=SimpleNamespace(runner="local", levels=("us", "state", "county")))
    run.universes = lambda: [run, run]

    def call(stage: stages.Stage, function: object, args: tuple[object, ...]) -> None:
        events.append(stage.name)

    sequence = (stages.Stage("reconcile", "reconcile", per_level=True, needs_runner=True, per_universe=True),
                stages.Stage("tabulate", "tabulate"))
    stages.run_stages(run, sequence, call=call)
    assert events == ["reconcile", "trim"] * 6 + ["tabulate", "trim"]
