"""CPU an item: what one put, one held get + ack and one plain get cost in process CPU time.

A slow disk hides the CPU a queue spends per item behind the fsync; on tmpfs (or a fast NVMe)
the CPU decides throughput. This script measures ``time.process_time`` (all threads of the
process) per item, one thread, on files in ``--dir`` (default ``/dev/shm``, a tmpfs), for:

- ackqueue (``AckQueue``, strict durability: an fsync per commit), as it comes (packing the
  file in the background as garbage builds up: that CPU counts) and with ``autopack=False``;
- persist-queue's ``SQLiteAckQueue`` (``multithreading=True``; its plain get is
  ``SQLiteQueue``'s);
- the standard library's ``queue.Queue`` (no storage: the floor of the queue machinery);
- six ZODB floors: a FileStorage commit of one new record at the storage API
  (``tpc_begin``/``store``/``tpc_vote``/``tpc_finish``); a Connection commit through the
  transaction manager of one small ``Persistent`` changed; ackqueue's stored shape of format 2
  without ackqueue ("ZODB tree shape": a put inserts a new ``Persistent`` into an ``LOBTree``
  of ackqueue's node sizes, a get+ack reads and deletes one, a commit each); and two stored
  shapes without ackqueue: "ZODB inline shape" (the same tree, each entry one bytes value in
  its bucket instead of a record of its own: ackqueue's format 3 for small items) and "ZODB
  segment shape" (issue 22's proposal: a put appends to a segment's blob, an ack sets a bit in the
  segment's marks), a commit each: what a queue stored that way could reach through ZODB's
  Connection; and "segment shape, own commits", the same with each commit made at the storage
  API (records pickled as ZODB would): what it could reach committing its own records beside
  the Connection.

``put``: N puts into an empty queue. ``get+ack``: N held gets each acked, of items put earlier
(queue reopened first). ``get``: N plain gets of items put earlier (reopened). Each figure is the
median of ``--runs`` runs, implementations interleaved within a run. The ratios printed are
persist-queue / ackqueue (CPU), the issue's targets: put >= 0.25, get+ack >= 1.5.

``--profile put|getack|get`` instead runs ackqueue's operation once under cProfile and prints
the functions that take the most time.

Run: ``python3 benchmarks/bench_cpu.py [--n 3000] [--runs 3] [--dir /dev/shm]``
(needs ``[bench]``: persist-queue).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pickle
import pstats
import queue
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import _common as c
import persistqueue
import transaction
import ZODB
from BTrees.LOBTree import LOBTree
from persistent import Persistent
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage
from ZODB.utils import p64, z64

import ackqueue

Figures = dict[str, float]  # operation -> CPU us an item


# -- each implementation: {operation: CPU us an item} ----------------------------------------


# Automatic packs made during each of ackqueue's timed operations, a list a run.
PACKS: dict[str, list[int]] = {}


def packs_of(q: ackqueue.AckQueue) -> int:
    packer = q._store.packer  # (the store's AutoPacker: None with autopack=False)
    return packer.packs if packer is not None else 0  # type: ignore[attr-defined]


def run_ackqueue(base: str, n: int, autopack: bool = True) -> Figures:
    items = [c.item(i) for i in range(n)]
    out: Figures = {}
    with c.tmpdir(base) as d:
        path = os.path.join(d, "q.fs")
        q = ackqueue.AckQueue(path, autopack=autopack)
        out["put"] = c.cpu_us(n, lambda: [q.put(x) for x in items])
        if autopack:
            PACKS.setdefault("put", []).append(packs_of(q))
        q.close()
        q = ackqueue.AckQueue(path, autopack=autopack)
        cons = q.connect()

        def get_ack() -> None:
            for _ in range(n):
                cons.ack(cons.get_nowait())

        out["get+ack"] = c.cpu_us(n, get_ack)
        if autopack:
            PACKS.setdefault("get+ack", []).append(packs_of(q))
        q.close()
        # A file of its own, as persist-queue's plain get has: on the first one, the garbage
        # of the get+ack phase set off a background pack during the gets, whose CPU counted.
        plain = os.path.join(d, "plain.fs")
        q = ackqueue.AckQueue(plain, autopack=autopack)
        q.put_many(items)
        q.close()
        q = ackqueue.AckQueue(plain, autopack=autopack)
        out["get"] = c.cpu_us(n, lambda: [q.get_nowait() for _ in range(n)])
        q.close()
    return out


def run_ackqueue_unpacked(base: str, n: int) -> Figures:
    """ackqueue with ``autopack=False``: the operations alone. With packing on (the default,
    above), a pack whenever the garbage in the file reaches 1 MB (or what the file holds live)
    counts too: a cost of every byte a commit writes, paid in those packs."""
    return run_ackqueue(base, n, autopack=False)


def run_persistqueue(base: str, n: int) -> Figures:
    items = [c.item(i) for i in range(n)]
    out: Figures = {}
    with c.tmpdir(base) as d:
        path = os.path.join(d, "pq")
        filling = persistqueue.SQLiteAckQueue(path, multithreading=True)
        out["put"] = c.cpu_us(n, lambda: [filling.put(x) for x in items])
        q = persistqueue.SQLiteAckQueue(path, multithreading=True)  # reopened, as ackqueue's

        def get_ack() -> None:
            for _ in range(n):
                q.ack(q.get(block=False))

        out["get+ack"] = c.cpu_us(n, get_ack)
        path = os.path.join(d, "pq-plain")
        plain = persistqueue.SQLiteQueue(path, multithreading=True, auto_commit=True)
        for x in items:
            plain.put(x)
        p = persistqueue.SQLiteQueue(path, multithreading=True, auto_commit=True)
        out["get"] = c.cpu_us(n, lambda: [p.get(block=False) for _ in range(n)])
    return out


def run_stdlib(base: str, n: int) -> Figures:
    items = [c.item(i) for i in range(n)]
    q: queue.Queue[bytes] = queue.Queue()
    out: Figures = {"put": c.cpu_us(n, lambda: [q.put(x) for x in items])}

    def get_ack() -> None:
        for _ in range(n):
            q.get_nowait()
            q.task_done()

    out["get+ack"] = c.cpu_us(n, get_ack)
    for x in items:
        q.put(x)
    out["get"] = c.cpu_us(n, lambda: [q.get_nowait() for _ in range(n)])
    return out


def run_storage_floor(base: str, n: int) -> Figures:
    """One new 120-byte record a commit, at FileStorage's own API (fsync included)."""
    data = b"x" * 120
    with c.tmpdir(base) as d:
        fs = FileStorage(os.path.join(d, "floor.fs"))
        try:

            def commits() -> None:
                for i in range(n):
                    t = TransactionMetaData()
                    fs.tpc_begin(t)
                    fs.store(p64(i + 1), z64, data, "", t)
                    fs.tpc_vote(t)
                    fs.tpc_finish(t)

            return {"put": c.cpu_us(n, commits)}
        finally:
            fs.close()


