"""The process that tests/queue/test_crash.py kills with SIGKILL, over and over.

    python crash_child.py QUEUE_FILE LOG_FILE RUN_NUMBER work|drain

One producer thread puts numbered items; two consumer threads get, record and ack them, each
holding up to three at a time. Every event is appended to LOG_FILE and fsync'd *after* the
call it records has returned, so the log never claims more than the queue did:

    put N     put(N) returned: N is durable
    got N     a consumer got N (it is held from here until its ack returns)
    acking N  written before ack(N) is called: until then N was certainly not acked
    ack N     ack(N) returned: N is gone for good

With ``ACKQUEUE_TEST_PACK_EVERY`` set (seconds), a thread packs the queue file that often
(``q.pack()``), beside the producer and consumers, so that kills land inside packs too; each
pack is logged ("packing N" before, "packed N" after).

Numbers are unique across runs (RUN_NUMBER * 1,000,000 + i), so a put whose log line was lost
in a kill can never be confused with a later item. "drain" consumes everything left and exits.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from typing import Any

import ackqueue

RUN_BASE = 1_000_000
PUTS_PER_RUN = 400
HOLD_AT_MOST = 3


class Log:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            os.write(self._fd, (line + "\n").encode())
            os.fsync(self._fd)


def produce(q: ackqueue.AckQueue, log: Log, run: int) -> None:
    for i in range(PUTS_PER_RUN):
        n = run * RUN_BASE + i
        q.put(n)
        log.write(f"put {n}")


def consume(q: ackqueue.AckQueue, log: Log, idle_timeout: float) -> None:
    with q.connect() as c:
        while True:
            held = []
            try:
                for _ in range(HOLD_AT_MOST):
                    item = c.get(timeout=idle_timeout if not held else 0.01)
                    log.write(f"got {item}")
                    held.append(item)
            except ackqueue.Empty:
                if not held:
                    return
            for item in held:
                log.write(f"acking {item}")
                c.ack(item)
                log.write(f"ack {item}")


def log_packs(packer: Any, log: Log) -> None:
    """Log "packing N" before each pack and "packed N" after it."""
    pack = packer._pack
    count = itertools.count(1)

    def logged(*args: Any, **kw: Any) -> None:
        n = next(count)
        log.write(f"packing {n}")
        pack(*args, **kw)
        log.write(f"packed {n}")

    packer._pack = logged


def pack_often(q: ackqueue.AckQueue, every: float) -> None:
    while True:
        time.sleep(every)
        try:
            q.pack()
        except ackqueue.QueueClosedError:
            return


def main() -> int:
    path, log_path, run, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    log = Log(log_path)
    q = ackqueue.AckQueue(path)
    log.write(f"run {run} {mode}")
    pack_every = os.environ.get("ACKQUEUE_TEST_PACK_EVERY")
    if pack_every:  # pack all along, beside the producer and consumers: kills land in packs
        log_packs(q._store.packer, log)
        threading.Thread(target=pack_often, args=(q, float(pack_every)), daemon=True).start()
    threads = [
        threading.Thread(target=consume, args=(q, log, 0.5 if mode == "drain" else 30))
        for _ in range(2)
    ]
    if mode == "work":
        threads.append(threading.Thread(target=produce, args=(q, log, run)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q.close()
    log.write(f"end {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
