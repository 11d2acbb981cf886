"""Where a release's tasks run: ``"auto"`` (the default: ``"dask-local:N"`` with one worker per core of this
machine, at most one per chunk of the lowest level; ``"local"`` where that is one), ``"local"`` (in process),
``"dask-local:N"`` (a local Dask cluster of N worker processes, started for the run) or ``"tcp://host:8786"`` (an
existing scheduler; workers must see the run's folder).  Results come back in submission order, with a bounded number
in flight so driver memory stays bounded.  Every runner gives the same tables under a seed.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from censusdp.pipeline.config.model import MeasureOn, ReleaseConfig, check_runner
from censusdp.pipeline.release.sealed_tasks import submit_sealed


class LocalRunner:
    name = "local"
    workers = 1

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        return (fn(task) for task in tasks)

    def driver_takes_next(self) -> bool:
        """Every task runs here, none while a cluster starts."""
        return False

    def submit(self, fn: Callable[[Any], Any], task: Any) -> Callable[[], Any]:
        """``fn(task)``, computed here when its result is asked for."""
        return lambda: fn(task)

    def close(self) -> None:
        pass


_NO_TASK = object()
STARTING_SWITCH_S = 0.0005  # the interpreter's switch interval while a cluster starts (Python's default: 0.005)
_starting_lock = threading.Lock()
_starting = {"clusters": 0, "interval": 0.0}  # clusters starting in this process, and the interval before the first


@contextmanager
def _short_switch_interval() -> Iterator[None]:
    """The nannies that spawn a local cluster's workers run in this process's event loop, beside the driver's charge:
    a shorter switch interval lets them take the interpreter's lock while the workers boot.  Set by the first of the
    clusters starting at once and given back by the last, so one that starts meanwhile cannot keep it."""
    with _starting_lock:
        if _starting["clusters"] == 0:
            _starting["interval"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_starting["interval"], STARTING_SWITCH_S))
        _starting["clusters"] += 1
    try:
        yield
    finally:
        with _starting_lock:
            _starting["clusters"] -= 1
            if _starting["clusters"] == 0:
                sys.setswitchinterval(_starting["interval"])


class DaskRunner:
    """Maps tasks on a Dask client; at most ``window`` tasks in flight, results in order.  A local cluster starts in
    a thread of its own, so the driver's next steps (the charge's fingerprint) go on while its processes boot; the
    first use waits for it (``client``); with ``driver_helps``, a local cluster's ``map`` runs tasks in this
    process until then (in order: results keep coming in submission order)."""

    def __init__(self, spec: str, window: int | None = None, *, driver_helps: bool = False) -> None:
        self.name = spec
        # a local cluster's processes read what this one may (``measure_on = "auto"``): it runs tasks until they start
        self._driver_helps = driver_helps and spec.startswith("dask-local:")
        self._cluster: Any = None
        self._client: Any = None
        self._window = window
        self._blas = None
        self._error: BaseException | None = None
        self._starting = threading.Thread(target=self._start, name="censusdp-dask-start", daemon=True)
        self._starting.start()
        if spec.startswith("dask-local:"):  # the last step: nothing after it can fail and leave the limit set
            from threadpoolctl import threadpool_limits

            # the workers share this machine's cores, which OpenBLAS's spinning idle threads take (docs/dask.md)
            self._blas = threadpool_limits(limits=1, user_api="blas")

    def _start(self) -> None:
        try:  # the imports too: a failing one is raised at the first use, not lost in this thread
            import dask
            from distributed import Client

            from censusdp.pipeline.release.local_cluster import QUIET_DASK, local_cluster

            with dask.config.set(QUIET_DASK), _short_switch_interval():
                if self.name.startswith("dask-local:"):
                    self._cluster = local_cluster(int(self.name.split(":", 1)[1]))
                    self._client = Client(self._cluster)
                else:
                    self._client = Client(self.name)
        except BaseException as error:  # noqa: BLE001 - raised in the driver's thread at the first use
            self._error = error

    @property
    def client(self) -> Any:
        """The Dask client, once the cluster has started (a start's error is raised here)."""
        self._starting.join()
        if self._error is not None:
            raise self._error
        return self._client

    @property
    def window(self) -> int:
        """Tasks in flight: two per worker thread keep every worker busy, and the driver holds no more (MBs each)."""
        return self._window or max(4, 2 * self.workers)

    @property
    def workers(self) -> int:
        """The worker threads the cluster has: a local cluster's one-thread workers, known before it has started (a
        question to the scheduler costs a round trip); an existing cluster's, asked once it is connected."""
        if self.name.startswith("dask-local:"):
            return int(self.name.split(":", 1)[1])
        return sum(self.client.nthreads().values())

    def driver_takes_next(self) -> bool:
        """Whether this process runs the next task itself: ``driver_helps``, while the cluster starts."""
        return self._driver_helps and self._starting.is_alive()

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        remaining = iter(tasks)
        while self.driver_takes_next():
            task = next(remaining, _NO_TASK)
            if task is _NO_TASK:
                return
            yield fn(task)
        client, window = self.client, self.window
        pending: deque[Any] = deque()
        for task in remaining:
            pending.append(submit_sealed(client, fn, task))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def submit(self, fn: Callable[[Any], Any], task: Any) -> Callable[[], Any]:
        """``fn(task)`` started on a worker now, beside what ``map`` runs next; the returned call waits for it."""
        return submit_sealed(self.client, fn, task).result

    def close(self) -> None:
        try:
            self._starting.join()
            if self._client is not None:
                self._client.close()
        finally:
            try:
                if self._cluster is not None:
                    self._cluster.close()
            finally:  # the driver's own BLAS setting comes back whatever the cluster's closing does
                if self._blas is not None:
                    self._blas.restore_original_limits()
                    self._blas = None


WORKER_BYTES = 2 << 30  # "auto" gives each worker at least this much of the machine's memory


def machine_cores() -> int:
    """The cores this process may use: its CPU affinity and a container's CPU quota (cgroups) both counted."""
    from dask.system import CPU_COUNT

    return int(CPU_COUNT)


def machine_memory() -> int:
    """The memory this process may use, in bytes (a container's limit counted)."""
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT)


def resolved_runner(spec: str, parallel_tasks: int, cores: int, memory: int) -> str:
    """The runner ``spec`` names for a release of ``parallel_tasks`` independent chunks at its lowest level, on
    ``cores`` cores and ``memory`` bytes: ``"auto"`` is a worker per core, no more workers than chunks nor than
    ``WORKER_BYTES`` fit in the memory, and one process where that is one."""
    check_runner(spec)
    if spec != "auto":
        return spec
    workers = min(cores, parallel_tasks, memory // WORKER_BYTES)
    return "local" if workers <= 1 else f"dask-local:{workers}"


def make_runner(spec: str, parallel_tasks: int = 1, *, driver_helps: bool = False) -> LocalRunner | DaskRunner:
    """The runner ``spec`` names (``resolved_runner``, on this machine); the caller closes it.  ``driver_helps``:
    this process takes tasks while a local cluster starts (``DaskRunner``)."""
    spec = resolved_runner(spec, parallel_tasks, machine_cores(), machine_memory())
    return LocalRunner() if spec == "local" else DaskRunner(spec, driver_helps=driver_helps)


def records_on_workers(config: ReleaseConfig, runner: LocalRunner | DaskRunner | None) -> bool:
    """Whether a run's records are read, and its noise drawn, on the runner's Dask workers (``measure_on``)."""
    return runner is not None and runner.name != "local" and config.measure_on is not MeasureOn.DRIVER