@contextmanager
def zodb(base: str) -> Iterator[tuple[Any, transaction.TransactionManager]]:
    """A Connection, with a transaction manager of its own, on a new FileStorage file."""
    with c.tmpdir(base) as d:
        db = ZODB.DB(FileStorage(os.path.join(d, "floor.fs")))
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        try:
            yield conn, tm
        finally:
            conn.close()
            db.close()


def put_then_get_ack(
    n: int, conn: Any, puts: Callable[[], None], get_acks: Callable[[], None]
) -> Figures:
    out = {"put": c.cpu_us(n, puts)}
    conn.cacheMinimize()  # as after a reopen: what was put is read from the file
    out["get+ack"] = c.cpu_us(n, get_acks)
    return out


class Small(Persistent):
    value = b""


def run_connection_floor(base: str, n: int) -> Figures:
    """One small Persistent changed a commit, through a Connection and transaction manager."""
    items = [c.item(i) for i in range(n)]
    with zodb(base) as (conn, tm):
        obj = conn.root()["small"] = Small()
        tm.commit()

        def commits() -> None:
            for x in items:
                obj.value = x
                tm.commit()

        return {"put": c.cpu_us(n, commits)}


class SmallNodes(LOBTree):
    """An LOBTree with ackqueue's entry tree's node sizes (records.EntryTree)."""

    max_leaf_size = 16
    max_internal_size = 32


class Item(Persistent):
    def __init__(self, data: bytes) -> None:
        self.data = data


def tree_shape(
    base: str, n: int, stored: Callable[[bytes], Any], data_of: Callable[[Any], bytes]
) -> Figures:
    """A stored shape of ackqueue's entry tree without ackqueue: each put inserts
    ``stored(item)`` into an LOBTree of ackqueue's node sizes, one Connection commit; each
    get+ack reads the first one's item (``data_of``) and deletes it, one commit (as an ack
    does)."""
    items = [c.item(i) for i in range(n)]
    with zodb(base) as (conn, tm):
        tree = conn.root()["tree"] = SmallNodes()
        tm.commit()

        def puts() -> None:
            for i, x in enumerate(items):
                tm.begin()
                tree[i] = stored(x)
                tm.commit()

        def get_acks() -> None:
            for i in range(n):
                tm.begin()
                assert data_of(tree[i])
                del tree[i]
                tm.commit()

        return put_then_get_ack(n, conn, puts, get_acks)


