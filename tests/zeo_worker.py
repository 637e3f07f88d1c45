"""A worker process for the ZEO tests: threads that put, get and ack one shared queue.

Every event is appended to a log file as one line written with one ``os.write`` on an
``O_APPEND`` descriptor, so a SIGKILL never leaves half a line and threads never interleave:
``P id`` a put returned (confirmed), ``D id`` a get returned it, ``A id`` its ack returned,
``H id`` got and held on purpose (never acked), ``W t`` thread t waits to be killed,
``L id`` its ack was fenced off because this process lost its session, ``E what`` an error the
worker rode out.

Usage: zeo_worker.py URI LOG ROLE THREADS ITERATIONS SESSION_TIMEOUT
ROLE ``normal`` runs its iterations and exits; ``victim`` then puts and gets one more item per
thread, holds what it got and waits to be killed.
"""

from __future__ import annotations

import os
import sys
import threading

import ackqueue
from ackqueue import Empty, LeaseExpiredError, NotHeldError, StorageError


def main() -> None:
    uri, log_path, role = sys.argv[1], sys.argv[2], sys.argv[3]
    threads, iterations, session_timeout = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    me = os.path.basename(log_path)

    def log(kind: str, what: object) -> None:
        os.write(fd, f"{kind} {what}\n".encode())

    q = ackqueue.AckQueue(uri, session_timeout=session_timeout)
    forever = threading.Event()

    def put(item: str) -> None:
        for attempt in range(100):
            name = item if not attempt else f"{item}-r{attempt}"  # a failed put may be stored
            try:
                q.put(name)
            except StorageError as exc:
                log("E", f"put {exc!r}")
                continue
            log("P", name)
            return

    def get(c: ackqueue.Consumer) -> str | None:
        for _ in range(100):
            try:
                item: str = c.get(timeout=3)
                return item
            except Empty:
                return None
            except StorageError as exc:
                log("E", f"get {exc!r}")
        return None

    def ack(c: ackqueue.Consumer, item: str) -> None:
        for attempt in range(100):
            try:
                c.ack(item)
            except StorageError as exc:
                log("E", f"ack {exc!r}")
                continue
            except LeaseExpiredError:  # this process was cut off longer than its lease
                log("L", item)
                return
            except NotHeldError as exc:
                if not attempt:
                    raise
                log("E", f"ack {exc!r}")  # an earlier try committed after all
            log("A", item)
            return

    def work(t: int) -> None:
        with q.connect() as c:
            for i in range(iterations):
                put(f"{me}-{t}-{i}")
                item = get(c)
                if item is not None:
                    log("D", item)
                    ack(c, item)
            if role == "victim":
                # Hold one item per thread. Put one first: the others may have taken every
                # item there was (a server restart can leave this process far behind).
                for extra in range(100):
                    put(f"{me}-{t}-extra{extra}")
                    item = get(c)
                    if item is not None:
                        log("H", item)
                        break
                log("W", t)
                forever.wait()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    q.close()
    log("X", "done")


if __name__ == "__main__":
    main()
