"""Puts by key, the same on every implementation: one live item per key, the seen-set after
an ack, ``remove`` of a waiting item (never of a held one), revisits by ``replace``, and a key
put inside a rolled-back transaction left free.
"""

from __future__ import annotations

import pytest
from conftest import drain

import ackqueue


def test_a_key_admits_one_live_item_and_the_seen_set_keeps_it_out_after_the_ack(queues) -> None:
    q = queues(unique="forever")
    assert q.put("page", key="/") is True
    assert q.put("again", key="/") is False  # waiting
    assert q.put("plain") is None  # a put without a key says nothing
    with q.connect() as c:
        page = c.get_nowait()
        assert page == "page"
        assert q.put("again", key="/") is False  # held
        c.ack(page)
    assert q.seen("/")
    assert q.put("again", key="/") is False  # done, and remembered
    assert q.forget("/") is True
    assert not q.seen("/")
    assert q.put("again", key="/") is True
    assert drain(q) == ["plain", "again"]


def test_put_many_answers_for_each_key_and_a_key_twice_stores_once(queues) -> None:
    q = queues()
    q.put("old", key="a")
    assert q.put_many(["a2", "b", "b2"], keys=["a", "b", "b"]) == [False, True, False]
    assert drain(q) == ["old", "b"]


def test_remove_drops_a_waiting_item_and_refuses_a_held_one(queues) -> None:
    q = queues()
    q.put("held", key="h")
    q.put("waiting", key="w")
    with q.connect() as c:
        held = c.get_nowait()
        assert held == "held"
        with pytest.raises(ackqueue.KeyHeldError):
            q.remove("h")
        q.remove("w")
        with pytest.raises(ackqueue.UnknownKeyError):
            q.remove("w")
        assert q.put("back", key="w") is True  # removing freed the key
        c.ack(held)
    assert q.put("new", key="h") is True  # acked without a seen-set: free again
    assert drain(q) == ["back", "new"]


def test_replace_changes_the_waiting_payload_in_its_place(queues) -> None:
    q = queues()
    q.put("v1", key="x")
    q.put("y", key="y")
    assert q.put("v2", key="x", replace=True) is True
    assert drain(q) == ["v2", "y"]


def test_a_keyed_put_in_a_rolled_back_transaction_leaves_the_key_free(queues) -> None:
    q = queues()
    with pytest.raises(RuntimeError), q.transaction():
        assert q.put("lost", key="k") is True
        raise RuntimeError("the block fails")
    assert q.qsize() == 0
    assert q.put("kept", key="k") is True
    assert drain(q) == ["kept"]


def test_bad_keys_are_refused_and_store_nothing(queues) -> None:
    q = queues()
    with pytest.raises(ackqueue.KeyTypeError):
        q.put("x", key=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        q.put("x", key="k", unique="sometimes")  # type: ignore[arg-type]
    assert q.qsize() == 0
    assert q.put("x", key="k") is True
