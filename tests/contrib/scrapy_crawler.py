"""A local site and a spider for the Scrapy tests and benchmarks/kill_scrapy.py.

The site (:class:`Site`) serves ``/p/0`` .. ``/p/N-1`` on 127.0.0.1 from a thread; page ``i``
links pages ``2i+1`` and ``2i+2`` (modulo N, so every page links two others and all are
reachable from ``/p/0``), and the site counts how often each page was fetched.

Run as a script, it crawls such a site with ackqueue's add-on (``--frontier ackqueue``) or
with Scrapy's own ``JOBDIR`` (``--frontier jobdir``), printing ``done PAGE`` once an item has
been passed on (with ackqueue: after its page's outcome was committed), so that a test can kill
it at a random moment of the crawl.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import sys
import threading
import time
from collections import Counter

import scrapy


class _Server(http.server.ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: more connections arriving at once than that
    # (Scrapy opens CONCURRENT_REQUESTS of them, 8 here, and the add-on lets a commit's worth
    # of requests out together) had their SYN dropped by the kernel, and each such fetch
    # waited out TCP's one-second retransmission: 1-1.5 s of a 1,000-page crawl spent idle,
    # in neither the crawler's code nor the server's. A server on the web listens with more.
    request_queue_size = 128


class Site:
    """``pages`` pages on 127.0.0.1, served by a thread until :meth:`close`."""

    def __init__(
        self, pages: int, flaky: frozenset[int] = frozenset(), gone: frozenset[int] = frozenset(),
        latency: float = 0.0,
    ) -> None:
        """``flaky``: pages that answer 503 the first time (Scrapy retries them); ``gone``:
        pages that answer 404; ``latency``: seconds each page takes to answer.

        Besides the pages: ``/hangup`` closes the connection without an answer (a download
        error), ``/leaf/N`` is a page without links, ``/r/N`` redirects to ``/leaf/N`` on
        another host (``localhost``, the same server); :attr:`requested` counts every path."""
        self.pages = pages
        self.flaky = flaky
        self.gone = gone
        self.latency = latency
        self.fetches: Counter[int] = Counter()
        self.requested: Counter[str] = Counter()
        self.serving = self.most_serving = 0  # requests being answered at once, and the most
        self._lock = threading.Lock()
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with site._lock:
                    site.requested[self.path] += 1
                if self._other_path():
                    return
                found = re.fullmatch(r"/p/(\d+)(\?.*)?", self.path)
                if not found or int(found.group(1)) >= site.pages:
                    self.send_error(404)
                    return
                page = int(found.group(1))
                with site._lock:
                    site.fetches[page] += 1
                    first = site.fetches[page] == 1
                    site.serving += 1
                    site.most_serving = max(site.most_serving, site.serving)
                try:
                    self._answer(page, first)
                finally:
                    with site._lock:
                        site.serving -= 1

            def _other_path(self) -> bool:
                if self.path == "/hangup":
                    self.close_connection = True
                    return True
                redirect = re.fullmatch(r"/r/(\d+)", self.path)
                if redirect:
                    self.send_response(302)
                    self.send_header(
                        "Location", f"http://localhost:{site.port}/leaf/{redirect.group(1)}"
                    )
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                leaf = re.fullmatch(r"/leaf/(\d+)", self.path)
                if leaf:
                    self._send(f"<html><title>leaf {leaf.group(1)}</title></html>".encode())
                    return True
                return False

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _answer(self, page: int, first: bool) -> None:
                if site.latency:
                    time.sleep(site.latency)  # a slow server, for AutoThrottle
                if first and page in site.flaky:
                    self.send_error(503)
                    return
                if page in site.gone:
                    self.send_error(404)
                    return
                links = [(2 * page + 1) % site.pages, (2 * page + 2) % site.pages]
                body = (
                    f"<html><title>page {page}</title><body>"
                    + "".join(f'<a href="/p/{n}">{n}</a> ' for n in links)
                    + "</body></html>"
                ).encode()
                self._send(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def fetched(self) -> Counter[int]:
        with self._lock:
            return Counter(self.fetches)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


LEAF = 999_999  # the page an errback asks for (no link leads to it)


class PagesSpider(scrapy.Spider):
    name = "pages"

    def __init__(
        self, port: int = 0, start_dont_filter: bool = False, bad_callback: bool = False,
        raise_on: int = -1, errback: bool = False, redirect_on: int = -1, **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        self.port = int(port)
        self.start_dont_filter = start_dont_filter
        self.bad_callback = bad_callback
        self.raise_on = raise_on
        self.errback = errback
        self.redirect_on = redirect_on

    def start_requests(self):  # Scrapy < 2.13
        # Keyed like any page by default (Scrapy's own start requests are dont_filter;
        # ackqueue keys those too, under a key of their own: tests/contrib/test_scrapy.py).
        yield scrapy.Request(
            f"http://127.0.0.1:{self.port}/p/0", dont_filter=self.start_dont_filter
        )

    async def start(self):
        for request in self.start_requests():
            yield request

    def parse(self, response):
        page = int(response.url.rsplit("/", 1)[1])
        yield {
            "page": page,
            "title": response.css("title::text").get(),
            "retry_times": response.meta.get("retry_times", 0),
        }
        errback = self.failed if self.errback else None
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, errback=errback)
        if self.errback and page == 1:
            yield response.follow("/hangup", callback=self.parse, errback=errback)
        if page == self.redirect_on:
            yield response.follow(f"/r/{page}", callback=self.parse)
        if self.bad_callback and page == 1:
            yield response.follow("/p/1?again", callback=lambda r: None)
        if page == self.raise_on:
            raise ValueError(f"the spider fails on page {page}, after its output")


    def failed(self, failure):
        """An errback: an item saying so, and a request for a page no link leads to."""
        yield {"page": f"failed {failure.request.url.split('/', 3)[3]}", "retry_times": 0}
        yield scrapy.Request(
            f"http://127.0.0.1:{self.port}/leaf/{LEAF}", callback=self.parse
        )


class PrintPipeline:
    """Says which page's item came through, for the test to count and to kill on."""

    def process_item(self, item, spider=None):
        print(f"done {item['page']}", flush=True)
        return item


