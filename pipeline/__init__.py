"""censusdp's release pipeline.

Set here, before any module of the package imports polars or pyarrow, because both read their allocator's settings
once, when they load:

- polars' allocator (jemalloc, read from ``_RJEM_MALLOC_CONF``, after the 0.5 s / 1 s decays polars itself puts
  first) keeps freed pages for a while, so a stage's large, short-lived frames (a nation's geography codes, sorted
  and checked) stayed in the resident set into the next stage. With no delay they go back as they are freed:
  50M-person nation, the geography's validation on the driver peaked at 0.34 GB instead of 0.43 GB.
- pyarrow's C++ default pool (mimalloc unless ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise) is what its Parquet
  reader and writer allocate from whatever pool Python names: mimalloc kept those pages (a 1 GiB reservation,
  53 MB resident after the GLS of a 10M-person nation) where neither ``malloc_trim`` nor the next stage reached
  them. The system allocator returns them (10M, ``dask-local:2``: the driver's peak 0.43 -> 0.38 GB).

A value you set yourself is kept; a process that imported polars or pyarrow before censusdp keeps their defaults
(``pipeline.release.memory.system_arrow_pool`` still gives pyarrow's Python side the system pool during a release).
Child processes (a local Dask cluster's workers) inherit both settings.
"""

import os

POLARS_ALLOCATOR_VARIABLE = "_RJEM_MALLOC_CONF"
ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"  # pyarrow's own setting
ARROW_POOL_CHOSEN = bool(os.environ.get(ARROW_POOL_VARIABLE))  # by the user (or a parent process): left alone
os.environ.setdefault(POLARS_ALLOCATOR_VARIABLE, "dirty_decay_ms:0,muzzy_decay_ms:0")
os.environ.setdefault(ARROW_POOL_VARIABLE, "system")
