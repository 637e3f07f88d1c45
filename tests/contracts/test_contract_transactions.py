"""Transactions, the same on every implementation: a group of puts, gets, acks and nacks
across two named queues of one database commits together, or (an exception inside) not at
all, and then every held item is held again and every taken item is back in its place.

In shared mode an item a rolled-back get took is given back by the session thread moments
later (docs/howto/scaling.rst): see ``take_given_back`` for what that allows the tests to check.
"""

from __future__ import annotations

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT, settled, take_given_back


def test_a_transaction_commits_its_operations_on_two_queues_together(queues) -> None:
    frontier, pages = queues(name="frontier"), queues(name="pages")
    frontier.put_many(["/index.html", "/next.html"])
    with frontier.connect() as c:
        url = c.get_nowait()
        with c.transaction():
            frontier.put("/a.html")
            pages.put({"url": url, "links": 1})
            c.ack(url)
        assert frontier.unacked_count() == 0
    settled(frontier, ready=2, held=0)
    settled(pages, ready=1, held=0)
    with frontier.connect() as c, pages.connect() as p:
        assert drain(c) == ["/next.html", "/a.html"]
        assert drain(p) == [{"url": "/index.html", "links": 1}]


def test_an_exception_rolls_back_puts_gets_acks_and_nacks(queues) -> None:
    a, b = queues(name="a"), queues(name="b")
    a.put_many([1, 2, 3, 4])
    with a.connect() as c:
        acked, nacked = c.get_nowait(), c.get_nowait()
        with pytest.raises(RuntimeError), c.transaction():
            c.ack(acked)
            c.nack(nacked)
            assert c.get_nowait() == 3
            assert a.get_nowait() == 4  # a plain get, taken for good only on commit
            b.put("vanishes")
            a.put("vanishes too")
            raise RuntimeError("the crawler step failed")
        assert [d.item for d in c.deliveries()] == [1, 2]  # held again, not acked or nacked
        assert c.delivery(acked).attempts == 1
        take_given_back(queues, c, [3, 4])  # back in their places
        assert drain(c) == []
        c.ack_many([acked, nacked, 3, 4])  # the undone ack can be done again
    settled(a, ready=0, held=0)
    settled(b, ready=0, held=0)


def test_a_transaction_on_the_queue_covers_plain_gets(queues) -> None:
    q = queues()
    q.put_many(["x", "y"])
    with pytest.raises(KeyError), q.transaction():
        assert q.get_nowait() == "x"
        assert q.get_nowait() == "y"
        raise KeyError
    with q.connect() as c:
        take_given_back(queues, c, ["x", "y"])
        c.ack_many([d.item for d in c.deliveries()])
    q.put("z")
    with q.transaction():
        assert q.get(timeout=GIVE_BACK_TIMEOUT) == "z"
    settled(q, ready=0, held=0)
    with q.connect() as c:
        assert drain(c) == []