def run_tree_floor(base: str, n: int) -> Figures:
    """ackqueue's format 2: each entry a new Persistent record of its own."""
    return tree_shape(base, n, Item, lambda item: bytes(item.data))


INLINE_HEADER = struct.Struct("<dI")  # put_at, attempts: what an entry keeps beside its item


def run_inline_floor(base: str, n: int) -> Figures:
    """ackqueue's format 3 for small items: each entry one bytes value in its bucket (a small
    header and the item) instead of a record of its own, so a put rewrites the bucket and makes
    no record, and a get reads its value out of the bucket it loads anyway."""
    return tree_shape(
        base, n,
        lambda x: INLINE_HEADER.pack(time.time(), 0) + x,
        lambda value: bytes(value[INLINE_HEADER.size:]),
    )


SEGMENT = 64  # items a segment holds, in the segment shape below


class Segment(Persistent):
    """Items appended as one length-prefixed blob."""

    def __init__(self) -> None:
        self.data = b""
        self.count = 0


class Marks(Persistent):
    """Which items of a segment are done, as bits."""

    def __init__(self) -> None:
        self.done = 0


def run_segment_floor(base: str, n: int) -> Figures:
    """The stored shape issue 22 proposes, without ackqueue: a put appends its item to the
    current segment (one Persistent whose state is one bytes blob: a handful of
    ``persistent_id`` calls, not one per key and reference of a tree bucket), a new segment
    every ``SEGMENT`` puts (its index, an LOBTree, written then); a get reads its item out of
    its segment (loaded once per segment) and the ack sets its bit in the segment's marks
    (one small Persistent), a commit each; a segment whose items are all done leaves the
    index. What a queue stored that way could reach through a Connection."""
    items = [c.item(i) for i in range(n)]
    with zodb(base) as (conn, tm):
        index = conn.root()["segments"] = LOBTree()  # number -> (Segment, Marks)
        tm.commit()

        def puts() -> None:
            segment = None
            for i, x in enumerate(items):
                tm.begin()
                if segment is None or segment.count == SEGMENT:
                    segment = Segment()
                    index[i // SEGMENT] = (segment, Marks())
                segment.data += len(x).to_bytes(4, "little") + x
                segment.count += 1
                tm.commit()

        def get_acks() -> None:
            for number in list(index.keys()):
                segment, marks = index[number]
                blob, at = segment.data, 0
                for slot in range(segment.count):
                    tm.begin()
                    size = int.from_bytes(blob[at:at + 4], "little")
                    assert blob[at + 4:at + 4 + size]
                    at += 4 + size
                    marks.done |= 1 << slot
                    if slot == segment.count - 1:
                        del index[number]
                    tm.commit()

        return put_then_get_ack(n, conn, puts, get_acks)


def zodb_record(cls: type, state: dict[str, Any]) -> bytes:
    """A record as ZODB writes one (the class, then the state, each a pickle of protocol 3),
    for a state that refers to no other record."""
    return pickle.dumps(cls, 3) + pickle.dumps(state, 3)


def run_segment_storage_floor(base: str, n: int) -> Figures:
    """The segment shape above with each commit made at FileStorage's API instead of through a
    Connection: what a queue that commits its own records beside ZODB's Connection could reach
    (issue 22's "commit path"). A put stores its segment's record (the blob so far); a new
    segment also rewrites the index record (once every ``SEGMENT`` puts); an ack stores its
    segment's marks record. Records are pickled here, as ZODB would (:func:`zodb_record`)."""
    items = [c.item(i) for i in range(n)]
    with c.tmpdir(base) as d:
        fs = FileStorage(os.path.join(d, "floor.fs"))
        serials: dict[bytes, bytes] = {}
        oids = iter(range(2, 4 * n + 8))
        index_oid = p64(1)
        segments: list[tuple[bytes, bytes]] = []  # (segment oid, marks oid)
        blobs: dict[bytes, bytes] = {}

        def commit(records: list[tuple[bytes, bytes]]) -> None:
            t = TransactionMetaData()
            fs.tpc_begin(t)
            for oid, data in records:
                fs.store(oid, serials.get(oid, z64), data, "", t)
            fs.tpc_vote(t)
            tid = fs.tpc_finish(t)
            for oid, _ in records:
                serials[oid] = tid

        def puts() -> None:
            blob, count, segment = b"", SEGMENT, b""
            for x in items:
                records = []
                if count == SEGMENT:
                    segment, marks = p64(next(oids)), p64(next(oids))
                    blob, count = b"", 0
                    segments.append((segment, marks))
                    records.append((index_oid, zodb_record(dict, {"segments": segments})))
                blob += len(x).to_bytes(4, "little") + x
                count += 1
                blobs[segment] = blob
                records.append((segment, zodb_record(Segment, {"data": blob, "count": count})))
                commit(records)

        def get_acks() -> None:
            for segment, marks in segments:
                blob, at, done = blobs[segment], 0, 0
                slot = 0
                while at < len(blob):
                    size = int.from_bytes(blob[at:at + 4], "little")
                    assert blob[at + 4:at + 4 + size]
                    at += 4 + size
                    done |= 1 << slot
                    slot += 1
                    commit([(marks, zodb_record(Marks, {"done": done}))])

        try:
            out = {"put": c.cpu_us(n, puts)}
            out["get+ack"] = c.cpu_us(n, get_acks)
            return out
        finally:
            fs.close()


IMPLEMENTATIONS: dict[str, Callable[[str, int], Figures]] = {
    "ackqueue": run_ackqueue,
    "ackqueue, autopack off": run_ackqueue_unpacked,
    "persist-queue": run_persistqueue,
    "queue.Queue": run_stdlib,
    "FileStorage API commit": run_storage_floor,
    "Connection commit": run_connection_floor,
    "ZODB tree shape": run_tree_floor,
    "ZODB inline shape": run_inline_floor,
    "ZODB segment shape": run_segment_floor,
    "segment shape, own commits": run_segment_storage_floor,
}
OPERATIONS = ["put", "get+ack", "get"]


def profile(base: str, n: int, what: str, top: int) -> None:
    items = [c.item(i) for i in range(n)]
    with c.tmpdir(base) as d:
        path = os.path.join(d, "q.fs")
        q = ackqueue.AckQueue(path)
        prof = cProfile.Profile()
        if what == "put":
            prof.runcall(lambda: [q.put(x) for x in items])
        else:
            for x in items:
                q.put(x)
            q.close()
            q = ackqueue.AckQueue(path)
            if what == "getack":
                cons = q.connect()
                prof.runcall(lambda: [cons.ack(cons.get_nowait()) for _ in range(n)])
            else:
                prof.runcall(lambda: [q.get_nowait() for _ in range(n)])
        q.close()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000, help="items an operation (default 3000)")
    ap.add_argument("--runs", type=int, default=3, help="runs; medians printed (default 3)")
    ap.add_argument("--dir", default="/dev/shm", help="where the files go (default /dev/shm)")
    ap.add_argument(
        "--only",
        action="append",
        choices=list(IMPLEMENTATIONS),
        help="measure only these implementations (repeatable)",
    )
    ap.add_argument(
        "--profile",
        choices=["put", "getack", "get"],
        help="profile ackqueue's operation under cProfile instead",
    )
    ap.add_argument("--top", type=int, default=30, help="functions a profile lists")
    args = ap.parse_args()
    if args.profile:
        profile(args.dir, args.n, args.profile, args.top)
        return
    c.header(f"CPU an item, one thread, files in {args.dir}, {args.n} items, {args.runs} runs")
    names = args.only or list(IMPLEMENTATIONS)
    samples: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        for name in names:
            for op, us in IMPLEMENTATIONS[name](args.dir, args.n).items():
                samples.setdefault((name, op), []).append(us)
        print(
            f"  run {run + 1}: "
            + ", ".join(f"{name} {op} {v[-1]:.1f}" for (name, op), v in samples.items()),
            flush=True,
        )
    med = {k: c.median(v) for k, v in samples.items()}
    rows = []
    for name in names:
        rows.append(
            [name] + [f"{med[name, op]:.1f}" if (name, op) in med else "" for op in OPERATIONS]
        )
    for ours in ("ackqueue", "ackqueue, autopack off"):
        if ours in names and "persist-queue" in names:
            rows.append(
                [f"persist-queue / {ours}"]
                + [f"{med['persist-queue', op] / med[ours, op]:.2f}" for op in OPERATIONS]
            )
    print()
    print(c.rst_table(rows, ["CPU us an item", *OPERATIONS]))
    if PACKS:
        print(
            "automatic packs in ackqueue's runs (each run): "
            + "; ".join(f"{op} {', '.join(map(str, v))}" for op, v in PACKS.items())
        )


if __name__ == "__main__":
    main()
