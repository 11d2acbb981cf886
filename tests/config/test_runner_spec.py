"""Runner specs: local, a local cluster of N workers, or an existing scheduler's address (plain TCP or TLS)."""

from __future__ import annotations

import pytest

from censusdp.pipeline.config.model import check_runner


@pytest.mark.parametrize("spec", ["local", "dask-local:1", "dask-local:32", "tcp://10.0.0.5:8786",
                                  "tls://scheduler.example:8786"])
def test_known_runners_are_accepted(spec: str) -> None:
    assert check_runner(spec) == spec


@pytest.mark.parametrize("spec", ["dask", "dask-local:0", "dask-local:x", "dask-local:", "http://host:8786",
                                  "inproc://x", "LOCAL"])
def test_anything_else_is_refused_with_the_choices(spec: str) -> None:
    with pytest.raises(ValueError, match="unknown runner") as caught:
        check_runner(spec)
    assert "tls://host:port" in str(caught.value)
