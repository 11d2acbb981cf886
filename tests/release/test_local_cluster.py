"""The ``dask-local:N`` runner's cluster: the scheduler runs in a child process, not the driver's (its memory
grows with the tasks it was sent), the workers keep glibc's default allocator settings, and closing leaves no
process and no file behind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import psutil

from pipeline.release.runner import DaskRunner


def _worker_facts(_: int) -> tuple[int, str | None]:
    return os.getpid(), os.environ.get("MALLOC_TRIM_THRESHOLD_")


def test_scheduler_runs_in_its_own_process_and_everything_goes_at_close() -> None:
    runner = DaskRunner("dask-local:2")
    try:
        cluster = runner._cluster
        scheduler = cluster.scheduler
        folder = scheduler._folder
        assert folder.is_dir()
        scheduler_pid = scheduler.process.pid
        children = {child.pid for child in psutil.Process().children(recursive=True)}
        assert scheduler_pid != os.getpid() and scheduler_pid in children
        assert runner.client.scheduler_info()["address"].startswith("tcp://127.0.0.1:")
        facts = list(runner.map(_worker_facts, range(8)))
        assert [n for n in runner.map(lambda n: n * n, range(6))] == [n * n for n in range(6)]
        worker_pids = {pid for pid, _ in facts}
        assert len(worker_pids) == 2 and worker_pids <= children and os.getpid() not in worker_pids
        assert {threshold for _, threshold in facts} == {None}
        assert sum(runner.client.nthreads().values()) == 2
        # the client's connection keeps no copy of the tasks it sent (distributed's developer log of messages)
        payload = np.arange(20_000, dtype=np.int64)
        assert list(runner.map(np.sum, [payload, payload + 1])) == [payload.sum(), payload.sum() + 20_000]
        assert len(runner.client.scheduler_comm.recent_message_log) == 0
    finally:
        runner.close()
    assert not Path(folder).exists()
    assert not psutil.pid_exists(scheduler_pid) or psutil.Process(scheduler_pid).status() == psutil.STATUS_ZOMBIE
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
               for pid in worker_pids)
