"""Retry with exponential backoff, and dead letters for the job that never succeeds.

A WorkerPool acks a job when its handler returns and nacks it with a growing delay when the
handler raises. A job that fails ``max_attempts`` times goes to the dead letters, where it
can be read, requeued or purged (``ackqueue dead PATH``), instead of looping forever.

    python examples/retry_with_backoff.py /tmp/retry.fs
"""

import argparse
import logging
import sys
import threading

import ackqueue

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("path", nargs="?", default="retry.fs", help="the queue file")
path = parser.parse_args().path
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
q = ackqueue.AckQueue(path, max_attempts=4)
jobs = ["ok-1", "flaky-1", "ok-2", "flaky-2", "ok-3", "poison"]
for job in jobs:
    q.put(job)

failures: dict[str, int] = {}
lock = threading.Lock()


def handle(job):
    with lock:
        tries = failures.get(job, 0)
        if job.startswith("flaky") and tries < 2 or job == "poison":
            failures[job] = tries + 1
            raise ConnectionError(f"{job}: the remote end is not answering")


retry = ackqueue.Retry(base=0.05, factor=2.0, max_delay=1.0)  # 0.05 s, 0.1 s, 0.2 s, ...
stats = ackqueue.WorkerPool(q, handle, threads=3, retry=retry).run_until_empty()
if stats.interrupted:  # Ctrl-C or SIGTERM: what is left stays queued for the next run
    print(f"stopped by {stats.stopped_by} after {stats.done} done; run again to finish")
    q.close()
    sys.exit(stats.exit_code)  # 130 after Ctrl-C, as a shell reports it
print(f"done {stats.done}, failed attempts {stats.failed}, dead {stats.dead}")
for letter in q.dead_letters():
    print(f"dead letter: {letter.item!r} after {letter.attempts} attempts ({letter.reason})")
q.close()
sys.exit(0 if stats.done == 5 and stats.dead == 1 else 1)
