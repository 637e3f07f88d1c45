"""Throughput of put_many, get_many and ack_many on a FileStorage (issue 3's batch target).

    python benchmarks/bench_batches.py [--items 100000] [--batch 100] [--runs 3]

Each batch is one durable commit (fsync on). Prints items/s per operation, the median of
``--runs`` runs, each on a fresh file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import _common  # noqa: F401 - puts the tree this script sits in first on sys.path

from ackqueue import AckQueue


def one_run(items: int, batch: int, payload: bytes) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        q = AckQueue(os.path.join(tmp, "bench.fs"))
        try:
            chunks = [[(n, payload) for n in range(i, i + batch)] for i in range(0, items, batch)]
            began = time.perf_counter()
            for chunk in chunks:
                q.put_many(chunk)
            put_s = time.perf_counter() - began

            c = q.connect()
            got = []
            began = time.perf_counter()
            for _ in chunks:
                got.append(c.get_many(batch))
            get_s = time.perf_counter() - began

            began = time.perf_counter()
            for held in got:
                c.ack_many(held)
            ack_s = time.perf_counter() - began
            assert q.qsize() == 0 and q.unacked_count() == 0
        finally:
            q.close()
    return {"put_many": items / put_s, "get_many": items / get_s, "ack_many": items / ack_s}


def bare_zodb(items: int, batch: int, payload: bytes) -> float:
    """Reference on the same machine and moment: plain ZODB, one small persistent object per
    item into an LOBTree, ``batch`` items per commit (what put_many must do at the least)."""
    import transaction
    import ZODB
    from BTrees.LOBTree import LOBTree
    from ZODB.FileStorage import FileStorage

    from ackqueue.records import Entry as Record

    with tempfile.TemporaryDirectory() as tmp:
        db = ZODB.DB(FileStorage(os.path.join(tmp, "bare.fs")))
        try:
            tm = transaction.TransactionManager()
            conn = db.open(transaction_manager=tm)
            tree = conn.root()["tree"] = LOBTree()
            tm.commit()
            began = time.perf_counter()
            for start in range(0, items, batch):
                for n in range(start, start + batch):
                    tree[n] = Record(payload, 0.0)
                tm.commit()
            return items / (time.perf_counter() - began)
        finally:
            db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per item")
    args = parser.parse_args()
    payload = b"x" * args.size
    runs = []
    for _ in range(args.runs):
        figures = one_run(args.items, args.batch, payload)
        figures["bare ZODB"] = bare_zodb(args.items, args.batch, payload)
        runs.append(figures)
    print(f"{args.items} items of ~{args.size} B, batches of {args.batch}, FileStorage, fsync on")
    for op in ("put_many", "get_many", "ack_many", "bare ZODB"):
        figures = sorted(r[op] for r in runs)
        print(
            f"{op:9s} median {statistics.median(figures):>9,.0f} items/s  (runs: "
            + ", ".join(f"{f:,.0f}" for f in figures)
            + ")"
        )


if __name__ == "__main__":
    main()
