"""The queue classes are generic like ``queue.Queue``: ``AckQueue[int]`` types what ``get``
returns, for the queue and its consumers. mypy checks this file (pyproject.toml, strict), so a
class that stopped being generic fails CI's type check; the test runs the same code."""

from __future__ import annotations

import queue

import ackqueue


def typed_round_trip() -> tuple[int, str, list[bytes]]:
    numbers: ackqueue.AckQueue[int] = ackqueue.AckQueue()
    numbers.put(41)
    n: int = numbers.get() + 1
    words = ackqueue.LifoAckQueue[str]()
    words.put("a")
    with words.connect() as c:
        word: str = c.get()
        c.ack(word)
    blobs = ackqueue.PriorityAckQueue[bytes]()
    blobs.put_many([b"b", b"a"])
    with blobs.connect() as c2:
        got: list[bytes] = c2.get_many(2)
        c2.ack_many(got)
    as_stdlib: queue.Queue[int] = numbers  # still a queue.Queue for typed stdlib code
    assert as_stdlib is numbers
    for q in (numbers, words, blobs):
        q.close()
    return n, word, got


def test_typed_code_runs() -> None:
    assert typed_round_trip() == (42, "a", [b"a", b"b"])
