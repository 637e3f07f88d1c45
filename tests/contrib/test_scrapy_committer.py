"""The Scrapy add-on's committer thread: which settled pages share a commit. A commit costs
about as much for one page as for several, so pages that settle while others are still in
flight wait a little for them; with nothing in flight, a page's commit waits for nothing (the
next request goes out only after it)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("scrapy")

from ackqueue.contrib.scrapy import Committer, Job  # noqa: E402


class Pages:
    """The part of the add-on's Frontier a committer uses: the requests held (pages in
    flight) and the commit of a batch of pages, here recorded and taking ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.held: dict[int, dict[str, Any]] = {}
        self.seconds = seconds
        self.batches: list[list[str]] = []
        self.committed = threading.Condition()

    def commit(self, jobs: list[Job]) -> None:
        time.sleep(self.seconds)
        with self.committed:
            self.batches.append([str(job.items[0]) for job in jobs])
            self.committed.notify_all()

    def wait_for(self, batches: int) -> list[list[str]]:
        with self.committed:
            assert self.committed.wait_for(lambda: len(self.batches) >= batches, 30)
            return list(self.batches)


def page(name: str) -> Job:
    return Job([], [name], None)


def run_here(function: Any, *args: Any) -> None:
    function(*args)


@pytest.fixture
def pages() -> Any:
    pages = Pages(seconds=0.2)
    committer = Committer(pages, call_from_thread=run_here)  # type: ignore[arg-type]
    committer.gather_most = 5.0  # the wait is then twice the last commit's 0.2 s
    try:
        committer.submit(page("first"))  # alone (nothing held): the commit's time is learnt
        assert pages.wait_for(1) == [["first"]]
        yield pages, committer
    finally:
        committer.stop()


def test_a_page_settled_while_others_are_in_flight_waits_for_them_to_share_its_commit(
    pages: Any,
) -> None:
    frontier, committer = pages
    frontier.held[1] = {"url": "in flight"}
    committer.submit(page("a"))
    time.sleep(0.05)
    frontier.held.clear()  # the last page in flight settles: no reason to wait longer
    committer.submit(page("b"))
    assert frontier.wait_for(2) == [["first"], ["a", "b"]]


def test_a_page_settled_with_nothing_in_flight_is_committed_at_once(pages: Any) -> None:
    frontier, committer = pages
    committer.submit(page("a"))
    time.sleep(0.05)  # well within the 0.2 s the commit of "a" takes
    committer.submit(page("b"))
    assert frontier.wait_for(3) == [["first"], ["a"], ["b"]]


def test_the_wait_for_pages_in_flight_is_bounded(pages: Any) -> None:
    frontier, committer = pages
    frontier.held[1] = {"url": "never settles"}
    began = time.monotonic()
    committer.submit(page("a"))
    assert frontier.wait_for(2) == [["first"], ["a"]]
    assert time.monotonic() - began < 10  # twice the last commit (0.4 s), then the commit
