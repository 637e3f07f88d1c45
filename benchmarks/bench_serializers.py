"""CPU an item by serializer: ``AckQueue(serializer="pickle")`` beside ``serializer="json"``.

A JSON put should cost a pickle put plus the difference between encoding the item as JSON and
as a pickle, nothing more: the serializer is a call on the way in and one on the way out. Each
run puts ``--n`` small dict items one at a time (one commit each), then reopens the file and
gets and acks them with a consumer; process CPU time (all threads) is divided by the items.
Serializers alternate within each run, so the machine's noise falls on both; the median of
``--runs`` runs is printed, with the encoding cost alone (``dumps`` of the same item) beside it.

Run: ``python3 benchmarks/bench_serializers.py [--n 3000] [--runs 5] [--dir /dev/shm]``
(``/dev/shm`` makes fsync nearly free, as a fast NVMe does, so CPU is what is measured).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

import _common as c

import ackqueue
from ackqueue.storage.items import codec_for

ITEM: dict[str, Any] = {"url": "https://example.org/some/page/1234", "depth": 3,
                        "tags": ["a", "b"], "seen": False, "score": 0.5}
SERIALIZERS = ("pickle", "json")


def one_run(directory: str, serializer: str, n: int) -> tuple[float, float]:
    """CPU microseconds a put, and a get+ack, for ``n`` items in a fresh file."""
    d = tempfile.mkdtemp(prefix="ackqueue-ser-", dir=directory)
    path = os.path.join(d, "q.fs")
    try:
        with ackqueue.AckQueue(path, serializer=serializer, autopack=False) as q:
            items = [dict(ITEM, n=i) for i in range(n)]

            def puts() -> None:
                for item in items:
                    q.put(item)

            put = c.cpu_us(n, puts)
        with ackqueue.AckQueue(path, serializer=serializer, autopack=False) as q, \
                q.connect() as consumer:

            def gets() -> None:
                for _ in range(n):
                    consumer.ack(consumer.get_nowait())

            get_ack = c.cpu_us(n, gets)
        return put, get_ack
    finally:
        shutil.rmtree(d, ignore_errors=True)


def encode_us() -> dict[str, float]:
    """CPU microseconds to encode and decode the item, by serializer, as a queue does it."""
    reps = 20_000
    found = {}
    for name in SERIALIZERS:
        codec = codec_for(name)
        start = time.process_time()
        for _ in range(reps):
            codec.decode(codec.encode(ITEM), "the item")
        found[name] = (time.process_time() - start) / reps * 1e6
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = parser.parse_args()
    c.header(f"CPU an item by serializer ({args.n} items, {args.runs} runs, in {args.dir})")
    puts: dict[str, list[float]] = {s: [] for s in SERIALIZERS}
    acks: dict[str, list[float]] = {s: [] for s in SERIALIZERS}
    for run in range(args.runs):
        for serializer in SERIALIZERS if run % 2 == 0 else reversed(SERIALIZERS):
            put, get_ack = one_run(args.dir, serializer, args.n)
            puts[serializer].append(put)
            acks[serializer].append(get_ack)
    codec = encode_us()
    rows = [[s, f"{c.median(puts[s]):.0f}", f"{c.median(acks[s]):.0f}", f"{codec[s]:.1f}"]
            for s in SERIALIZERS]
    print(c.rst_table(rows, ["serializer", "CPU us a put", "CPU us a get+ack",
                             "us to encode+decode"]))
    extra = c.median(puts["json"]) - c.median(puts["pickle"])
    print(f"json put - pickle put: {extra:+.1f} us; encode+decode difference: "
          f"{codec['json'] - codec['pickle']:+.1f} us")


if __name__ == "__main__":
    main()
