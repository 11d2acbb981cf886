"""The ``dask-local:N`` runner's cluster: the scheduler runs in a child process, not the driver's (its memory
grows with the tasks it was sent), the workers keep glibc's default allocator settings, nothing keeps copies of
the tasks sent, closing leaves no process and no file behind, and a killed driver takes its scheduler with it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import dask
import numpy as np
import psutil
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from censusdp.pipeline.io.histograms import compact_counts
from censusdp.pipeline.release.runner import DaskRunner
from censusdp.pipeline.release.sealed_tasks import submit_sealed

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _blas_threads() -> dict[str, int]:
    """Each BLAS library's threads, by file (a library built without threads, e.g. one a solver brings, stays at 1
    whatever is asked of it: left out)."""
    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()
            if pool["user_api"] == "blas" and pool.get("threading_layer") != "disabled"}


def test_scheduler_runs_in_its_own_process_and_everything_goes_at_close(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    planted = tmp_path / "planted"  # a module of the working directory's, named as one the workers import
    planted.mkdir()
    (planted / "cvxpy.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    monkeypatch.chdir(planted)
    own_blas = threadpool_limits(limits=2, user_api="blas")  # the driver's own setting, whatever this machine's
    before = _blas_threads()
    assert before and set(before.values()) == {2}
    switch = sys.getswitchinterval()
    runner = DaskRunner("dask-local:2")
    try:
        # asked before its workers have started, a runner the driver does not help waits for them
        assert os.getpid() not in set(runner.map(lambda _: os.getpid(), range(2)))
        assert sys.getswitchinterval() == switch  # shortened while the nannies started the workers, then given back
        # the driver's BLAS runs one thread while the workers share its cores (idle OpenBLAS threads spin), and
        # so does each worker's (Dask's nannies set it)
        assert _blas_threads() == dict.fromkeys(before, 1)
        assert set(runner.client.run(lambda: os.environ.get("OPENBLAS_NUM_THREADS")).values()) == {"1"}
        scheduler = runner._cluster.scheduler
        folder = scheduler._folder
        assert folder.is_dir() and (folder.stat().st_mode & 0o077) == 0  # only this user reads its log
        scheduler_pid = scheduler.process.pid
        children = {child.pid for child in psutil.Process().children(recursive=True)}
        assert scheduler_pid != os.getpid() and scheduler_pid in children
        assert runner.client.run_on_scheduler(os.getpid) == scheduler_pid
        address = runner.client.scheduler_info()["address"]
        assert address.startswith("tls://127.0.0.1:")
        # another user of the machine, without the cluster's key, can neither join it nor run code in it
        from distributed import Client
        from distributed.security import Security

        with pytest.raises(OSError):  # a key of its own: the handshake is refused (TimeoutError is an OSError)
            Client(address, timeout=5, security=Security.temporary())
        with pytest.raises(OSError):
            Client(address.replace("tls://", "tcp://"), timeout=5)
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.glob("*.pem"))
        worker_pids = set(runner.client.run(os.getpid).values())
        assert len(worker_pids) == 2 and worker_pids <= children and os.getpid() not in worker_pids
        thresholds = runner.client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert set(thresholds.values()) == {None}
        assert [n for n in runner.map(lambda n: n * n, range(6))] == [n * n for n in range(6)]
        # neither the client's connection nor the scheduler keeps copies of the tasks sent
        payload = np.arange(20_000, dtype=np.int64)
        assert list(runner.map(np.sum, [payload, payload + 1])) == [payload.sum(), payload.sum() + 20_000]
        assert len(runner.client.scheduler_comm.recent_message_log) == 0
        # the tasks reach the scheduler sealed: it imports none of the modules they name (a release's first task
        # of each kind waited for that), only its own preload and the seal's
        assert [c.tolist() for c in runner.map(compact_counts, [payload])] == [payload.tolist()]
        sealed = submit_sealed(runner.client, compact_counts, payload)  # named after its function, for Dask's logs
        assert sealed.key.startswith("compact_counts-") and sealed.result().tolist() == payload.tolist()
        heavy = ("censusdp", "polars", "pyarrow", "scipy", "cvxpy")
        loaded = runner.client.run_on_scheduler(lambda: sorted(m for m in sys.modules if m.startswith(heavy)))
        assert loaded == ["censusdp", "censusdp.pipeline", "censusdp.pipeline.release",
                          "censusdp.pipeline.release.scheduler_watch", "censusdp.pipeline.release.sealed_tasks"]
        started = runner.submit(lambda _: os.getpid(), None)
        assert started() in worker_pids  # a job started beside the mapped tasks runs on a worker
        # (the scheduler runs with -P: a function of this test module is not importable there, dask's is)
        assert runner.client.run_on_scheduler(dask.config.get, "distributed.admin.low-level-log-length") == 0
    finally:
        runner.close()
        blas_after = _blas_threads()
        own_blas.restore_original_limits()
    assert blas_after == before  # given back at close
    assert not folder.exists()
    assert _gone(scheduler_pid) and all(_gone(pid) for pid in worker_pids)
    assert not (tmp_path / "imported").exists()  # no process of the cluster took a module from the working directory


DRIVER = """
import sys, time
from censusdp.pipeline.release.runner import DaskRunner
runner = DaskRunner("dask-local:1")
runner.client  # started
print(runner._cluster.scheduler.process.pid, runner._cluster.scheduler._folder, flush=True)
time.sleep(600)
"""


def test_a_killed_driver_takes_its_scheduler_with_it() -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        pid_text, folder = driver.stdout.readline().split()
        scheduler_pid = int(pid_text)
        assert psutil.pid_exists(scheduler_pid)
        driver.send_signal(signal.SIGKILL)  # no clean-up of any kind runs in the driver
        driver.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not _gone(scheduler_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(scheduler_pid)
    finally:
        driver.kill()
        driver.wait()
    assert not list(Path(folder).glob("*.pem"))  # the cluster's key went with its scheduler
    Path(folder).joinpath("scheduler.log").unlink(missing_ok=True)  # the killed driver could not remove its folder
    Path(folder).joinpath("scheduler.json").unlink(missing_ok=True)
    Path(folder).rmdir()


def test_a_helping_driver_runs_tasks_only_while_its_workers_start() -> None:
    """``measure_on = "auto"``: the driver takes a local cluster's first tasks while its workers boot (they read
    what it may: one machine), in order, and none once they have started."""
    runner = DaskRunner("dask-local:1", driver_helps=True)
    try:
        early = list(runner.map(lambda n: (n, os.getpid()), range(3)))
        assert [n for n, _ in early] == [0, 1, 2] and early[0][1] == os.getpid()  # a boot takes far longer
        worker = set(runner.client.run(os.getpid).values())
        assert {pid for _, pid in runner.map(lambda n: (n, os.getpid()), range(3))} == worker
    finally:
        runner.close()


def test_clusters_starting_at_once_give_the_switch_interval_back() -> None:
    """The shorter interval is set by the first start and given back by the last, in either order of ending."""
    from censusdp.pipeline.release.runner import STARTING_SWITCH_S, _short_switch_interval

    before = sys.getswitchinterval()
    for first_ends_first in (True, False):
        first, second = _short_switch_interval(), _short_switch_interval()
        first.__enter__()
        second.__enter__()
        assert sys.getswitchinterval() == min(before, STARTING_SWITCH_S)
        (first if first_ends_first else second).__exit__(None, None, None)
        assert sys.getswitchinterval() == min(before, STARTING_SWITCH_S)  # the other is still starting
        (second if first_ends_first else first).__exit__(None, None, None)
        assert sys.getswitchinterval() == before
