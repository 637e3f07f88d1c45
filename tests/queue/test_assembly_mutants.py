"""A queue's options are checked before anything opens, and a failed open leaves nothing held
(queue/assembly.py). Found by the mutation run of assembly.py
(benchmarks/mutation_survivors_queue.rst).
"""

from __future__ import annotations

import gc
import os

import pytest

import ackqueue


@pytest.mark.parametrize(("options", "says"), [
    pytest.param({"max_attempts": 0}, "max_attempts must be a positive int", id="attempts-0"),
    pytest.param({"max_attempts": -3}, "max_attempts must be a positive int", id="attempts-neg"),
    pytest.param({"ack_timeout": 0}, "ack_timeout must be a positive number", id="lease-0"),
    pytest.param({"ack_timeout": -1.5}, "ack_timeout must be a positive number", id="lease-neg"),
    pytest.param({"session_timeout": 0}, "session_timeout must be a positive number",
                 id="session-0"),
    pytest.param({"unique": "sometimes"}, "unique must be 'forever'", id="unique-word"),
    pytest.param({"unique": 0}, "unique must be 'forever'", id="unique-0"),
])
def test_an_option_out_of_its_range_is_refused_before_anything_opens(qpath, options, says):
    with pytest.raises(ValueError, match=says):
        ackqueue.AckQueue(qpath, **options)
    assert not os.path.exists(qpath)


def test_the_smallest_values_in_range_are_taken(qpath):
    with ackqueue.AckQueue(qpath, max_attempts=1, ack_timeout=0.001, session_timeout=0.5,
                           unique=0.001) as q:
        assert (q.max_attempts, q.ack_timeout) == (1, 0.001)


def test_a_failed_open_leaves_the_file_usable_by_the_queues_already_open_on_it(qpath):
    with ackqueue.AckQueue(qpath, name="kept") as kept:
        with ackqueue.AckQueue(qpath, name="jobs") as q:
            q.put(1)
        try:
            ackqueue.PriorityAckQueue(qpath, name="jobs")  # made by AckQueue: refused
        except ackqueue.AckQueueError:
            pass
        else:
            raise AssertionError("a queue reopened as another class was not refused")
        gc.collect()
        with ackqueue.AckQueue(qpath, name="jobs") as q:  # the name was not left claimed
            assert q.get_nowait() == 1
        kept.put("still open")  # and closing that one did not close the file under this one
        assert kept.get_nowait() == "still open"


def test_shared_false_is_taken_as_the_docstring_says(qpath):
    with ackqueue.AckQueue(qpath, shared=False) as q:
        q.put(1)
        assert q.get_nowait() == 1
