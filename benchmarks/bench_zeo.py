"""Shared mode across processes: consumer throughput of ``AckQueue(path, shared=True)`` with 1,
2 and 4 processes, beside one process on a plain FileStorage, in one run (the machine is shared,
so only same-run ratios mean much); conflicts retried per item; and how fast a get blocked in one
process wakes when another process puts.

    python benchmarks/bench_zeo.py [--items 2000] [--threads 1] [--processes 1,2,4] [--rounds 1]
    python benchmarks/bench_zeo.py --zeo ...   # a runzeo server on 127.0.0.1 instead

Each consumer thread does ``c.get()`` then ``c.ack()`` (and, in a second table, ``get_many``
and ``ack_many`` of ``--batch`` items). Items are put beforehand with ``put_many``; the clock
runs from "go" to the last ack. With ``shared=True`` the first opener starts the queue file's
private ZEO server (every commit fsynced, as in strict single-process mode); each run uses a
fresh file. ``--delayed N`` first puts N items an hour ahead, which every look for the next
ready item passes over (a scheduler's jobs). ``--zeo`` measures a ``runzeo`` server on
127.0.0.1 started by the script instead (the figures of 2026-11-21 were taken that way, with 4
threads a process).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONSUMER = r"""
import json, logging, sys, threading, time
import ackqueue

class Conflicts(logging.Handler):
    count = 0
    def emit(self, record):
        if "conflict" in record.getMessage():
            Conflicts.count += 1
        elif record.levelno >= logging.WARNING:
            print(record.getMessage(), file=sys.stderr, flush=True)

log = logging.getLogger("ackqueue")
log.setLevel(logging.DEBUG)
log.addHandler(Conflicts())
log.propagate = False
where, threads, batch, shared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
q = ackqueue.AckQueue(where, shared=True) if shared == "shared" else ackqueue.AckQueue(where)
consumers = [q.connect() for _ in range(threads)]
print("ready", flush=True)
sys.stdin.readline()
cpu_at_go = time.process_time()
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
cpu = time.process_time()
print(json.dumps({"done": sum(done), "last": max(last), "conflicts": Conflicts.count,
                  "cpu": cpu - cpu_at_go}), flush=True)
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


def open_queue(where: str, shared: bool) -> Any:
    from ackqueue import AckQueue

    return AckQueue(where, shared=True) if shared else AckQueue(where)


def fill(where: str, items: int, shared: bool = False, delayed: int = 0) -> None:
    """``delayed`` items due in an hour first (ahead of the others, as a scheduler's jobs put
    earlier are), then ``items`` ready ones."""
    with open_queue(where, shared) as q:
        for start in range(0, delayed, 500):
            q.put_many([{"later": n} for n in range(start, min(delayed, start + 500))],
                       delay=3600)
        for start in range(0, items, 500):
            q.put_many([{"n": n, "url": f"http://example.org/{n}"} for n in
                        range(start, min(items, start + 500))])


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))


def consume(
    where: str, processes: int, threads: int, items: int, batch: int = 1, shared: bool = False
) -> dict[str, float]:
    argv = [sys.executable, "-c", CONSUMER, where, str(threads), str(batch),
            "shared" if shared else "plain"]
    server = server_cpu(where) if shared else None
    go, results = _common.start_together([argv] * processes, env())
    done = sum(r["done"] for r in results)
    assert done == items, f"consumed {done} of {items}"
    seconds = max(r["last"] for r in results) - go
    # CPU an item, clients and server: on a loaded machine this moves less than items/s does.
    # The clients' figure includes their 1 s wait for more at the end (the Empty timeout).
    server_ms = (server_cpu(where) - server) * 1000 / done if server is not None else 0.0
    return {"items/s": done / seconds, "conflicts": sum(r["conflicts"] for r in results),
            "client ms": sum(r["cpu"] for r in results) * 1000 / done, "server ms": server_ms}


def server_cpu(path: str) -> float:
    """CPU seconds used so far by the server that shared=True started for ``path``."""
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"ackqueue.storage.zeoserver" not in b" ".join(argv) or path.encode() not in argv:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, ValueError, IndexError):
            continue
    return float("nan")


WAKER = r"""
import sys, ackqueue
where, shared, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
q = ackqueue.AckQueue(where, shared=True) if shared == "shared" else ackqueue.AckQueue(where)
""" + _common.WAKER_LOOP


