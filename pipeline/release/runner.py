"""Where a release's tasks run: ``"auto"`` (the default: ``"dask-local:N"`` with one worker per core of this
machine, at most one per chunk of the lowest level; ``"local"`` where that is one), ``"local"`` (in process),
``"dask-local:N"`` (a local Dask cluster of N worker processes, started for the run) or ``"tcp://host:8786"`` (an
existing scheduler; workers must see the run's folder).  Results come back in submission order, with a bounded number
in flight so driver memory stays bounded.  Every runner gives the same tables under a seed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from censusdp.pipeline.config.model import MeasureOn, ReleaseConfig, check_runner


class LocalRunner:
    name = "local"

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        return (fn(task) for task in tasks)

    def submit(self, fn: Callable[[Any], Any], task: Any) -> Callable[[], Any]:
        """``fn(task)``, computed here when its result is asked for."""
        return lambda: fn(task)

    def close(self) -> None:
        pass


class DaskRunner:
    """Maps tasks on a Dask client; at most ``window`` tasks in flight, results in order."""

    def __init__(self, spec: str, window: int | None = None) -> None:
        import dask
        from distributed import Client

        from censusdp.pipeline.release.local_cluster import QUIET_DASK, local_cluster

        self.name = spec
        self._cluster = None
        self._blas = None
        with dask.config.set(QUIET_DASK):
            if spec.startswith("dask-local:"):
                self._cluster = local_cluster(int(spec.split(":", 1)[1]))
                try:
                    self.client = Client(self._cluster)
                except BaseException:
                    self._cluster.close()
                    raise
            else:
                self.client = Client(spec)
        try:
            # two tasks per worker thread in flight: every worker kept busy, and the driver holds no more (MBs each)
            self.window = window or max(4, 2 * sum(self.client.nthreads().values()))
        except BaseException:
            self.close()
            raise
        if self._cluster is not None:  # the last step: nothing after it can fail and leave the limit set
            from threadpoolctl import threadpool_limits

            # the workers share this machine's cores, which OpenBLAS's spinning idle threads take (docs/dask.md)
            self._blas = threadpool_limits(limits=1, user_api="blas")

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        pending: deque[Any] = deque()
        for task in tasks:
            pending.append(self.client.submit(fn, task, pure=False))
            if len(pending) >= self.window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def submit(self, fn: Callable[[Any], Any], task: Any) -> Callable[[], Any]:
        """``fn(task)`` started on a worker now, beside what ``map`` runs next; the returned call waits for it."""
        return self.client.submit(fn, task, pure=False).result

    def close(self) -> None:
        try:
            self.client.close()
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


def make_runner(spec: str, parallel_tasks: int = 1) -> LocalRunner | DaskRunner:
    """The runner ``spec`` names (``resolved_runner``, on this machine); the caller closes it."""
    spec = resolved_runner(spec, parallel_tasks, machine_cores(), machine_memory())
    return LocalRunner() if spec == "local" else DaskRunner(spec)


def records_on_workers(config: ReleaseConfig, runner: LocalRunner | DaskRunner | None) -> bool:
    """Whether a run's records are read, and its noise drawn, on the runner's Dask workers (``measure_on``)."""
    return runner is not None and runner.name != "local" and config.measure_on is MeasureOn.WORKERS
