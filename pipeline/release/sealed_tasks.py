"""Tasks handed to a Dask scheduler sealed in bytes.  The scheduler unpickles every task it is sent, importing the
modules that its function and arguments name: the release's tasks name numpy, polars, scipy and cvxpy, so a local
cluster's scheduler spent half a second importing them at the first task of each kind while the workers waited
(BENCHMARKS.md).  A sealed task names only this module, which imports nothing of the release's; the worker that runs
it opens it.  Futures stay outside the seal, where Dask sees them and passes their values in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distributed.protocol.pickle import dumps, loads


def seal(fn: Callable[..., Any], task: Any) -> bytes:
    """``fn`` and its task as bytes (``distributed``'s pickling: a function defined in a test travels too)."""
    return dumps((fn, task))


def run_sealed(sealed: bytes, *inputs: Any) -> Any:
    """``fn(task, *inputs)``, on the worker: ``inputs`` are the values of the futures submitted beside the seal."""
    fn, task = loads(sealed)
    return fn(task, *inputs)


def submit_sealed(client: Any, fn: Callable[..., Any], task: Any, *inputs: Any) -> Any:
    """``client.submit`` of ``fn(task, *inputs)``, never cached (a release's tasks draw noise or write files)."""
    return client.submit(run_sealed, seal(fn, task), *inputs, pure=False)
