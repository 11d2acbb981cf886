"""Tasks handed to a Dask scheduler sealed in bytes.  The scheduler unpickles every task it is sent, importing the
modules that its function and arguments name: the release's tasks name numpy, polars, scipy and cvxpy, so a local
cluster's scheduler imported them at the first task of each kind while the workers waited (BENCHMARKS.md, "Speed a
user feels").  A sealed task names only this module; the worker that runs it opens it.  The seal defers the
unpickling and hides nothing: the scheduler holds the same bytes as before.  Futures stay outside the seal, where
Dask sees them and passes their values in; each task keeps its function's name in its key (Dask's estimates of a
task's duration and its logs go by it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any


def seal(fn: Callable[..., Any], task: Any) -> bytes:
    """``fn`` and its task as bytes (``distributed``'s pickling: a function defined in a test travels too)."""
    from distributed.protocol.pickle import dumps

    return dumps((fn, task))


def run_sealed(sealed: bytes, *inputs: Any) -> Any:
    """``fn(task, *inputs)``, on the worker: ``inputs`` are the values of the futures submitted beside the seal."""
    from distributed.protocol.pickle import loads

    fn, task = loads(sealed)
    return fn(task, *inputs)


def submit_sealed(client: Any, fn: Callable[..., Any], task: Any, *inputs: Any) -> Any:
    """``client.submit`` of ``fn(task, *inputs)`` under a key named after ``fn``, never cached (a release's tasks
    draw noise or write files)."""
    from dask.utils import funcname

    return client.submit(run_sealed, seal(fn, task), *inputs, key=f"{funcname(fn)}-{uuid.uuid4().hex}", pure=False)
