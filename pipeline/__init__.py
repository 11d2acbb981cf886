"""censusdp's release pipeline.

Set here, before any module of the package imports polars: polars' allocator (jemalloc, read from
``_RJEM_MALLOC_CONF`` when polars loads, after the 0.5 s / 1 s decays polars itself puts first) keeps freed pages
for a while, so a stage's large, short-lived frames (a nation's geography codes, sorted and checked) stayed in the
resident set into the next stage. With no delay they go back as they are freed: 50M-person nation, the geography's
validation on the driver peaked at 0.34 GB instead of 0.43 GB. A value you set yourself is kept; a process that
imported polars before censusdp keeps polars' default.
"""

import os

POLARS_ALLOCATOR_VARIABLE = "_RJEM_MALLOC_CONF"
os.environ.setdefault(POLARS_ALLOCATOR_VARIABLE, "dirty_decay_ms:0,muzzy_decay_ms:0")
