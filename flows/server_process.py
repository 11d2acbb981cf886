"""The warm embedded server's process (``flows.embedded_server`` starts it): Prefect's API app under uvicorn, as
Prefect serves it, which ends once no command has held the lease file for ``--idle-s`` seconds.  Deciding to end,
it keeps the lease exclusively until it is gone, so a command arriving then waits and starts a new server.
"""

from __future__ import annotations

import asyncio
import fcntl
import sys
import time
from typing import IO, Any

CHECK_S = 2.0


async def _watch_idle(server: Any, lease: IO[bytes], idle_s: float) -> None:
    idle_since = time.monotonic()
    while not server.should_exit:
        await asyncio.sleep(CHECK_S)
        try:
            fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a command holds it
            idle_since = time.monotonic()
            continue
        if time.monotonic() - idle_since >= idle_s:
            server.should_exit = True  # the lock is kept: released when this process ends
            return
        fcntl.flock(lease, fcntl.LOCK_UN)


def main(port: int, idle_s: float, lease_path: str) -> None:
    import uvicorn

    config = uvicorn.Config("prefect.server.api.server:create_app", factory=True, host="127.0.0.1", port=port,
                            log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    with open(lease_path, "a+b") as lease:

        async def serve() -> None:
            watch = asyncio.create_task(_watch_idle(server, lease, idle_s))
            await server.serve()
            watch.cancel()

        asyncio.run(serve())


if __name__ == "__main__":  # started by flows.embedded_server only: PORT IDLE_S LEASE
    main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
