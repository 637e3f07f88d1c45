"""Attempts and dead letters, the same on every implementation: ``max_attempts`` stops an
item that keeps failing, ``reject`` sends one at once, and the dead letters can be listed,
requeued and purged, all or by id."""

from __future__ import annotations

import contextlib

from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT, settled
from polling import wait_until

import ackqueue


def test_max_attempts_counts_the_deliveries_to_every_consumer(queues) -> None:
    q = queues(max_attempts=3)
    q.put_many(["flaky", "fine"])
    seen = []
    for _ in range(3):
        with q.connect() as c:  # a new consumer each time: attempts belong to the item
            item = c.get_nowait()
            seen.append((item, c.delivery(item).attempts))
            c.nack(item)  # the third nack sends it to the dead letters
    assert seen == [("flaky", 1), ("flaky", 2), ("flaky", 3)]
    with q.connect() as c:
        assert drain(c) == ["fine"]
    [letter] = q.dead_letters()
    assert (letter.item, letter.attempts) == ("flaky", 3)
    assert "max_attempts" in letter.reason and letter.when > 0
    settled(q, ready=1, held=0, dead=1)


def test_an_item_given_back_by_close_counts_its_attempt(queues) -> None:
    q = queues(max_attempts=2)
    q.put("poison")
    for _ in range(2):
        with q.connect() as c:
            assert c.get(timeout=GIVE_BACK_TIMEOUT) == "poison"
    with q.connect() as c:

        def dead_lettered() -> object:
            """Delivered max_attempts times already: the next get dead-letters it (once the
            give-back has landed, in shared mode) and hands out nothing."""
            with contextlib.suppress(ackqueue.Empty):
                raise AssertionError(f"delivered once too often: {c.get_nowait()!r}")
            return q.dead_letters()

        wait_until(dead_lettered, GIVE_BACK_TIMEOUT, "the poison item in the dead letters")
    [letter] = q.dead_letters()
    assert (letter.item, letter.attempts) == ("poison", 2)


def test_dead_letters_are_listed_requeued_and_purged(queues) -> None:
    q = queues()
    q.put_many(["a", "b", "c"])
    with q.connect() as c:
        for item in drain(c):
            c.reject(item, reason=f"bad {item}")
    letters = q.dead_letters()
    assert [(d.item, d.attempts, d.reason) for d in letters] == [
        ("a", 1, "bad a"), ("b", 1, "bad b"), ("c", 1, "bad c")
    ]
    assert len({d.id for d in letters}) == 3
    settled(q, ready=0, held=0, dead=3)
    q.requeue_dead([letters[1].id])
    q.purge_dead([letters[2].id])
    assert [d.item for d in q.dead_letters()] == ["a"]
    settled(q, ready=1, held=0, dead=1)
    q.requeue_dead()
    settled(q, ready=2, held=0, dead=0)
    with q.connect() as c:
        assert sorted(drain(c)) == ["a", "b"]
        c.reject(c.deliveries()[0].item)
    q.purge_dead()
    assert q.dead_letters() == []
    settled(q, ready=1, held=0, dead=0)
