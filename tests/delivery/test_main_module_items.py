"""An item whose class is defined in the script that puts it (``__main__``) loads in no other
program: the put warns once, naming the class and what to do, and the getter's error says how
to fix the producer and how to get back the items stored already. Both once said nothing: the
items went, one per get, to the dead letters of every other process."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from conftest import child_env

from ackqueue import AckQueue, ItemLoadError

PRODUCER = """
import dataclasses
import sys

import ackqueue


@dataclasses.dataclass
class Job:
    n: int


with ackqueue.AckQueue(sys.argv[1]) as q:
    for n in range(3):
        q.put(Job(n))
    q.put(["plain", {"__main__": "a string, not a class"}])
"""


@dataclasses.dataclass
class Job:  # where the fixed producer would define it: a module both programs import
    n: int


def test_a_class_of_the_putting_script_is_warned_of_at_put_and_named_at_get(
    tmp_path, qpath, monkeypatch
):
    (tmp_path / "producer.py").write_text(PRODUCER)
    done = subprocess.run([sys.executable, str(tmp_path / "producer.py"), qpath],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "__main__" in line]
    assert len(warned) == 1, done.stderr  # once for the class, not once a put
    assert "class __main__.Job, defined in the script being run" in warned[0]
    assert "define the class in a module that the putting program and every getting" in warned[0]

    with AckQueue(qpath) as q, q.connect() as c:
        for _ in range(3):
            with pytest.raises(ItemLoadError) as raised:
                c.get()
            said = str(raised.value)
            assert "class __main__.Job cannot be found: it was defined in the script" in said
            assert "ackqueue requeue PATH --dead" in said
            assert "__main__.Job = yourmodule.Job" in said
        assert c.get_nowait() == ["plain", {"__main__": "a string, not a class"}]
        assert len(q.dead_letters()) == 3

        # What the error says to do brings the stored items back.
        monkeypatch.setattr(sys.modules["__main__"], "Job", Job, raising=False)
        assert q.requeue_dead() == 3
        assert sorted(c.get_many(3), key=lambda job: job.n) == [Job(0), Job(1), Job(2)]
