"""Soak: minutes of mixed load from 8 threads, sampling RSS, file size and throughput.

Not part of the test suite. Run it for the length you can afford::

    python3 benchmarks/soak.py --minutes 30

Every thread mixes puts, consumer gets with acks and nacks, and plain gets, so the queue
keeps a steady depth. Once per sample interval it prints the process RSS, the size of the
storage files, the queue depth and the operations completed in that interval; a healthy run
keeps all of them flat. At the end it checks that nothing was lost (what was put minus what
was consumed is what is left) and prints a JSON summary.

The file is packed with ``q.pack()`` every ``--pack-interval`` seconds; pass 0 to rely on
whatever automatic packing the queue does by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import rss_mb  # noqa: E402

import ackqueue  # noqa: E402


def storage_bytes(path: str) -> int:
    directory = os.path.dirname(path)
    base = os.path.basename(path)
    return sum(
        os.path.getsize(os.path.join(directory, name))
        for name in os.listdir(directory)
        if name.startswith(base)
    )


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.put = 0
        self.acked = 0
        self.nacked = 0
        self.got = 0  # plain q.get, removed for good
        self.errors: list[str] = []

    def add(self, field: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + n)


def worker(q: ackqueue.AckQueue, counts: Counters, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    payload = "x" * 100
    n = 0
    try:
        with q.connect() as c:
            while not stop.is_set():
                q.put({"thread": seed, "n": n, "payload": payload})
                n += 1
                counts.add("put")
                roll = rng.random()
                if roll < 0.05:
                    try:
                        q.get(timeout=0.5)
                        counts.add("got")
                    except ackqueue.Empty:
                        pass
                    continue
                try:
                    item = c.get(timeout=0.5)
                    if roll < 0.15:
                        # a nack gives the item back: take one more so the depth stays flat
                        c.nack(item)
                        counts.add("nacked")
                        item = c.get(timeout=0.5)
                except ackqueue.Empty:
                    continue
                c.ack(item)
                counts.add("acked")
    except Exception as exc:  # a soak reports failures instead of dying silently
        with counts.lock:
            counts.errors.append(repr(exc))
        stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--depth", type=int, default=1000, help="items queued before the start")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--pack-interval", type=float, default=60.0)
    parser.add_argument("--dir", default=None, help="directory for the queue file")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="ackqueue-soak-", dir=args.dir)
    path = os.path.join(workdir, "soak.fs")
    q = ackqueue.AckQueue(path)
    for i in range(args.depth):
        q.put({"thread": -1, "n": i, "payload": "x" * 100})
    counts = Counters()
    counts.put = args.depth
    stop = threading.Event()
    threads = [
        threading.Thread(target=worker, args=(q, counts, stop, i), name=f"soak-{i}")
        for i in range(args.threads)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    print(
        f"soak: {args.threads} threads, {args.minutes} min, depth {args.depth}, file {path}",
        flush=True,
    )
    print("minute   rss_MB  file_KB   depth  held  ops/s", flush=True)
    samples = []
    last_ops = 0
    last_t = start
    next_pack = start + args.pack_interval if args.pack_interval > 0 else float("inf")
    end = start + args.minutes * 60
    next_sample = start + args.sample
    while not stop.is_set() and time.monotonic() < end:
        stop.wait(max(0.0, min(next_sample, next_pack, end) - time.monotonic()))
        now = time.monotonic()
        if now >= next_pack or (now >= end and args.pack_interval > 0):
            q.pack()
            next_pack = now + args.pack_interval
        if now >= next_sample or now >= end:
            with counts.lock:
                ops = counts.put + counts.acked + counts.nacked + counts.got
            sample = {
                "minute": round((now - start) / 60, 2),
                "rss_mb": round(rss_mb(), 1),
                "file_kb": round(storage_bytes(path) / 1024, 1),
                "depth": q.qsize(),
                "held": q.unacked_count(),
                "ops_per_s": round((ops - last_ops) / (now - last_t)),
            }
            samples.append(sample)
            print(
                f"{sample['minute']:6.2f} {sample['rss_mb']:8.1f} {sample['file_kb']:8.1f} "
                f"{sample['depth']:7d} {sample['held']:5d} {sample['ops_per_s']:6d}",
                flush=True,
            )
            last_ops, last_t = ops, now
            next_sample = now + args.sample
    stop.set()
    for t in threads:
        t.join()
    left = q.qsize()
    held = q.unacked_count()
    q.close()
    with ackqueue.AckQueue(path) as again:
        reopened = again.qsize()
    expected = counts.put - counts.acked - counts.got
    ok = not counts.errors and held == 0 and left == expected and reopened == expected
    summary = {
        "ok": ok,
        "put": counts.put,
        "acked": counts.acked,
        "nacked": counts.nacked,
        "plain_got": counts.got,
        "left": left,
        "expected_left": expected,
        "after_reopen": reopened,
        "errors": counts.errors,
        "samples": samples,
    }
    print(json.dumps(summary), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
