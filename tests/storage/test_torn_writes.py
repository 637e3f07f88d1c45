"""Torn writes: a queue file cut at every byte of its last transaction opens at the previous commit.

A crash or power loss can leave any prefix of the last write on disk. FileStorage writes a
transaction as header, data records and a trailing length, and marks it committed last;
on open, a trailing transaction that is incomplete must be dropped. So every prefix that
ends inside the last transaction must open as an ackqueue holding exactly what the commit
before it held, and the full file must hold the new state.
"""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import stored_items
from hypothesis import given, settings
from hypothesis import strategies as st

import ackqueue


def build(path: str, last: str) -> tuple[int, int, list[object], list[object]]:
    """Make a queue file; return where the last operation's transaction starts and ends, and
    the states before and after it. Closing may commit once more after it (the automatic
    packer records its estimate), so the operation's transaction need not be the file's last."""
    with ackqueue.AckQueue(path) as q:
        for i in range(5):
            q.put({"n": i, "payload": "p" * 40})
        with q.connect() as c:
            c.ack(c.get())
        before = [{"n": i, "payload": "p" * 40} for i in range(1, 5)]
        start = os.path.getsize(path)
        if last == "put":
            q.put({"n": 5, "payload": "p" * 40})
            after = before + [{"n": 5, "payload": "p" * 40}]
        elif last == "ack":
            with q.connect() as c:
                c.ack(c.get())
            after = before[1:]
        else:  # "get": a plain get commits the removal
            q.get()
            after = before[1:]
        stop = os.path.getsize(path)
    return start, stop, before, after


@pytest.mark.campaign
@pytest.mark.parametrize("last", ["put", "ack", "get"])
def test_every_cut_inside_the_last_transaction_opens_at_the_previous_commit(tmp_path, last):
    source = str(tmp_path / "source.fs")
    start, stop, before, after = build(source, last)
    end = os.path.getsize(source)
    assert stop - start > 100, "the last operation's transaction should be a real one"
    assert stored_items(source) == after
    with open(source, "rb") as f:
        data = f.read(end)
    cuts = tmp_path / "cuts"
    for cut in range(start, end):
        cuts.mkdir()
        path = str(cuts / "q.fs")
        with open(path, "wb") as f:
            f.write(data[:cut])
        # a cut inside the operation's transaction loses it; one after it keeps it
        expected = before if cut < stop else after
        assert stored_items(path) == expected, f"cut at byte {cut} of {start}..{stop}..{end}"
        # the repaired file takes new writes and keeps them
        with ackqueue.AckQueue(path) as q:
            q.put("after the crash")
        assert stored_items(path) == expected + ["after the crash"], f"cut at byte {cut}"
        shutil.rmtree(cuts)


def test_every_prefix_of_a_young_file_opens_at_the_last_commit_it_holds_whole(tmp_path):
    """Cuts inside every earlier transaction too, from the file's creation on (every byte
    of the header, then every 5th, to stay quick): a crash while the queue was young."""
    source = str(tmp_path / "source.fs")
    boundaries: list[tuple[int, list[object]]] = []  # (file size, state) after each commit
    with ackqueue.AckQueue(source) as q:
        state: list[object] = []
        boundaries.append((os.path.getsize(source), list(state)))
        for i in range(4):
            q.put(i)
            state.append(i)
            boundaries.append((os.path.getsize(source), list(state)))
        q.get()
        state.pop(0)
        boundaries.append((os.path.getsize(source), list(state)))
    with open(source, "rb") as f:
        data = f.read()
    cuts = tmp_path / "cuts"
    for cut in [1, 2, 3, *range(0, len(data) + 1, 5)]:
        expected: list[object] = []
        for size, held in boundaries:
            if size <= cut:
                expected = held
        cuts.mkdir()
        path = str(cuts / "q.fs")
        with open(path, "wb") as f:
            f.write(data[:cut])
        assert stored_items(path) == expected, f"cut at byte {cut} of {len(data)}"
        shutil.rmtree(cuts)


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(st.sampled_from(["put", "put", "get-ack", "get-nack", "plain-get"]),
                 min_size=1, max_size=12),
    where=st.lists(st.floats(min_value=0, max_value=1), min_size=3, max_size=6),
)
def test_random_histories_cut_anywhere_open_at_a_commit(tmp_path_factory, ops, where):
    """Random puts, acks, nacks and gets; cuts at random places anywhere in the file."""
    tmp = tmp_path_factory.mktemp("hist")
    source = str(tmp / "source.fs")
    boundaries: list[tuple[int, list[int]]] = []
    stored: list[int] = []
    with ackqueue.AckQueue(source) as q, q.connect() as c:
        boundaries.append((os.path.getsize(source), []))
        n = 0
        for op in ops:
            if op == "put":
                q.put(n)
                stored.append(n)
                n += 1
            elif not q.qsize():
                continue
            elif op == "plain-get":
                stored.remove(q.get())
            else:
                item = c.get()
                if op == "get-nack":
                    c.nack(item)
                    continue
                c.ack(item)
                stored.remove(item)
            boundaries.append((os.path.getsize(source), sorted(stored)))
    with open(source, "rb") as f:
        data = f.read()
    for fraction in where:
        cut = int(fraction * len(data))
        expected: list[int] = []
        for size, held in boundaries:
            if size <= cut:
                expected = held
        path = str(tmp / f"cut{cut}.fs")
        with open(path, "wb") as f:
            f.write(data[:cut])
        assert stored_items(path) == expected, f"cut at byte {cut} of {len(data)} after {ops}"


def test_a_torn_or_garbled_index_file_is_rebuilt_from_the_data(tmp_path):
    """The .index is written at close; a kill while writing it leaves any prefix of it."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        for i in range(300):
            q.put(i)
    with open(path + ".index", "rb") as f:
        index = f.read()
    for damaged in [b"", index[:1], index[: len(index) // 3], index[:-1], b"garbage" * 50]:
        with open(path + ".index", "wb") as f:
            f.write(damaged)
        assert stored_items(path) == list(range(300))
