"""Runner specs: "auto" (the default), local, a local cluster of N workers, or an existing scheduler's address (plain
TCP or TLS); "auto" sized by the machine's cores and the release's chunks."""

from __future__ import annotations

import pytest

from censusdp.pipeline.config.model import ReleaseConfig, check_runner
from censusdp.pipeline.release.runner import machine_cores, resolved_runner


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
    assert resolved_runner("auto", parallel_tasks=14, cores=2) == "dask-local:2"
    assert resolved_runner("auto", parallel_tasks=3, cores=32) == "dask-local:3"  # no idle worker started
    assert resolved_runner("auto", parallel_tasks=1, cores=32) == "local"  # one chunk: no cluster to pay for
    assert resolved_runner("auto", parallel_tasks=14, cores=1) == "local"
    for spec in ("local", "dask-local:5", "tcp://10.0.0.5:8786"):  # a runner asked for is the runner used
        assert resolved_runner(spec, parallel_tasks=1, cores=8) == spec
    with pytest.raises(ValueError, match="unknown runner"):
        resolved_runner("dask", parallel_tasks=4, cores=4)
    assert 1 <= machine_cores() <= 4096
