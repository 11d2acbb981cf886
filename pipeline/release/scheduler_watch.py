"""A Dask preload for the ``dask-local`` scheduler's process (``release.local_cluster``): the process ends as soon
as the driver that started it does, killed or not.

Without it a driver killed by a signal (SIGKILL, the OOM killer, SIGTERM, which runs no Python clean-up) would
leave the scheduler running with its loopback port open, and anyone on the machine could submit work through it.
The driver's process id comes in the environment; the watch compares it with the scheduler's parent, which
changes (to an init process or subreaper) when the driver dies.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

DRIVER_PID_ENV = "CENSUSDP_DRIVER_PID"
POLL_S = 0.5


def dask_setup(scheduler: Any) -> None:
    """Start the watch (Dask calls this when the scheduler loads the preload)."""
    driver = int(os.environ[DRIVER_PID_ENV])
    threading.Thread(target=watch_parent, args=(driver,), name="censusdp-driver-watch", daemon=True).start()


def watch_parent(driver: int, poll_s: float = POLL_S) -> None:
    """Return never; end the process once its parent is no longer ``driver``."""
    while os.getppid() == driver:
        time.sleep(poll_s)
    os._exit(0)
