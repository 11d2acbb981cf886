"""The driver returns freed heap pages to the system after every stage (glibc's ``malloc_trim``), and gives
pyarrow the system allocator while a release runs (mimalloc's cached pages reached neither)."""

from __future__ import annotations

import platform
import sys
from types import SimpleNamespace

import numpy as np
import psutil
import pyarrow as pa
import pytest

from pipeline.release import stages
from pipeline.release.memory import ARROW_POOL_VARIABLE, return_freed_memory, system_arrow_pool

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


def _stage_pools(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(stages, "tabulate", lambda run: None)
    run = SimpleNamespace(config=SimpleNamespace(runner="local", levels=("us",)))
    run.universes = lambda: [run]

    def call(stage: stages.Stage, function: object, args: tuple[object, ...]) -> None:
        seen.append(pa.default_memory_pool().backend_name)
        if fail:
            raise RuntimeError("a stage failed")

    monkeypatch.setattr(stages, "abandon", lambda run: None)
    if fail:
        with pytest.raises(RuntimeError):
            stages.run_stages(run, (stages.Stage("tabulate", "tabulate"),), call=call)
    else:
        stages.run_stages(run, (stages.Stage("tabulate", "tabulate"),), call=call)
    return seen


@pytest.mark.parametrize("fail", [False, True])
def test_stages_run_with_pyarrows_system_pool_and_the_previous_comes_back(monkeypatch: pytest.MonkeyPatch,
                                                                         fail: bool) -> None:
    monkeypatch.delenv(ARROW_POOL_VARIABLE, raising=False)
    before = pa.default_memory_pool().backend_name
    assert _stage_pools(monkeypatch, fail) == ["system"]
    assert pa.default_memory_pool().backend_name == before


def test_a_pool_chosen_by_the_environment_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARROW_POOL_VARIABLE, "mimalloc")
    before = pa.default_memory_pool().backend_name
    assert _stage_pools(monkeypatch) == [before]


@pytest.mark.skipif(not GLIBC, reason="the system pool's large frees are glibc's to return")
def test_pyarrows_freed_buffers_leave_the_resident_set_under_the_system_pool() -> None:
    process = psutil.Process()
    restore = system_arrow_pool()
    try:
        baseline = process.memory_info().rss
        table = pa.table({"value": pa.array(np.arange(25_000_000, dtype=np.int64)) * 3})  # 200 MB from the pool
        assert process.memory_info().rss - baseline > 150e6
        del table
        return_freed_memory()
        assert process.memory_info().rss - baseline < 50e6
    finally:
        restore()
