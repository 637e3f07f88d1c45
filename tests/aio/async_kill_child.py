"""Child of test_async_kill: async consumers (and a thread producer) on one queue file, logging
each step after it returns, until the test kills the process with SIGKILL.

argv: path log [shared]. Log lines: "got N", "acking N", "acked N" (one os.write each: a
SIGKILL keeps what was written, the page cache survives the process)."""

from __future__ import annotations

import asyncio
import os
import sys

from ackqueue import AsyncAckQueue

path, log_path = sys.argv[1], sys.argv[2]
shared = len(sys.argv) > 3 and sys.argv[3] == "shared"
log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def log(what: str, item: int) -> None:
    os.write(log_fd, f"{what} {item}\n".encode())


async def worker(q: AsyncAckQueue[int], n: int) -> None:
    async with q.connect() as c:
        while True:
            item = await c.get()
            log("got", item)
            await asyncio.sleep(0)  # other tasks run while this one holds its item
            log("acking", item)
            await c.ack(item)
            log("acked", item)


async def main() -> None:
    options = {"shared": True, "session_timeout": 1} if shared else {}
    async with AsyncAckQueue(path, **options) as q:
        log("ready", 0)
        await asyncio.gather(*(worker(q, n) for n in range(8)))


asyncio.run(main())
