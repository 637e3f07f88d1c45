"""ackqueue's Scrapy scheduler (``ackqueue.contrib.scrapy``) with real Scrapy processes crawling
a site served on 127.0.0.1, killed with SIGKILL at random moments of the crawl.

What a kill may cost: the requests Scrapy had in flight are fetched again; nothing else. Every
page's item and child requests are committed once, in the commit that acks the page.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from conftest import REPO_ROOT, child_env, seed_for
from polling import wait_until

pytest.importorskip("scrapy")

import ackqueue  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scrapy_crawler import LEAF, Site, stored_items  # noqa: E402

PAGES, KILLS, CONCURRENCY = 250, 10, 8


def start_crawl(site: Site, directory: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "scrapy_crawler.py"), "--port", str(site.port),
         "--dir", directory, "--concurrency", str(CONCURRENCY), *extra],
        env=child_env(PYTHONPATH=os.pathsep.join([REPO_ROOT, HERE])),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.campaign
def test_a_crawl_killed_at_random_moments_fetches_every_page_and_commits_each_once(tmp_path):
    rng = random.Random(seed_for(23))
    site = Site(PAGES)
    directory = str(tmp_path / "job")
    in_flight_at_kills = 0
    kills = 0
    try:
        while kills < KILLS:
            before = site.fetched()
            crawl = start_crawl(site, directory)
            assert crawl.stdout is not None
            wanted = rng.randint(1, 25)  # kill after this many pages came through
            done = 0
            for line in crawl.stdout:
                if line.startswith("done"):
                    done += 1
                    if done == wanted:
                        crawl.send_signal(signal.SIGKILL)
                        break
            rest, err = crawl.communicate(timeout=120)
            if crawl.returncode != -signal.SIGKILL:
                assert crawl.returncode == 0, err
                break  # the crawl ended before the kill: nothing left to kill
            kills += 1
            done += rest.count("done")
            fetched_now = sum((site.fetched() - before).values())
            # Fetched in this run, and not come through as an item before the kill.
            in_flight_at_kills += max(0, fetched_now - done)
        assert kills >= KILLS, "the crawl ended too soon to be killed often enough"
        final = start_crawl(site, directory)
        out, err = final.communicate(timeout=300)
        assert final.returncode == 0, err
        assert "finished" in out
    finally:
        site.close()
    fetched = site.fetched()
    assert set(fetched) == set(range(PAGES)), "pages never fetched"
    items = Counter(item["page"] for item in stored_items(os.path.join(directory, "frontier.fs")))
    assert items == Counter(range(PAGES)), "each page's item committed exactly once"
    twice = sum(n - 1 for n in fetched.values())
    print(f"{kills} kills, {twice} pages fetched again, {in_flight_at_kills} in flight at kills")
    assert twice <= in_flight_at_kills
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.qsize() == 0 and q.delayed_count() == 0  # every request acked
        # Each page's child requests were committed once: every page is in the seen-set.
        assert all(q.seen(key) for key in seen_keys(PAGES, site.port))


def seen_keys(pages: int, port: int) -> list[str]:
    from scrapy import Request
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7"})
    fingerprint = crawler.request_fingerprinter.fingerprint
    return [fingerprint(Request(f"http://127.0.0.1:{port}/p/{n}")).hex() for n in range(pages)]


def crawl_to_end(site: Site, directory: str, *extra: str) -> tuple[int, str, str]:
    crawl = start_crawl(site, directory, *extra)
    out, err = crawl.communicate(timeout=300)
    return crawl.returncode, out, err


def test_retries_keep_their_key_and_meta_and_commit_once(tmp_path):
    site = Site(40, flaky=frozenset({3, 7, 20}))
    try:
        code, out, err = crawl_to_end(site, str(tmp_path / "job"))
    finally:
        site.close()
    assert code == 0, err
    items = stored_items(str(tmp_path / "job" / "frontier.fs"))
    assert Counter(item["page"] for item in items) == Counter(range(40))
    retried = {item["page"]: item["retry_times"] for item in items if item["retry_times"]}
    assert retried == {3: 1, 7: 1, 20: 1}  # the retry's meta reached the callback
    assert site.fetched() == Counter({n: 2 if n in (3, 7, 20) else 1 for n in range(40)})
    with ackqueue.AckQueue(str(tmp_path / "job" / "frontier.fs"), name="requests") as q:
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_a_finished_crawl_run_again_fetches_nothing_not_even_its_start_request(tmp_path):
    site = Site(20)
    try:
        code, _, err = crawl_to_end(site, str(tmp_path / "job"), "--start-dont-filter")
        assert code == 0, err
        first = site.fetched()
        code, out, err = crawl_to_end(site, str(tmp_path / "job"), "--start-dont-filter")
        assert code == 0, err
        assert site.fetched() == first  # the dont_filter start request was keyed too
        assert "done" not in out
    finally:
        site.close()
    # Page 0 twice: once as the dont_filter start request, once linked (as Scrapy does).
    assert first == Counter({n: 2 if n == 0 else 1 for n in range(20)})


def test_a_request_with_a_lambda_callback_is_a_clear_error_naming_it(tmp_path):
    site = Site(10)
    try:
        code, _, err = crawl_to_end(site, str(tmp_path / "job"), "--bad-callback")
    finally:
        site.close()
    assert code == 0, err
    assert "ackqueue cannot store <GET http://127.0.0.1:" in err
    assert "/p/1?again>" in err and "must be methods of the spider" in err
    # The bad request is dropped, as Scrapy drops a request it cannot schedule; the rest of
    # page 1's outcome is committed and the crawl goes on.
    items = stored_items(str(tmp_path / "job" / "frontier.fs"))
    assert Counter(item["page"] for item in items) == Counter(range(10))


def test_a_frontier_of_another_spider_is_refused(tmp_path):
    site = Site(5)
    try:
        code, _, err = crawl_to_end(site, str(tmp_path / "job"))
        assert code == 0, err
        before = site.fetched()
        code, out, err = crawl_to_end(site, str(tmp_path / "job"), "--spider-name", "other")
        assert site.fetched() == before
    finally:
        site.close()
    assert "is the frontier of spider 'pages', not of 'other'" in err


def test_a_crawl_without_jobdir_or_ackqueue_path_says_to_set_one(tmp_path):
    site = Site(5)
    try:
        code, out, err = crawl_to_end(site, str(tmp_path / "job"), "--no-jobdir")
    finally:
        site.close()
    assert "set ACKQUEUE_PATH" in err and "JOBDIR" in err
    assert not site.fetched()


@pytest.mark.campaign
def test_two_crawls_share_one_frontier_and_a_killed_one_loses_nothing(tmp_path):
    """Two crawls with ``ACKQUEUE_SHARED``; the one that passes 20 items first is SIGKILLed.
    The per-host cap (``CONCURRENT_REQUESTS_PER_DOMAIN``) counts the holds of both."""
    site = Site(PAGES)
    directory = str(tmp_path / "job")
    per_host = 12  # each crawl has at most 8 requests out: only both together reach it
    try:
        crawls = [start_crawl(site, directory, "--shared", "--per-domain", str(per_host))
                  for _ in range(2)]
        lines: queue.Queue[tuple[int, str]] = queue.Queue()
        for n, crawl in enumerate(crawls):
            threading.Thread(
                target=lambda n=n, out=crawl.stdout: [lines.put((n, line)) for line in out],
                daemon=True,
            ).start()
        done = Counter()
        while True:
            n, line = lines.get(timeout=120)
            done[n] += line.startswith("done")
            if done[n] >= 20:
                crawls[n].send_signal(signal.SIGKILL)
                break
        killed, survivor = crawls[n], crawls[1 - n]
        assert killed.wait(timeout=60) == -signal.SIGKILL
        assert survivor.wait(timeout=300) == 0, survivor.stderr.read()
        # What the killed one held comes back when its session lapses; a rerun takes it.
        code, _, err = crawl_to_end(site, directory, "--shared", "--per-domain", str(per_host))
        assert code == 0, err
    finally:
        site.close()
    assert set(site.fetched()) == set(range(PAGES))
    items = stored_items(os.path.join(directory, "frontier.fs"), shared=True)
    assert Counter(item["page"] for item in items) == Counter(range(PAGES))
    assert site.most_serving <= per_host


def test_the_scrapy_example_resumes_after_killing_itself(tmp_path):
    example = os.path.join(REPO_ROOT, "examples", "scrapy_crawl.py")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, example, "job", "--pages", "80", *args],
                              cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                              timeout=120)

    killed = run("--die-after", "20")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "killing the crawl (SIGKILL) after 20 items" in killed.stdout
    resumed = run()
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.rstrip().endswith("for 80 of the 80 pages"), resumed.stdout
    again = run()
    assert again.stdout.startswith("this run: 0 items"), again.stdout


def test_ackqueue_stats_reads_the_frontier_while_the_crawl_runs(tmp_path):
    site = Site(30)
    directory = str(tmp_path / "job")
    try:
        # DOWNLOAD_DELAY 0.2 s becomes the host's group_interval: a crawl of some seconds.
        crawl = start_crawl(site, directory, "--delay", "0.2")
        assert crawl.stdout is not None
        assert crawl.stdout.readline().startswith("done")
        stats = subprocess.run(
            [sys.executable, "-m", "ackqueue", "stats", "--json", "--name", "requests",
             os.path.join(directory, "frontier.fs")],
            env=child_env(), capture_output=True, text=True, timeout=60,
        )
        out, err = crawl.communicate(timeout=120)
        assert crawl.returncode == 0, err
    finally:
        site.close()
    assert stats.returncode == 0, stats.stderr
    (requests,) = json.loads(stats.stdout)["queues"]
    assert requests["name"] == "requests" and requests["stored"] > 0  # the crawl was on


def test_a_page_that_fails_is_settled_and_the_crawl_ends(tmp_path):
    site = Site(30, gone=frozenset({2}))  # a 404: HttpErrorMiddleware drops the response
    directory = str(tmp_path / "job")
    try:
        code, _, err = crawl_to_end(site, directory)
        assert code == 0, err
        first = site.fetched()
        code, _, err = crawl_to_end(site, directory)
        assert code == 0, err
        assert site.fetched() == first  # settled: not fetched again
    finally:
        site.close()
    assert first[2] == 1
    items = stored_items(os.path.join(directory, "frontier.fs"))
    pages = Counter(item["page"] for item in items)
    assert 2 not in pages and all(n == 1 for n in pages.values())
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0


def test_a_callback_that_raises_commits_what_it_yielded_and_the_crawl_ends(tmp_path):
    site = Site(30)
    directory = str(tmp_path / "job")
    try:
        code, _, err = crawl_to_end(site, directory, "--raise-on", "3")
    finally:
        site.close()
    assert code == 0, err
    assert "the spider fails on page 3" in err
    items = stored_items(os.path.join(directory, "frontier.fs"))
    assert Counter(item["page"] for item in items) == Counter(range(30))  # page 3's too
    assert site.fetched() == Counter(range(30))  # its children were committed: all fetched
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0


def test_an_errbacks_requests_and_items_are_committed_with_the_failed_request(tmp_path):
    """Errbacks on every request: a download error (``/hangup``, after Scrapy's retries) and
    a 404 (page 5). Each errback yields an item and a request for a page no link leads to;
    both are committed with the ack of the failed request, as a callback's output is."""
    site = Site(20, gone=frozenset({5}))
    directory = str(tmp_path / "job")
    try:
        code, _, err = crawl_to_end(site, directory, "--errback")
        assert code == 0, err
        first = site.requested.copy()
        code, _, err = crawl_to_end(site, directory, "--errback")
        assert code == 0, err
        assert site.requested == first  # everything settled: nothing fetched again
    finally:
        site.close()
    assert first["/hangup"] == 3  # once and Scrapy's two retries
    assert first[f"/leaf/{LEAF}"] == 1  # the errbacks' request (the second one a duplicate)
    items = Counter(item["page"] for item in stored_items(os.path.join(directory, "frontier.fs")))
    assert items == Counter([*(n for n in range(20) if n != 5), "failed hangup", "failed p/5",
                             LEAF])
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.stored_count() == 0


def test_a_redirect_to_another_host_goes_into_that_hosts_group(tmp_path):
    """Page 3 links ``/r/3``, which redirects from 127.0.0.1 to ``localhost``. The frontier's
    group ``localhost`` is paused: the redirected request waits there, unfetched, while the
    127.0.0.1 pages are crawled; stopped, the crawl leaves it stored in that group."""
    site = Site(20)
    directory = str(tmp_path / "job")
    os.makedirs(directory)
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        q.pause_group("localhost", 3600)
    try:
        crawl = start_crawl(site, directory, "--redirect-on", "3")
        wait_until(lambda: set(site.fetched()) == set(range(20)) and site.requested["/r/3"]
                   or crawl.poll() is not None, timeout=120)
        crawl.send_signal(signal.SIGTERM)  # Scrapy closes the crawl (and its frontier)
        out, err = crawl.communicate(timeout=120)
    finally:
        site.close()
    assert site.requested["/r/3"] == 1 and site.requested["/leaf/3"] == 0, err
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        assert q.remove_group("localhost") == 1  # the redirect, in the new host's group


def test_autothrottles_delay_becomes_the_hosts_stored_interval(tmp_path):
    """Pages answer in 0.3 s and AutoThrottle (target concurrency 1, starting at 0.05 s)
    raises the host's delay to about that; the frontier stores it as the group's interval,
    which a later process of the file honours."""
    site = Site(8, latency=0.3)
    directory = str(tmp_path / "job")
    try:
        code, _, err = crawl_to_end(site, directory, "--autothrottle")
    finally:
        site.close()
    assert code == 0, err
    with ackqueue.AckQueue(os.path.join(directory, "frontier.fs"), name="requests") as q:
        for n in range(3):
            q.put({"n": n}, group="127.0.0.1")
        with q.connect() as c:
            got = []
            for _ in range(3):
                c.ack(c.get(timeout=10))
                got.append(time.monotonic())
    spacing = min(b - a for a, b in itertools.pairwise(got))
    assert spacing >= 0.25, f"the group's interval was not stored: {spacing:.3f} s"


def test_the_seen_set_counts_in_scrapys_stats_and_in_ackqueue_stats(tmp_path):
    site = Site(20)
    directory = str(tmp_path / "job")
    try:
        code, out, err = crawl_to_end(site, directory)
    finally:
        site.close()
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith("stats ")]
    stats = json.loads(line.removeprefix("stats "))
    assert stats["ackqueue/frontier/seen"] == 20  # the 20 pages' fingerprints
    assert stats["ackqueue/frontier/ready"] == 0
    path = os.path.join(directory, "frontier.fs")

    def ackqueue_stats(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ackqueue", "stats", "--name", "requests", *args, path],
            env=child_env(), capture_output=True, text=True, timeout=60, check=True,
        )
        return done.stdout

    (requests,) = json.loads(ackqueue_stats("--json"))["queues"]
    assert requests["seen"] == 20
    assert "  seen    20 (keys remembered as done" in ackqueue_stats()
