"""Scaling out over ZEO: consumer throughput with 1, 2 and 4 processes on one ZEO server, beside
one process on a FileStorage, in one run (the machine is shared, so only same-run ratios mean
much); and how fast a get blocked in one process wakes when another process puts.

    python benchmarks/bench_zeo.py [--items 2000] [--threads 4] [--processes 1,2,4]

Each consumer thread does ``c.get()`` then ``c.ack()`` (and, in a second table, ``get_many``
and ``ack_many`` of ``--batch`` items): on ZEO that is two commits per get and ack (the hold,
then the ack), on a FileStorage one (a get commits nothing in a single process).
Items are put beforehand with ``put_many``; the clock runs from "go" to the last ack.
A ZEO server (``runzeo``) on 127.0.0.1 is started and stopped by the script.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONSUMER = _common.COUNTING_CONFLICTS + r"""
where, threads, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
q = ackqueue.AckQueue(where)
consumers = [q.connect() for _ in range(threads)]
print("ready", flush=True)
sys.stdin.readline()
done = [0] * threads
last = [0.0] * threads

def work(n, c):
    while True:
        try:
            items = c.get_many(batch, timeout=1.0)
        except ackqueue.Empty:
            return
        c.ack_many(items)
        done[n] += len(items)
        last[n] = time.time()

ts = [threading.Thread(target=work, args=(n, c)) for n, c in enumerate(consumers)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps({"done": sum(done), "last": max(last), "conflicts": Conflicts.count}), flush=True)
for c in consumers:
    c.close()
q.close()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_zeo(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    path = os.path.join(directory, "zeo.fs")
    argv = [sys.executable, "-m", "ZEO.runzeo", "-a", f"127.0.0.1:{port}", "-f", path]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"zeo://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)


def fill(where: str, items: int) -> None:
    from ackqueue import AckQueue

    with AckQueue(where) as q:
        for start in range(0, items, 500):
            q.put_many([{"n": n, "url": f"http://example.org/{n}"} for n in
                        range(start, min(items, start + 500))])


def consume(
    where: str, processes: int, threads: int, items: int, batch: int = 1
) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    argv = [sys.executable, "-c", CONSUMER, where, str(threads), str(batch)]
    go, results = _common.start_together([argv] * processes, env)
    done = sum(r["done"] for r in results)
    assert done == items, f"consumed {done} of {items}"
    seconds = max(r["last"] for r in results) - go
    return {"items/s": done / seconds, "conflicts": sum(r["conflicts"] for r in results)}


def wake_latency(uri: str, rounds: int) -> list[float]:
    """Seconds from a put in one ZEO client to the return of a get blocked in another."""
    import ZEO

    from ackqueue import AckQueue

    host, port = uri[len("zeo://"):].split(":")
    db = ZEO.DB((host, int(port)))
    producer, consumer = AckQueue(uri, name="wake"), AckQueue(db=db, name="wake")
    waits = []
    try:
        for n in range(rounds):
            got = threading.Event()

            def blocked(got: threading.Event = got) -> None:
                consumer.get(timeout=30)
                got.set()

            t = threading.Thread(target=blocked)
            t.start()
            time.sleep(0.05)  # let the get block first: this measures the wake-up, not a race
            began = time.perf_counter()
            producer.put(n)
            got.wait(30)
            waits.append(time.perf_counter() - began)
            t.join()
    finally:
        producer.close()
        consumer.close()
        db.close()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--batch", type=int, default=10, help="get_many/ack_many size, 2nd table")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    counts = [int(n) for n in args.processes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "single.fs")
        fill(path, args.items)
        single = consume(path, 1, args.threads, args.items)
        print(f"FileStorage, 1 process x {args.threads} threads: "
              f"{single['items/s']:8.0f} items/s (get+ack; a get commits nothing)")
        server, uri = start_zeo(tmp)
        try:
            for batch in (1, args.batch):
                base = None
                for n in counts:
                    fill(uri, args.items)  # one queue, drained by each run in turn
                    r = consume(uri, n, args.threads, args.items, batch)
                    base = base or r["items/s"]
                    print(f"ZEO, {n} process(es) x {args.threads} threads, batch {batch}:"
                          f" {r['items/s']:6.0f} items/s  x{r['items/s'] / base:4.2f} of 1 process,"
                          f" x{r['items/s'] / single['items/s']:4.2f} of FileStorage;"
                          f" {r['conflicts']} conflicts retried")
            waits = wake_latency(uri, 20)
            print(f"wake-up across ZEO clients: median {statistics.median(waits) * 1000:.0f} ms,"
                  f" max {max(waits) * 1000:.0f} ms over {len(waits)} puts")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
