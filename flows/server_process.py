"""The warm embedded server's process (``flows.embedded_server`` starts it): Prefect's API app under uvicorn, as
Prefect serves it, on the listening socket the command bound and handed over, ending once no command has held the
lease file for ``IDLE_S`` seconds.  Deciding to end, it keeps the lease exclusively until it is gone, so a command
arriving then waits and starts a new server.
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import sys
import time
from typing import IO, Any

CHECK_S = 1.0


async def _watch_idle(server: Any, lease: IO[bytes], idle_s: float) -> None:
    idle_since = time.monotonic()
    while not server.should_exit:
        await asyncio.sleep(CHECK_S)
        try:
            fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a command holds it (or the lock cannot be taken here: then it is never idle)
            idle_since = time.monotonic()
            continue
        if time.monotonic() - idle_since >= idle_s:
            server.should_exit = True  # the lock is kept: released when this process ends
            return
        fcntl.flock(lease, fcntl.LOCK_UN)


def main(listening_fd: int, idle_s: float, lease_path: str) -> None:
    import uvicorn

    listening = socket.socket(fileno=listening_fd)
    config = uvicorn.Config("prefect.server.api.server:create_app", factory=True, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    with open(lease_path, "a+b") as lease:

        async def serve() -> None:
            watch = asyncio.create_task(_watch_idle(server, lease, idle_s))
            await server.serve(sockets=[listening])
            watch.cancel()

        asyncio.run(serve())


if __name__ == "__main__":  # started by flows.embedded_server only: LISTENING_FD IDLE_S LEASE
    main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
