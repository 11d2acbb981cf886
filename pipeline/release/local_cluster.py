"""The ``dask-local:N`` runner's cluster: N worker processes on this machine, and the scheduler in a process of
its own.

Not in the driver's process, where ``distributed.LocalCluster`` puts it: the scheduler keeps state for every task
it was sent and its memory grows with the run (1M-person nation: the driver's RSS after the block level was
0.74 GB with the scheduler inside, 0.43 GB with it outside), and its event loop would share the driver's GIL.
The nannies stay here, as ``LocalCluster``'s do: they are small, and they read their settings from this process.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path

import dask
from distributed import Nanny, SpecCluster
from distributed.deploy.subprocess import SubprocessScheduler
from distributed.worker_memory import parse_memory_limit

_log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"  # nothing off this machine may join


def local_cluster(workers: int) -> SpecCluster:
    """``workers`` worker processes of one thread each (the solvers are single-threaded and hold the GIL in
    places) and a scheduler process, all on the loopback interface.

    Dask's nannies set MALLOC_TRIM_THRESHOLD_=65536, which also fixes glibc's mmap threshold: every array over
    128 KiB is then mapped and unmapped afresh, and the page faults made the block level's reconciliation 1.5x
    slower (2M-person nation, one process: 80 s against 52 s; that run spent 42 s in the kernel).  A nanny reads
    that setting when it is made, so it is cleared around the cluster's start."""
    worker = {"cls": Nanny, "options": {
        "host": LOOPBACK, "nthreads": 1, "dashboard": False, "silence_logs": logging.ERROR,
        "memory_limit": parse_memory_limit("auto", 1, workers, logger=_log)}}
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        return SpecCluster(workers=dict.fromkeys(range(workers), worker),
                           scheduler={"cls": SchedulerProcess, "options": {}},
                           silence_logs=logging.ERROR, name="censusdp-local")


class SchedulerProcess(SubprocessScheduler):
    """A ``distributed.Scheduler`` in a child process (``python -m dask spec``), killed with the cluster.  Its
    log is read and dropped as it comes: left unread, the pipe it writes to would fill and stop it."""

    def __init__(self) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="censusdp-scheduler-"))
        self._drain: asyncio.Task[None] | None = None
        super().__init__(scheduler_kwargs={
            "host": LOOPBACK, "port": 0, "dashboard": False, "dashboard_address": None,
            "scheduler_file": str(self._folder / "scheduler.json")})

    async def start(self) -> None:
        await super().start()
        assert self.process is not None and self.process.stderr is not None
        self._drain = asyncio.ensure_future(_discard(self.process.stderr))

    async def close(self) -> None:
        if self._drain is not None:  # closing reads what is left of the log: the drain must stop first
            self._drain.cancel()
            await asyncio.gather(self._drain, return_exceptions=True)
        try:
            await super().close()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(1 << 16):
        pass