def stored_items(path: str, shared: bool = False) -> list[dict[str, object]]:
    """The items a crawl committed to the frontier file ``path`` (read without taking them)."""
    import ackqueue

    with ackqueue.AckQueue(path, name="items", shared=shared) as q, q.connect() as c:
        got = []
        while True:
            try:
                got.append(c.get_nowait())
            except ackqueue.Empty:
                return got


def settings_for(frontier: str, directory: str, concurrency: int) -> dict[str, object]:
    settings: dict[str, object] = {
        "LOG_LEVEL": "ERROR",
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "ITEM_PIPELINES": {"scrapy_crawler.PrintPipeline": 100},
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "JOBDIR": directory,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
    }
    if frontier == "ackqueue":
        settings["ADDONS"] = {"ackqueue.contrib.scrapy.Addon": 0}
    return settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True, help="JOBDIR (ackqueue's file lies in it)")
    parser.add_argument("--frontier", choices=["ackqueue", "jobdir"], default="ackqueue")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--per-domain", type=int, default=0, help="default: --concurrency")
    parser.add_argument("--delay", type=float, default=0.0, help="DOWNLOAD_DELAY")
    parser.add_argument("--durability", default="strict", help="ACKQUEUE_DURABILITY")
    parser.add_argument("--concurrent-items", type=int, default=0,
                        help="CONCURRENT_ITEMS (default: Scrapy's)")
    parser.add_argument("--spider-name", default="pages")
    parser.add_argument("--start-dont-filter", action="store_true")
    parser.add_argument("--bad-callback", action="store_true")
    parser.add_argument("--raise-on", type=int, default=-1, help="parse raises on this page")
    parser.add_argument("--no-jobdir", action="store_true")
    parser.add_argument("--shared", action="store_true")
    parser.add_argument("--errback", action="store_true",
                        help="requests have an errback; page 1 links /hangup")
    parser.add_argument("--redirect-on", type=int, default=-1,
                        help="this page links /r/PAGE (a redirect to another host)")
    parser.add_argument("--autothrottle", action="store_true",
                        help="AUTOTHROTTLE_ENABLED, starting at 0.05 s")
    args = parser.parse_args(argv)
    from scrapy.crawler import CrawlerProcess

    PagesSpider.name = args.spider_name
    settings = settings_for(args.frontier, args.dir, args.concurrency)
    settings["CONCURRENT_REQUESTS_PER_DOMAIN"] = args.per_domain or args.concurrency
    settings["DOWNLOAD_DELAY"] = args.delay
    settings["ACKQUEUE_DURABILITY"] = args.durability
    if args.concurrent_items:
        settings["CONCURRENT_ITEMS"] = args.concurrent_items
    if args.no_jobdir:
        del settings["JOBDIR"]
    if args.shared:
        settings["ACKQUEUE_SHARED"] = True
    if args.autothrottle:
        settings.update(AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_START_DELAY=0.05,
                        AUTOTHROTTLE_TARGET_CONCURRENCY=1.0)
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(PagesSpider)
    process.crawl(
        crawler, port=args.port, start_dont_filter=args.start_dont_filter,
        bad_callback=args.bad_callback, raise_on=args.raise_on, errback=args.errback,
        redirect_on=args.redirect_on,
    )
    process.start()
    assert crawler.stats is not None
    ours = {k: v for k, v in (crawler.stats.get_stats() or {}).items() if k.startswith("ackqueue")}
    print("stats", json.dumps(ours), flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
