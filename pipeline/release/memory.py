"""The driver gives the memory a stage freed back to the system before the next stage starts.

glibc's malloc keeps freed heap pages for reuse, and a stage's large temporaries (the geography's codes, a
level's chunk plan, the Dask client's message buffers, which its own thread allocates in an arena of its own)
leave holes that the next stage does not fill in the same shape: the driver's RSS then carries every stage's
high-water mark forward.  ``malloc_trim(0)`` returns the free pages of every arena (10M-person nation,
``dask-local:2``: RSS after the block level 0.67 GB -> 0.62 GB).  Elsewhere than glibc it does nothing.

pyarrow's default pool (mimalloc) keeps the pages of the Parquet it read and wrote (measurements, invariants,
GLS chunks) for its own reuse, where neither ``malloc_trim`` nor the next stage's other allocations reach them.
Its C++ side (the Parquet reader and writer) takes the pool ``ARROW_DEFAULT_MEMORY_POOL`` names when pyarrow
loads, which ``pipeline/__init__`` sets to ``system`` first; ``system_arrow_pool`` gives its Python side the same
pool while a release runs, for a process that imported pyarrow first (10M-person nation, ``dask-local:2``: the
driver's peak 0.43 -> 0.38 GB with both).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import platform
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pyarrow as pa

import pipeline


def return_freed_memory() -> None:
    """Return the free pages of glibc's heaps to the system (a no-op off glibc), and ask pyarrow's pools for theirs
    (mimalloc's, where a process loaded pyarrow before censusdp set its pool)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa.default_memory_pool().release_unused()
    if pa.default_memory_pool().backend_name != "system":
        return
    with contextlib.suppress(NotImplementedError):  # a pyarrow built without mimalloc
        pa.mimalloc_memory_pool().release_unused()


@dataclass(frozen=True)
class FreedAfter:
    """``fn``, then ``return_freed_memory``: what a Dask worker runs for each task.  A worker runs task after task
    (a state's fingerprint, then its measurement, then reconciliation chunks), and glibc kept the heap pages each
    one freed, so a worker's RSS carried every task's high-water mark forward (50M-person nation, ``dask-local:2``:
    each worker held about 1.1 GB from the measure stage to the end, its largest task's peak being +0.4 GB)."""

    fn: Callable[..., Any]

    @property
    def __name__(self) -> str:  # what Dask names the task after: the function, never its bound arguments
        fn = self.fn
        while isinstance(fn, functools.partial):  # a partial's repr shows its arguments (a fingerprint's key)
            fn = fn.func
        return getattr(fn, "__name__", type(fn).__name__)

    def __repr__(self) -> str:
        return f"FreedAfter({self.__name__})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.fn(*args, **kwargs)
        finally:
            return_freed_memory()


MMAP_THRESHOLD = 1 << 20  # bytes: glibc serves allocations this large by mmap, so their free returns them
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)


def large_allocations_mapped() -> None:
    """Make glibc serve every allocation of ``MMAP_THRESHOLD`` or more by ``mmap`` (process-wide, for good; a
    no-op off glibc).  By default glibc raises that threshold to the size of any mapped block freed (up to 32 MB),
    so a stage's chunk-sized arrays (4M-cell chunks: 14-32 MB, read, decoded and freed over and over) came from
    the heap and left it fragmented: 10M-person nation, ``dask-local:2``, the driver's RSS after the GLS 0.35 GB
    and 52 MB of free heap kept; with the threshold fixed, 0.31 GB and 18 MB."""
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


@cache
def _mallopt() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None  # musl and others: no malloc_trim, and nothing of glibc's to load
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # this process's own C library
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_pool_lock = threading.Lock()
_pool_users: list[pa.MemoryPool] = []  # the pool to put back once the last release running in this process ends


def system_arrow_pool() -> Callable[[], None]:
    """Make the system allocator pyarrow's default pool (unless the user chose one with
    ``ARROW_DEFAULT_MEMORY_POOL``) and return what puts the previous pool back.  Buffers remember the pool they came
    from, so switching is safe.  Releases running in threads of one process share the setting: the first sets it,
    the last to end puts back what was there before the first (the returned call is idempotent)."""
    if pipeline.ARROW_POOL_CHOSEN:
        return lambda: None
    with _pool_lock:
        _pool_users.append(pa.default_memory_pool())
        pa.set_memory_pool(pa.system_memory_pool())
    done = threading.Event()

    def restore() -> None:
        with _pool_lock:
            if done.is_set():
                return
            done.set()
            first = _pool_users.pop(0)
            if not _pool_users:
                pa.set_memory_pool(first)
            else:
                _pool_users[0] = first  # the earliest pool seen is what the last release puts back
    return restore
