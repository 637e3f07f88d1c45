"""ackqueue's Scrapy scheduler where a page's outcome cannot be stored as it came: real Scrapy
processes (tests/contrib/scrapy_cases.py) crawling small sites served on 127.0.0.1. Each crawl
must end (a request left held keeps Scrapy waiting for ever), say what it dropped, and commit
the rest of the page."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import pytest
from conftest import REPO_ROOT, child_env

pytest.importorskip("scrapy")

import ackqueue  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scrapy_cases import Answer, RouteSite, page  # noqa: E402
from scrapy_crawler import stored_items  # noqa: E402

# A crawl here takes a few seconds; one left hanging (the defects these tests pin) is killed.
HANG = 60


def crawl(site: RouteSite, directory: str, spider: str, **settings: object) -> tuple[str, str]:
    try:
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "scrapy_cases.py"), "--spider", spider,
             "--port", str(site.port), "--dir", directory, "--settings", json.dumps(settings)],
            env=child_env(PYTHONPATH=os.pathsep.join([REPO_ROOT, HERE])),
            capture_output=True, text=True, timeout=HANG,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the crawl did not end in {HANG} s: ...{(exc.stderr or b'')[-3000:]!r}")
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout
    return done.stdout, done.stderr


def stored(directory: str) -> list[dict[str, object]]:
    """The items the crawl in ``directory`` committed (read without taking them)."""
    return stored_items(os.path.join(directory, "frontier.fs"))


def passed_on(out: str) -> list[dict[str, str]]:
    return [json.loads(line[5:]) for line in out.splitlines() if line.startswith("item ")]


def tails(items: list[dict[str, str]]) -> Counter[str]:
    return Counter(item["url"].split("/", 3)[3] for item in items)


def pages(*, links: dict[str, tuple[str, ...]], **other: Answer) -> RouteSite:
    """``links``: path -> the paths it links; any other ``/p/N`` is a page without links."""

    def route(path: str) -> Answer | None:
        if path in links:
            return page(*links[path])
        if path in other:
            return other[path]
        return page() if re.fullmatch(r"/p/\d+", path) else None

    return RouteSite(route)


def test_a_redirect_to_the_same_host_meets_the_seen_set(tmp_path):
    """/p/0 links /a and /p/1; /a redirects to /p/1 on the same host. Scrapy's duplicate filter
    drops the redirect to a URL already seen; so does the frontier: /p/1 fetched once, its item
    stored once."""
    site = pages(links={"/p/0": ("/a", "/p/1")}, **{"/a": (302, {"Location": "/p/1"}, "")})
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "Links")
    finally:
        site.close()
    assert site.requested["/p/1"] == 1, site.requested
    assert tails(stored(directory)) == Counter(["p/0", "p/1"])
    assert tails(passed_on(out)) == Counter(["p/0", "p/1"])
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0  # /a acked with the redirect's drop


def test_a_same_host_redirect_to_a_new_url_is_fetched_under_its_own_key(tmp_path):
    """/a redirects to /p/2, linked by no page: fetched once, and its URL is in the seen-set
    (a second run fetches nothing)."""
    site = pages(links={"/p/0": ("/a",)}, **{"/a": (302, {"Location": "/p/2"}, "")})
    directory = str(tmp_path / "job")
    try:
        crawl(site, directory, "Links")
        first = site.requested.copy()
        crawl(site, directory, "Links")
    finally:
        site.close()
    assert first == Counter({"/p/0": 1, "/a": 1, "/p/2": 1})
    assert site.requested == first
    assert tails(stored(directory)) == Counter(["p/0", "p/2"])
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.seen(fingerprint(f"http://127.0.0.1:{site.port}/p/2"))


def fingerprint(url: str) -> str:
    from scrapy import Request
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7"})
    return str(crawler.request_fingerprinter.fingerprint(Request(url)).hex())


def test_an_item_that_cannot_be_pickled_is_dropped_with_an_error_and_the_page_committed(tmp_path):
    site = pages(links={"/p/0": ("/p/1", "/p/2"), "/p/1": ("/p/3", "/p/4")})
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "SelectorInItem")
    finally:
        site.close()
    assert re.search(r"ackqueue cannot store an item \(dict\) of <GET http://127\.0\.0\.1:\d+"
                     r"/p/1>.*cannot be pickled", err), err
    # /p/1's links were committed with its ack: fetched; its item alone is missing.
    assert set(site.requested) == {"/p/0", "/p/1", "/p/2", "/p/3", "/p/4"}
    assert tails(stored(directory)) == Counter(["p/0", "p/2", "p/3", "p/4"])
    assert tails(passed_on(out)) == Counter(["p/0", "p/2", "p/3", "p/4"])
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0


def test_a_child_request_that_cannot_be_pickled_is_dropped_naming_it(tmp_path):
    site = pages(links={"/p/0": ("/p/1", "/p/2"), "/p/1": ("/p/3",)})
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "LockInCbKwargs")
    finally:
        site.close()
    assert re.search(r"ackqueue cannot store <GET http://127\.0\.0\.1:\d+/p/99>", err), err
    assert set(site.requested) == {"/p/0", "/p/1", "/p/2", "/p/3"}
    assert tails(stored(directory)) == Counter(["p/0", "p/1", "p/2", "p/3"])


def test_a_page_whose_commit_fails_is_acked_alone_and_the_crawl_ends(tmp_path):
    """/p/1's item pickles in the reactor's thread only (it holds a thread-bound value), so its
    page's commit fails in the committer's thread, nothing of it stored. The page's request is
    acked all the same, with an error naming it: else it would stay held, and the crawl never
    end."""
    site = pages(links={"/p/0": ("/p/1", "/p/2"), "/p/1": ("/p/3",)})
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "ThreadBoundItem")
    finally:
        site.close()
    assert re.search(r"ackqueue cannot commit what <GET http://127\.0\.0\.1:\d+/p/1> made",
                     err), err
    assert set(site.requested) == {"/p/0", "/p/1", "/p/2"}  # /p/1's link was not stored
    assert tails(stored(directory)) == Counter(["p/0", "p/2"])
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0


def test_a_retry_whose_meta_cannot_be_pickled_is_dropped_naming_it_and_the_crawl_ends(tmp_path):
    """A downloader middleware leaves a lock in every request's meta; /p/1 answers 503, and
    RetryMiddleware's retry copies the lock: the retry cannot be stored. It is dropped with
    an error (its held request acked), and the crawl ends."""
    site = pages(links={"/p/0": ("/p/1", "/p/2")}, **{"/p/1": (503, {}, "busy")})
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "Links",
                         DOWNLOADER_MIDDLEWARES={"scrapy_cases.LockInMeta": 100})
    finally:
        site.close()
    assert re.search(r"ackqueue cannot store <GET http://127\.0\.0\.1:\d+/p/1>", err), err
    assert site.requested["/p/1"] == 1  # the retry was not made
    assert tails(stored(directory)) == Counter(["p/0", "p/2"])
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0


def test_stored_requests_whose_callback_is_gone_go_to_the_dead_letters(tmp_path):
    """A crawl stopped with /d/1 .. /d/3 stored for ``parse_detail``; the spider, edited, calls
    it ``parse_item`` now. Each such request is an error naming it, and is moved to the dead
    letters (kept, to requeue once the spider has its callback again); the crawl ends."""
    site = pages(links={"/p/0": ("/d/1", "/d/2", "/d/3")},
                 **{f"/d/{n}": page() for n in (1, 2, 3)})
    directory = str(tmp_path / "job")
    try:
        crawl(site, directory, "Details", CLOSESPIDER_PAGECOUNT=1, CONCURRENT_REQUESTS=1)
        assert site.requested == Counter({"/p/0": 1})
        out, err = crawl(site, directory, "DetailsRenamed")
    finally:
        site.close()
    for n in (1, 2, 3):
        assert re.search(rf"cannot load the stored request <GET http://127\.0\.0\.1:\d+/d/{n}>"
                         r" .*callback 'parse_detail'", err), err
    assert site.requested == Counter({"/p/0": 1})
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        dead = q.dead_letters()
        assert q.stored_count() == 0
    assert sorted(d.item["url"].rsplit("/", 1)[1] for d in dead) == ["1", "2", "3"]
    assert all(d.item["callback"] == "parse_detail" for d in dead)


def redirect_loops(path: str) -> Answer | None:
    """/loop/N redirects to itself with ``?k=`` counted up, for ever; /p/0 links two loops and
    /p/1 .. /p/6; /slow/N takes 0.3 s and links /slow/N+1 (up to /slow/8)."""
    loop = re.fullmatch(r"/loop/(\d+)(?:\?k=(\d+))?", path)
    if loop:
        k = int(loop.group(2) or 0) + 1
        return 302, {"Location": f"/loop/{loop.group(1)}?k={k}"}, ""
    if path == "/p/0":
        return page("/loop/1", "/loop/2", *(f"/p/{n}" for n in range(1, 7)))
    slow = re.fullmatch(r"/slow/(\d+)", path)
    if slow:
        time.sleep(0.3)
        n = int(slow.group(1))
        return page(f"/slow/{n + 1}") if n < 8 else page()
    return page() if re.fullmatch(r"/p/\d+|/after", path) else None


def test_a_request_dropped_in_process_response_frees_its_hosts_place_at_once(tmp_path):
    """The two loops take both places of 127.0.0.1 (``CONCURRENT_REQUESTS_PER_DOMAIN`` 2) and
    end in RedirectMiddleware's IgnoreRequest (max redirections), raised in process_response.
    Their requests are settled then, not when Scrapy is next idle: the other pages of the host
    are fetched while the slow chain of localhost still runs."""
    site = RouteSite(redirect_loops)
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "TwoHosts", CONCURRENT_REQUESTS_PER_DOMAIN=2,
                         REDIRECT_MAX_TIMES=1)
    finally:
        site.close()
    assert site.requested["/loop/1?k=1"] == 1 and site.requested["/loop/1?k=2"] == 0
    last_page = max(site.order.index(f"/p/{n}") for n in range(1, 7))
    assert last_page < site.order.index("/slow/8"), site.order
    stats = json.loads(next(line for line in out.splitlines() if line.startswith("stats "))[6:])
    assert "ackqueue/settled_when_idle" not in stats, stats


def test_an_errbacks_output_for_a_request_dropped_in_process_response_is_committed(tmp_path):
    """/loop/1 ends in IgnoreRequest from process_response; its errback yields an item and a
    request for /after: committed with the ack of the failed request, as a callback's output
    is (the item in the items queue, /after fetched once)."""
    site = RouteSite(redirect_loops)
    directory = str(tmp_path / "job")
    try:
        out, err = crawl(site, directory, "Errbacks", REDIRECT_MAX_TIMES=1)
        first = site.requested.copy()
        crawl(site, directory, "Errbacks", REDIRECT_MAX_TIMES=1)
    finally:
        site.close()
    assert site.requested == first  # everything settled: nothing fetched again
    assert first["/after"] == 1
    # The two loops fail concurrently: their order in the items queue is the order of the
    # acks, which the test does not fix. What is passed on is what was stored, in any order.
    failed = sorted(item["failed"] for item in stored(directory) if "failed" in item)
    assert failed == ["loop/1?k=1", "loop/2?k=1"]
    assert sorted(item["failed"] for item in passed_on(out) if "failed" in item) == failed
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0
