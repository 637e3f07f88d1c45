"""Bad and big items: items whose class is gone, 10 MB items, and 100,000 items.

An item whose class was renamed or removed since it was put cannot be unpickled. The get
that meets it raises an error naming the class, and the items behind it are still
delivered: the head of the queue is not blocked. The item itself is not dropped silently:
it moves to the dead letters, with the error (naming the class) as the reason.

10 MB is below ZODB's ``large_record_size`` (16 MB), so such items are stored without
ZODB's "object you're saving is large" warning; bigger ones work and warn. The measurement
of many small items at a larger scale (1,000,000) is benchmarks/many_items.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import pytest
from conftest import child_env
from polling import bounded

import ackqueue

MODULE = """
class Gone:
    def __init__(self, n):
        self.n = n
"""

PUTTER = """
import sys, ackqueue, vanishing
with ackqueue.AckQueue(sys.argv[1]) as q:
    q.put("before")
    q.put(vanishing.Gone(1))
    q.put("after")
"""


@pytest.mark.parametrize("how", ["module removed", "class renamed"])
def test_an_item_whose_class_is_gone_names_it_and_does_not_block_the_head(tmp_path, how):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "vanishing.py").write_text(MODULE)
    path = str(tmp_path / "q.fs")
    subprocess.run(
        [sys.executable, "-c", PUTTER, path], env=child_env(PYTHONPATH=os.pathsep.join(
            [str(lib), child_env()["PYTHONPATH"]])), check=True,
    )
    if how == "module removed":
        (lib / "vanishing.py").unlink()
    else:
        (lib / "vanishing.py").write_text(MODULE.replace("Gone", "Renamed"))
    sys.path.insert(0, str(lib))
    try:
        sys.modules.pop("vanishing", None)
        with ackqueue.AckQueue(path) as q:
            assert q.get_nowait() == "before"
            with pytest.raises(ackqueue.ItemLoadError, match=r"class vanishing\.Gone"):
                q.get_nowait()
            assert q.get_nowait() == "after", "the unloadable item blocks the queue"
            with pytest.raises(ackqueue.Empty):
                q.get_nowait()
        with ackqueue.AckQueue(path) as q, q.connect() as c:
            assert q.qsize() == 0
            [dead] = q.dead_letters()  # not dropped without a trace
            assert "class vanishing.Gone" in dead.reason
            assert isinstance(dead.item, ackqueue.UnloadableItem)
            assert q.requeue_dead() == 1
            q.put("later")
            with pytest.raises(ackqueue.ItemLoadError, match=r"class vanishing\.Gone"):
                c.get_nowait()
            assert c.get_nowait() == "later", "the unloadable item blocks a consumer"
            assert q.dead_count() == 1
    finally:
        sys.path.remove(str(lib))
        sys.modules.pop("vanishing", None)


def test_ten_megabyte_items_round_trip_without_a_large_record_warning(qpath):
    big = [os.urandom(10 * 1024 * 1024) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ZODB's large-record warning would fail the test
        with ackqueue.AckQueue(qpath) as q:
            for item in big:
                q.put(item)
        with ackqueue.AckQueue(qpath) as q, q.connect() as c:
            got = c.get()
            assert got == big[0]
            c.ack(got)
            c.nack(second := c.get())
            assert second == big[1]
        with ackqueue.AckQueue(qpath) as q:
            assert q.get() == big[1]
            assert q.get() == big[2]
            assert q.qsize() == 0


@pytest.mark.campaign
def test_a_hundred_thousand_items_are_kept_in_order_across_reopen(qpath):
    with ackqueue.AckQueue(qpath) as q:
        n = 100_000
        start = time.monotonic()
        for lo in range(0, n, 1000):  # one commit per thousand
            q.put_many(range(lo, lo + 1000))
        elapsed = time.monotonic() - start
        assert q.qsize() == n
    print(f"\n{n} puts in {elapsed:.1f} s ({n / elapsed:,.0f}/s)")
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == n
        with q.connect() as c:
            everything = []
            for _ in bounded(10 * n, "reading every item"):
                try:
                    everything.append(c.get_nowait())
                except ackqueue.Empty:
                    break
        assert everything == list(range(n)), "items lost, duplicated or out of order"
        assert q.qsize() == n  # closing the consumer gave everything back


def test_items_above_zodbs_large_record_size_work_without_zodbs_warning(qpath):
    """Above 16 MB ZODB would warn about blobs (a UserWarning nobody using a queue can act
    on, issue 15); the item is kept, and nothing is printed."""
    import warnings

    huge = os.urandom(17 * 1024 * 1024)
    with ackqueue.AckQueue(qpath) as q, warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the put
        q.put(huge)
    with ackqueue.AckQueue(qpath) as q:
        assert q.get() == huge
