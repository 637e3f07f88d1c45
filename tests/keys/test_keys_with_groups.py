"""Puts by key and groups together: a keyed put files its item under its group like any put,
after a reopen too (the crawler example found a keyed put that lost its group)."""

from __future__ import annotations

import collections

import pytest
from polling import bounded

import ackqueue


@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "shared"])
def test_keyed_puts_keep_their_group_and_its_cap_across_a_reopen(tmp_path, shared):
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, max_held_per_group=2, shared=shared) as q:
        for n in range(4):
            for host in ("a.test", "b.test"):
                assert q.put(f"{host}/{n}", key=f"{host}/{n}", group=host) is True
        assert q.put_many(["c.test/0", "c.test/1", "c.test/2"],
                          keys=["c.test/0", "c.test/1", "c.test/2"], group="c.test") == [True] * 3
    with ackqueue.AckQueue(path, max_held_per_group=2, shared=shared) as q:
        got = []
        with q.connect() as c:
            for _ in bounded(100_000, "taking what is ready"):
                try:
                    got.append(c.get(timeout=0.5))
                except ackqueue.Empty:
                    break
        held = collections.Counter(item.split("/")[0] for item in got)
        assert held == {"a.test": 2, "b.test": 2, "c.test": 2}, got
