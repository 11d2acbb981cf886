"""The driver returns freed heap pages to the system after every stage (glibc's ``malloc_trim``), and gives
pyarrow the system allocator while a release runs (mimalloc's cached pages reached neither)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pyarrow as pa
import pytest

import pipeline
from pipeline.release import stages
from pipeline.release.memory import return_freed_memory, system_arrow_pool

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
    monkeypatch.setattr(stages, "large_allocations_mapped", lambda: events.append("mapped"))
    monkeypatch.setattr(stages, "tabulate", lambda run: None)
    monkeypatch.setattr(stages, "reconcile", lambda run, level, runner: None)
    run = SimpleNamespace(config=SimpleNamespace(runner="local", levels=("us", "state", "county")))
    run.universes = lambda: [run, run]

    def call(stage: stages.Stage, function: object, args: tuple[object, ...]) -> None:
        events.append(stage.name)

    sequence = (stages.Stage("reconcile", "reconcile", per_level=True, needs_runner=True, per_universe=True),
                stages.Stage("tabulate", "tabulate"))
    stages.run_stages(run, sequence, call=call)
    assert events == ["mapped"] + ["reconcile", "trim"] * 6 + ["tabulate", "trim"]


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


@pytest.fixture
def mimalloc_default() -> Iterator[None]:
    """pyarrow's Python-side default made mimalloc (a process that imported pyarrow before censusdp)."""
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    yield
    pa.set_memory_pool(before)


@pytest.mark.parametrize("fail", [False, True])
def test_stages_run_with_pyarrows_system_pool_and_the_previous_comes_back(monkeypatch: pytest.MonkeyPatch,
                                                                         mimalloc_default: None,
                                                                         fail: bool) -> None:
    monkeypatch.setattr(pipeline, "ARROW_POOL_CHOSEN", False)
    assert _stage_pools(monkeypatch, fail) == ["system"]
    assert pa.default_memory_pool().backend_name == "mimalloc"


def test_a_pool_chosen_by_the_user_is_left_alone(monkeypatch: pytest.MonkeyPatch, mimalloc_default: None) -> None:
    monkeypatch.setattr(pipeline, "ARROW_POOL_CHOSEN", True)
    assert _stage_pools(monkeypatch) == ["mimalloc"]


ARROW_PROBE = """
import sys
if sys.argv[1] == "censusdp":
    import pipeline
import os
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
path = os.path.join(sys.argv[2], "probe.parquet")
pq.write_table(pa.table({"value": np.arange(2_000_000)}), path)
table = pq.read_table(path)
print(pa.default_memory_pool().backend_name, pa.mimalloc_memory_pool().max_memory())
"""


def _arrow_probe(first: str, env: dict[str, str], folder: Path) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", ARROW_PROBE, first, str(folder)], capture_output=True, text=True,
                         check=True, env=env, timeout=120).stdout.split()
    return out[0], int(out[1])


def test_parquet_io_allocates_from_the_system_pool_after_censusdp_is_imported(tmp_path: Path) -> None:
    # the Parquet reader and writer take pyarrow's C++ default pool, set from the environment when pyarrow loads:
    # pa.set_memory_pool alone left them on mimalloc (32 MB of it for this file)
    env = {k: v for k, v in os.environ.items() if k != pipeline.ARROW_POOL_VARIABLE}
    assert _arrow_probe("censusdp", env, tmp_path) == ("system", 0)
    backend, mimalloc_bytes = _arrow_probe("pyarrow-alone", env, tmp_path)
    assert backend == "mimalloc" and mimalloc_bytes > 10e6, (backend, mimalloc_bytes)
    # a pool the user chose is kept
    chosen = {**env, pipeline.ARROW_POOL_VARIABLE: "mimalloc"}
    backend, mimalloc_bytes = _arrow_probe("censusdp", chosen, tmp_path)
    assert backend == "mimalloc" and mimalloc_bytes > 10e6, (backend, mimalloc_bytes)


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


@pytest.mark.parametrize(("main", "estimates", "kept"), [(False, False, False), (False, True, False),
                                                         (True, False, False), (True, True, True)])
def test_invariants_are_dropped_after_the_lowest_level_unless_estimates_read_them(main: bool, estimates: bool,
                                                                                  kept: bool) -> None:
    held = {0: ["the root's"], 5: ["a value per block"]}
    run = SimpleNamespace(main=main, config=SimpleNamespace(output=SimpleNamespace(estimates=estimates)),
                          invariants=dict(held))
    stages.ReleaseRun.drop_invariants(run)  # type: ignore[arg-type]
    assert run.invariants == (held if kept else {})