def wake_latency(where: str, shared: bool, rounds: int) -> list[float]:
    """Seconds from the call of a put in this process to the return of a get blocked in
    another process (the put's own commit included)."""
    q = open_queue(where, shared)
    waker = subprocess.Popen([sys.executable, "-c", WAKER, where,
                              "shared" if shared else "plain", str(rounds)],
                             env=env(), stdout=subprocess.PIPE, text=True, cwd=_common.TREE)
    assert waker.stdout is not None
    waits = []
    try:
        for _ in range(rounds):
            assert waker.stdout.readline().strip() == "ready"
            time.sleep(0.1)  # let the get block first: this measures the wake-up, not a race
            q.put(time.time())
            waits.append(float(waker.stdout.readline()))
    finally:
        waker.wait()
        q.close()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1, help="consumer threads a process")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--batch", type=int, default=10, help="get_many/ack_many size, 2nd table")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; medians are printed")
    parser.add_argument("--zeo", action="store_true", help="a runzeo server on 127.0.0.1")
    parser.add_argument("--delayed", type=int, default=0,
                        help="items put an hour ahead first, which every look passes over")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    counts = [int(n) for n in args.processes.split(",")]
    table: dict[tuple[int, int], list[dict[str, float]]] = {}
    singles: list[float] = []
    waits: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.zeo:
            server, uri = start_zeo(tmp)
        try:
            for round_ in range(args.rounds):
                path = os.path.join(tmp, f"single{round_}.fs")
                fill(path, args.items, delayed=args.delayed)
                singles.append(consume(path, 1, args.threads, args.items)["items/s"])
                print(f"FileStorage, 1 process x {args.threads} threads: {singles[-1]:8.0f} "
                      "items/s (get+ack; a get commits nothing)", flush=True)
                for batch in (1, args.batch):
                    for n in counts:
                        where = uri if server else os.path.join(tmp, f"q{round_}-{batch}-{n}.fs")
                        fill(where, args.items, shared=server is None, delayed=args.delayed)
                        r = consume(where, n, args.threads, args.items, batch, server is None)
                        table.setdefault((batch, n), []).append(r)
                        print(f"  {n} process(es) x {args.threads} threads, batch {batch}: "
                              f"{r['items/s']:6.0f} items/s, {r['conflicts']} conflicts retried, "
                              f"CPU ms an item: clients {r['client ms']:.2f}, "
                              f"server {r['server ms']:.2f}", flush=True)
                wake_at = uri if server else os.path.join(tmp, f"wake{round_}.fs")
                waits += wake_latency(wake_at, server is None, 20)
        finally:
            if server is not None:
                server.terminate()
                server.wait()
    kind = "runzeo on 127.0.0.1" if args.zeo else "shared=True"
    ahead = f" behind {args.delayed} delayed" if args.delayed else ""
    print(f"\n{kind}, {args.threads} consumer thread(s) a process, {args.items} items{ahead}, "
          f"medians of {args.rounds} round(s); FileStorage 1 process: "
          f"{_common.median(singles):,.0f} items/s")
    print("| batch | " + " | ".join(f"{n} proc" for n in counts)
          + f" | {counts[-1]}p/{counts[0]}p | conflicts/item at {counts[-1]} "
          + "| CPU ms/item (clients+server) " + " / ".join(str(n) for n in counts) + " |")
    print("|---|" + "---:|" * (len(counts) + 3))
    for batch in (1, args.batch):
        rates = [_common.median([r["items/s"] for r in table[(batch, n)]]) for n in counts]
        ratios = [r[-1]["items/s"] / r[0]["items/s"] for r in zip(
            *[table[(batch, n)] for n in (counts[0], counts[-1])], strict=True)]
        conflicts = _common.median([r["conflicts"] for r in table[(batch, counts[-1])]])
        cpu = [_common.median([r["client ms"] + r["server ms"] for r in table[(batch, n)]])
               for n in counts]
        print(f"| {batch} | " + " | ".join(f"{r:,.0f}" for r in rates)
              + f" | {_common.median(ratios):.2f} | {conflicts / args.items:.3f} | "
              + " / ".join(f"{c:.2f}" for c in cpu) + " |")
    print(f"wake-up across processes: median {statistics.median(waits) * 1000:.1f} ms, "
          f"max {max(waits) * 1000:.1f} ms over {len(waits)} puts")


if __name__ == "__main__":
    main()
