"""Very many small items: put N (default 1,000,000), reopen, read some back; time and RSS.

    python3 benchmarks/many_items.py --items 1000000

Puts go through ``put_many``, 1,000 items a call. Prints one JSON line with the put rate,
the RSS after the puts, the file size, the time to reopen (after a clean close, after the
file's index is removed, and after a process that had it open was SIGKILLed, leaving its
counts in the commits' metadata), and the time of qsize() with everything queued.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from _common import rss_mb  # noqa: E402 - after the path set-up above

import ackqueue  # noqa: E402


def put_all(q: ackqueue.AckQueue, n: int, payload: bytes) -> str:
    for lo in range(0, n, 1000):
        q.put_many([(i, payload) for i in range(lo, min(n, lo + 1000))])
    return "put_many x1000"


REOPEN = """
import sys, time
sys.path.insert(0, sys.argv[2])
t = time.monotonic()
import ackqueue
q = ackqueue.AckQueue(sys.argv[1])
n = q.qsize()
print(time.monotonic() - t, n)
"""


# A process that had the queue open and is SIGKILLed after a few commits: its counts since its
# last fold are only in the commits' metadata, for the next opener to check and add up.
KILLED = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
import ackqueue
q = ackqueue.AckQueue(sys.argv[1])
with q.connect() as c:
    for i in range(10):
        q.put(i)
        c.ack(c.get())
os.kill(os.getpid(), signal.SIGKILL)
"""


def timed_reopen(path: str) -> tuple[float, int]:
    out = subprocess.run(
        [sys.executable, "-c", REOPEN, path, REPO_ROOT], capture_output=True, text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per item")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    path = os.path.join(tempfile.mkdtemp(prefix="ackqueue-many-", dir=args.dir), "q.fs")
    q = ackqueue.AckQueue(path)
    start = time.monotonic()
    how = put_all(q, args.items, b"x" * args.size)
    put_s = time.monotonic() - start
    t = time.perf_counter()
    depth = q.qsize()
    qsize_us = (time.perf_counter() - t) * 1e6
    rss_after_put = rss_mb()
    with q.connect() as c:
        t = time.monotonic()
        for _ in range(1000):
            c.ack(c.get())
        get_ack_s = time.monotonic() - t
    q.close()
    clean_s, clean_n = timed_reopen(path)
    os.remove(path + ".index")  # an index lost: a scan of the file
    killed_s, killed_n = timed_reopen(path)
    subprocess.run([sys.executable, "-c", KILLED, path, REPO_ROOT], check=False)
    sigkill_s, sigkill_n = timed_reopen(path)
    print(json.dumps({
        "items": args.items,
        "how": how,
        "put_seconds": round(put_s, 1),
        "puts_per_s": round(args.items / put_s),
        "qsize_after_put": depth,
        "qsize_us": round(qsize_us, 1),
        "rss_mb_after_put": round(rss_after_put, 1),
        "file_mb": round(os.path.getsize(path) / 2**20, 1),
        "get_ack_1000_s": round(get_ack_s, 2),
        "reopen_clean_s": round(clean_s, 2),
        "reopen_without_index_s": round(killed_s, 2),
        "reopen_after_sigkill_s": round(sigkill_s, 2),
        "reopen_counts": [clean_n, killed_n, sigkill_n],
    }))
    return 0 if clean_n == killed_n == sigkill_n == args.items - 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