@pytest.mark.parametrize("first_ends_first", [True, False])
def test_overlapping_releases_share_the_system_pool_and_the_last_puts_back_the_first_ones_pool(
        monkeypatch: pytest.MonkeyPatch, mimalloc_default: None, first_ends_first: bool) -> None:
    monkeypatch.setattr(pipeline, "ARROW_POOL_CHOSEN", False)
    first, second = system_arrow_pool(), system_arrow_pool()
    assert pa.default_memory_pool().backend_name == "system"
    ending = (first, second) if first_ends_first else (second, first)
    ending[0]()
    ending[0]()  # idempotent: a second call changes nothing
    assert pa.default_memory_pool().backend_name == "system"  # the other release still runs
    ending[1]()
    assert pa.default_memory_pool().backend_name == "mimalloc"


MAPPED_PROBE = """
import sys
import numpy as np, psutil
from pipeline.release.memory import large_allocations_mapped
if sys.argv[1] == "mapped":
    large_allocations_mapped()
process = psutil.Process()
warm = np.ones(1 << 19)  # 4 MB, mapped: its free raises glibc's dynamic threshold to 4 MB
del warm
baseline = process.memory_info().rss
arrays, keep = [], []
for i in range(50):  # 4 MB arrays with small heap blocks between them, the small ones kept
    arrays.append(np.ones(1 << 19))
    keep.append(bytes(2048) + i.to_bytes(4, "little"))
del arrays
print((process.memory_info().rss - baseline) // (1 << 20))
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_large_arrays_go_back_to_the_system_as_they_are_freed() -> None:
    # glibc's own tunables (e.g. a MALLOC_TRIM_THRESHOLD_ a Dask nanny left) also fix the threshold: none here
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}

    def kept_mb(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", MAPPED_PROBE, mode], capture_output=True, text=True, check=True,
                             timeout=120, env=env)
        return int(out.stdout.split()[-1])

    assert kept_mb("default") > 100  # glibc's own threshold rose: the arrays came from the heap and stayed
    assert kept_mb("mapped") < 20


def test_a_worker_task_returns_its_freed_memory_after_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FreedAfter``: the task's result (or its error) unchanged, then a trim; the runner and the measure stage
    send every task to the workers wrapped so."""
    from pipeline.release import measuring, memory, runner

    events: list[str] = []
    monkeypatch.setattr(memory, "return_freed_memory", lambda: events.append("trim"))
    assert memory.FreedAfter(lambda x, y=0: events.append("task") or x + y)(2, y=3) == 5
    with pytest.raises(ZeroDivisionError):
        memory.FreedAfter(lambda: 1 // 0)()
    assert events == ["task", "trim", "trim"]

    submitted: list[object] = []

    class Future:
        def __init__(self, fn: object, *args: object) -> None:
            submitted.append(fn)
            self.value = fn(*args) if isinstance(fn, memory.FreedAfter) else None

        def result(self) -> object:
            return self.value

        def cancel(self) -> None:
            pass

    client = SimpleNamespace(submit=lambda fn, *args, pure=True: Future(fn, *args))
    dask_runner = object.__new__(runner.DaskRunner)
    dask_runner.client, dask_runner.window = client, 2
    assert list(dask_runner.map(lambda x: x * 2, [1, 2, 3])) == [2, 4, 6]
    assert dask_runner.submit(lambda x: -x, 4)() == -4
    assert all(isinstance(fn, memory.FreedAfter) for fn in submitted)
    submitted.clear()
    monkeypatch.setattr(measuring, "measure_group", lambda task: (task, task))
    monkeypatch.setattr(measuring, "measure_upper", lambda upper, totals: "upper")
    groups, upper = measuring.dask_measure(client, ["a", "b"], "the upper task", 1)
    list(groups)
    assert isinstance(submitted[0], memory.FreedAfter) and submitted[0].fn is measuring.measure_group
    assert upper is not None and upper() == "upper"
    assert isinstance(submitted[-1], memory.FreedAfter) and submitted[-1].fn is measuring.measure_upper


def test_a_wrapped_task_is_named_after_its_function_never_its_arguments() -> None:
    """Dask names a task (its key, its log lines) after the callable: a wrapped partial's bound arguments, such as
    a fingerprint's HMAC key, must not appear there."""
    from functools import partial

    from dask.utils import funcname
    from distributed.utils import key_split

    from pipeline.io.fingerprint import part_digests
    from pipeline.release.memory import FreedAfter

    wrapped = FreedAfter(partial(partial(part_digests, "files"), key=b"secret-fingerprint-key", with_paths=False))
    assert funcname(wrapped) == "part_digests" and repr(wrapped) == "FreedAfter(part_digests)"
    assert "secret" not in funcname(wrapped) and "secret" not in repr(wrapped) and "secret" not in str(wrapped)
    assert key_split(f"{funcname(wrapped)}-0123abcd") == "part_digests"
