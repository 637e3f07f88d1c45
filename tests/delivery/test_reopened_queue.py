"""What a reopened queue hands out: every stored item once, in order, with its delivery count;
delayed items only when due; an item removed or replaced by key as that left it.

The stored items of an earlier session (the backlog) are read lazily, a few keys at a time
behind a cursor, and their pickles a few ahead of the gets: these tests use more items than
one such read, so that each read starts where the last one ended. They are fast on purpose:
benchmarks/mutation.py runs them for every mutant of the ready supply.
"""

from __future__ import annotations

from conftest import drain

from ackqueue import AckQueue

N = 300  # several backlog scans (64 keys) and read-aheads (64 pickles) long


def test_a_reopened_backlog_comes_out_whole_in_order_with_each_items_delivery_count(qpath):
    with AckQueue(qpath, max_attempts=10) as q:
        q.put_many(range(N))
        with q.connect() as c:
            c.get_many(N // 2)  # the first half is delivered once, and given back at close
    with AckQueue(qpath, max_attempts=10) as q:
        assert q.qsize() == N
        with q.connect() as c:
            # All held at once (a held item is still stored, yet not ready), in batches
            # shorter than a scan.
            got = [x for _ in range(0, N, 50) for x in c.get_many(50, block=False)]
            attempts = [c.delivery(item).attempts for item in got]
            assert drain(c) == []
            c.ack_many(got)
        assert got == list(range(N))
        assert attempts == [2] * (N // 2) + [1] * (N - N // 2)
        assert q.qsize() == 0 and drain(q) == []


def test_a_reopened_backlog_interleaved_with_new_puts_keeps_the_order(qpath):
    with AckQueue(qpath) as q:
        q.put_many(range(N))
    with AckQueue(qpath) as q, q.connect() as c:
        got = []
        for i in range(0, N, 10):
            got += [c.get_nowait() for _ in range(10)]
            q.put_many(range(N + i, N + i + 10))
        assert got == list(range(N))
        assert drain(c) == list(range(N, 2 * N))


def test_delayed_items_stay_delayed_after_a_reopen_and_the_others_come_out(qpath):
    # A long run of delayed items first: the backlog scan walks past them to the others.
    delayed = set(range(150)) | {i for i in range(150, N) if i % 37 == 3}
    expected = [i for i in range(N) if i not in delayed]
    with AckQueue(qpath) as q:
        q.put_many(range(150), delay=3600)
        start = 150
        for end in [*sorted(delayed - set(range(150))), N]:  # plain runs, a delayed one after each
            q.put_many(range(start, end))
            if end < N:
                q.put(end, delay=3600)
            start = end + 1
        assert q.qsize() == len(expected) and q.delayed_count() == len(delayed)
    with AckQueue(qpath) as q:
        assert q.qsize() == len(expected) and q.delayed_count() == len(delayed)
        assert q.unfinished_tasks == N  # join() waits for the delayed ones too
        with q.connect() as c:
            assert drain(c) == expected


def test_a_delay_that_ends_after_a_reopen_ends_in_that_session(qpath):
    with AckQueue(qpath) as q:
        q.put("soon", delay=0.3)
        q.put("later", delay=3600)
    with AckQueue(qpath) as q:
        assert q.delayed_count() == 2
        assert q.get(timeout=30) == "soon"
        assert q.delayed_count() == 1


def test_a_nack_that_replaces_a_reopened_backlog_item_hands_out_the_new_payload(qpath):
    with AckQueue(qpath) as q:
        q.put_many([f"v{i}" for i in range(160)])
    with AckQueue(qpath) as q, q.connect() as c:
        held = [c.get() for _ in range(80)]  # past the first read-ahead: a second one ran
        assert held == [f"v{i}" for i in range(80)]
        c.nack(held[1], replace="v1 again")
        c.nack(held[0], replace="v0 again")
        assert [c.get(), c.get(), c.get()] == ["v0 again", "v1 again", "v80"]


def test_removing_and_replacing_backlog_items_by_key_after_a_reopen(qpath):
    with AckQueue(qpath) as q:
        q.put_many([f"v{i}" for i in range(N)], keys=[f"k{i}" for i in range(N)])
    with AckQueue(qpath) as q:
        assert q.get_nowait() == "v0"
        q.remove("k5")
        q.remove(f"k{N - 1}")
        assert q.put("new", key="k200", replace=True) is True
        expected = [f"v{i}" for i in range(1, N - 1) if i != 5]
        expected[expected.index("v200")] = "new"
        with q.connect() as c:
            assert drain(c) == expected
    with AckQueue(qpath) as q:
        assert q.qsize() == N - 3


def test_a_reopened_backlog_is_read_many_entries_a_read(qpath):
    """Each read of the stored tree first catches the reader up with the commits since the
    last one and reloads the bucket they rewrote (every ack rewrites it): a get+ack of the
    backlog pays for such a read once per read-ahead, so read-aheads are long (64 entries)."""
    n = 640
    with AckQueue(qpath) as q:
        q.put_many(range(n))
    with AckQueue(qpath) as q, q.connect() as c:
        book, reads = q._book, []
        read = book.read

        def counted(change):
            reads.append(change)
            return read(change)

        book.read = counted
        got = []
        for _ in range(n):
            got.append(c.get_nowait())
            c.ack(got[-1])
        del book.read
    assert got == list(range(n))
    assert len(reads) <= n // 24  # a scan of 64 keys and a read-ahead of 64 entries: ~n / 32
