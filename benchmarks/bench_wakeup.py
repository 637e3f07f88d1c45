"""How soon a consumer blocked in ``get()`` has the item a producer thread puts.

A consumer thread blocks in ``get()``; once it is blocked (a 2 ms pause after it says it is
about to block: this is a benchmark, not a test), the main thread puts one item. Figures, as
medians over ``--samples`` items: from ``put()`` returning (the item is durable) to ``get()``
returning it, and from ``put()`` being called to ``get()`` returning it. ``queue.Queue`` gives
the floor of the same thread hand-off. ackqueue has no polling loop: ``put`` notifies the
standard library's condition variable, as ``queue.Queue`` does.

Run: ``python3 benchmarks/bench_wakeup.py [--samples 200]``.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from typing import Any

import _common as c

import ackqueue


def measure(q: Any, get: Any, ack: Any, samples: int) -> tuple[float, float]:
    about_to_block = threading.Event()
    got_at: list[float] = []
    done = threading.Event()

    def consumer() -> None:
        for _ in range(samples):
            about_to_block.set()
            x = get()
            got_at.append(time.perf_counter())
            ack(x)
            done.set()

    t = threading.Thread(target=consumer)
    t.start()
    after_put: list[float] = []
    from_call: list[float] = []
    for i in range(samples):
        about_to_block.wait()
        about_to_block.clear()
        time.sleep(0.002)  # let the consumer reach its blocking wait
        called = time.perf_counter()
        q.put(c.item(i))
        returned = time.perf_counter()
        done.wait()
        done.clear()
        after_put.append(got_at[-1] - returned)
        from_call.append(got_at[-1] - called)
    t.join()
    return c.median(after_put) * 1e3, c.median(from_call) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()
    c.header(f"get() wake-up after a put() from another thread (median of {args.samples}, ms)")
    rows = []
    for durability in ("strict", "relaxed"):
        with c.tmpdir() as d:
            q = ackqueue.AckQueue(os.path.join(d, "q.fs"), durability=durability)
            holder: dict[str, Any] = {}

            def get(q: Any = q, holder: dict[str, Any] = holder) -> Any:
                if "c" not in holder:
                    holder["c"] = q.connect()
                return holder["c"].get()

            def ack(x: Any, holder: dict[str, Any] = holder) -> None:
                holder["c"].ack(x)

            a, b = measure(q, get, ack, args.samples)
            q.close()
        rows.append([f"ackqueue ({durability})", f"{a:.3f}", f"{b:.3f}"])
    std: queue.Queue[bytes] = queue.Queue()
    a, b = measure(std, std.get, lambda x: std.task_done(), args.samples)
    rows.append(["queue.Queue", f"{a:.3f}", f"{b:.3f}"])
    for r in rows:
        print(f"  {r[0]:<20} after put() returned: {r[1]} ms   from put() call: {r[2]} ms")
    print()
    print(c.rst_table(rows, ["queue", "ms after put() returns", "ms after put() is called"]))


if __name__ == "__main__":
    main()
