"""A Dask preload for the ``dask-local`` scheduler's process (``release.local_cluster``): the process ends as soon
as the driver that started it does, killed or not, so its loopback port is never left open to the machine's users.
The watch compares the driver's process id (from the environment) with the scheduler's parent.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

DRIVER_PID_ENV = "CENSUSDP_DRIVER_PID"
TLS_FILES_ENV = "DASK_DISTRIBUTED__COMM__TLS__"  # the variables that name the cluster's key and certificate files
POLL_S = 0.5


def dask_setup(scheduler: Any) -> None:
    """Start the watch (Dask calls this when the scheduler loads the preload)."""
    driver = int(os.environ[DRIVER_PID_ENV])
    threading.Thread(target=watch_parent, args=(driver,), name="censusdp-driver-watch", daemon=True).start()


def watch_parent(driver: int, poll_s: float = POLL_S) -> None:
    """Return never; end the process once its parent is no longer ``driver``, and the cluster's TLS key and
    certificate files with it (the driver, gone, cannot remove them)."""
    while os.getppid() == driver:
        time.sleep(poll_s)
    for name, value in os.environ.items():
        if name.startswith(TLS_FILES_ENV):
            Path(value).unlink(missing_ok=True)
    os._exit(0)
