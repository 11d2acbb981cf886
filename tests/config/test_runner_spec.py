"""Runner specs: "auto" (the default), local, a local cluster of N workers, or an existing scheduler's address (plain
TCP or TLS); "auto" sized by the machine's cores and the release's chunks."""

from __future__ import annotations

import os

import pytest

from censusdp.pipeline.config.model import ReleaseConfig, check_runner
from censusdp.pipeline.release.runner import WORKER_BYTES, machine_cores, machine_memory, resolved_runner


@pytest.mark.parametrize("spec", ["auto", "local", "dask-local:1", "dask-local:32", "tcp://10.0.0.5:8786",
                                  "tls://scheduler.example:8786"])
def test_known_runners_are_accepted(spec: str) -> None:
    assert check_runner(spec) == spec


@pytest.mark.parametrize("spec", ["dask", "dask-local:0", "dask-local:x", "dask-local:", "http://host:8786",
                                  "inproc://x", "LOCAL", "AUTO"])
def test_anything_else_is_refused_with_the_choices(spec: str) -> None:
    with pytest.raises(ValueError, match="unknown runner") as caught:
        check_runner(spec)
    assert "tls://host:port" in str(caught.value) and '"auto"' in str(caught.value)


def test_the_default_uses_every_core_where_there_is_work_for_it() -> None:
    assert ReleaseConfig.__dataclass_fields__["runner"].default == "auto"
    plenty = 64 * WORKER_BYTES

    def auto(tasks: int, cores: int, memory: int = plenty) -> str:
        return resolved_runner("auto", parallel_tasks=tasks, cores=cores, memory=memory)

    assert auto(14, 2) == "dask-local:2"
    assert auto(3, 32) == "dask-local:3"  # no idle worker started
    assert auto(1, 32) == "local"  # one chunk: no cluster to pay for
    assert auto(14, 1) == "local"
    assert auto(14, 32, memory=5 * WORKER_BYTES) == "dask-local:5"  # each worker keeps room to work
    assert auto(14, 32, memory=WORKER_BYTES + 1) == "local"
    for spec in ("local", "dask-local:5", "tcp://10.0.0.5:8786"):  # a runner asked for is the runner used
        assert resolved_runner(spec, parallel_tasks=1, cores=8, memory=WORKER_BYTES) == spec
    with pytest.raises(ValueError, match="unknown runner"):
        resolved_runner("dask", parallel_tasks=4, cores=4, memory=plenty)
    assert 1 <= machine_cores() <= len(os.sched_getaffinity(0))  # a CPU quota can only lower it
    assert machine_memory() > 0
