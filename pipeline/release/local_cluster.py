"""The ``dask-local:N`` runner's cluster: N worker processes on this machine, and the scheduler in a process of its
own, which ends with the driver however it ends (``scheduler_watch``; why not in the driver's process: docs/dask.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dask
from distributed import Nanny, SpecCluster
from distributed.deploy.spec import ProcessInterface
from distributed.security import Security
from distributed.worker_memory import parse_memory_limit

from censusdp.pipeline.release.scheduler_watch import DRIVER_PID_ENV

_log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"  # nothing off this machine may join
STARTUP_S = 120.0  # a loaded machine or a network-mounted environment imports slowly
# distributed keeps the last messages each connection sent, for its developers: the driver's are its tasks, arrays
# included (docs/dask.md).  The driver's client (any runner's) and a local cluster's processes keep none.
QUIET_DASK = {"distributed.admin.low-level-log-length": 0}
# imported by each worker as it starts, while the driver charges: else every worker's first task pays for them
WORKER_MODULES = ("censusdp.pipeline.release.group_tasks", "censusdp.pipeline.release.reconcile_chunk",
                  "censusdp.pipeline.io.fingerprint", "cvxpy")


def local_cluster(workers: int) -> SpecCluster:
    """``workers`` one-thread worker processes and a scheduler process, on the loopback interface only, speaking
    mutual TLS under a key made for this cluster alone (another user of the machine cannot join it, nor run code in
    it); the nannies' MALLOC_TRIM_THRESHOLD_, which slows the workers (docs/dask.md), is cleared around the start."""
    security = Security.temporary()
    worker = {"cls": Nanny, "options": {
        "host": LOOPBACK, "nthreads": 1, "dashboard": False, "silence_logs": logging.ERROR, "security": security,
        "protocol": "tls", "preload": list(WORKER_MODULES),
        "memory_limit": parse_memory_limit("auto", 1, workers, logger=_log)}}
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None, **QUIET_DASK}):
        return SpecCluster(workers=dict.fromkeys(range(workers), worker),
                           scheduler={"cls": SchedulerProcess, "options": {"security": security}},
                           security=security, silence_logs=logging.ERROR, name="censusdp-local")


class SchedulerProcess(ProcessInterface):
    """A ``distributed.Scheduler`` in a child process (``python -P``: no module from the working directory), killed
    with the cluster.  Its log goes to a folder only this user can read, shown if the scheduler fails or ends early."""

    def __init__(self, security: Security) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="censusdp-scheduler-"))
        self._security = security
        self.process: asyncio.subprocess.Process | None = None
        super().__init__()

    def _tls_environment(self) -> dict[str, str]:
        """The cluster's certificate (its own authority too: self-signed) and key as two files only this user reads,
        named to the scheduler for every role through Dask's configuration variables (it speaks to workers and
        clients)."""
        paths = {}
        for name, pem in (("cert", self._security.tls_scheduler_cert), ("key", self._security.tls_scheduler_key)):
            paths[name] = self._folder / f"{name}.pem"
            descriptor = os.open(paths[name], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(pem)
        environment = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
                       "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(paths["cert"])}
        for role in ("SCHEDULER", "WORKER", "CLIENT"):
            environment[f"DASK_DISTRIBUTED__COMM__TLS__{role}__CERT"] = str(paths["cert"])
            environment[f"DASK_DISTRIBUTED__COMM__TLS__{role}__KEY"] = str(paths["key"])
        return environment

    async def start(self) -> None:
        scheduler_file = self._folder / "scheduler.json"
        spec = {"cls": "distributed.Scheduler", "opts": {
            "host": LOOPBACK, "port": 0, "protocol": "tls", "dashboard": False, "dashboard_address": None,
            "scheduler_file": str(scheduler_file), "preload": ["censusdp.pipeline.release.scheduler_watch"]}}
        environment = {**os.environ, DRIVER_PID_ENV: str(os.getpid()),
                       "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH": "0", **self._tls_environment()}
        with (self._folder / "scheduler.log").open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "dask", "spec", "--spec", json.dumps(spec),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=environment)
        deadline = time.monotonic() + STARTUP_S
        while self.address is None:
            if self.process.returncode is not None:
                raise RuntimeError(f"the Dask scheduler exited at start (code {self.process.returncode}); "
                                   f"its log:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.process.kill()
                await self.process.wait()
                raise RuntimeError(f"the Dask scheduler did not start within {STARTUP_S:.0f} s; its log:\n"
                                   f"{self._log_tail()}")
            try:
                self.address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):  # not written yet, or half written
                await asyncio.sleep(0.1)
        await super().start()

    async def close(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        elif process is not None:
            _log.warning("the Dask scheduler's process had ended (code %s); its log:\n%s", process.returncode,
                         self._log_tail())
        shutil.rmtree(self._folder, ignore_errors=True)
        await super().close()

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self._folder / "scheduler.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
