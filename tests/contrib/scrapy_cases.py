"""Small sites and spiders for tests/contrib/test_scrapy_defects.py: each spider meets one way a
page's outcome can fail to be stored (a same-host redirect, an item or a request that cannot be
pickled, a callback the spider no longer has, a request dropped in process_response).

:class:`RouteSite` serves on 127.0.0.1 whatever its ``route`` function answers. Run as a script,
this module crawls such a site with ackqueue's add-on and one of the spiders below, printing
``item ...`` for each item passed on and ``stats`` / ``finished`` at the end.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable

import scrapy

Answer = tuple[int, dict[str, str], str]


class RouteSite:
    """``route(path)`` answers each GET (None: a 404); :attr:`requested` counts every path,
    :attr:`order` lists them as asked."""

    def __init__(self, route: Callable[[str], Answer | None]) -> None:
        self.requested: Counter[str] = Counter()
        self.order: list[str] = []
        self._lock = threading.Lock()
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with site._lock:
                    site.requested[self.path] += 1
                    site.order.append(self.path)
                answer = route(self.path)
                if answer is None:
                    self.send_error(404)
                    return
                status, headers, text = answer
                body = text.encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def page(*links: str) -> Answer:
    return 200, {}, "<html><body>" + "".join(f'<a href="{h}">x</a> ' for h in links) + "</body>"


class Base(scrapy.Spider):
    name = "cases"

    def __init__(self, port: int = 0, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.port = int(port)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start_requests(self):  # Scrapy < 2.13
        yield scrapy.Request(self.url("/p/0"), callback=self.parse)

    async def start(self):
        for request in self.start_requests():
            yield request

    def parse(self, response, **_):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class Links(Base):
    """Follows every link (a redirect too, as Scrapy's RedirectMiddleware does)."""


class SelectorInItem(Base):
    """/p/1's item holds a parsel Selector, which cannot be pickled (a common slip)."""

    def parse(self, response, **_):
        item = {"url": response.url}
        if response.url.endswith("/p/1"):
            item["title"] = response.css("a")[0]
        yield item
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class LockInCbKwargs(Base):
    """/p/1 also yields a request for /p/99 whose cb_kwargs cannot be pickled (a lock)."""

    def parse(self, response, **_):
        yield from super().parse(response)
        if response.url.endswith("/p/1"):
            yield response.follow("/p/99", callback=self.parse, cb_kwargs={"x": threading.Lock()})


class BoundToThread:
    """A value that pickles only in the thread that made it (one tied to a thread's resource)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def __reduce__(self):
        if threading.get_ident() != self.thread:
            raise TypeError("pickled in another thread than its own")
        return BoundToThread, ()


class ThreadBoundItem(Base):
    """/p/1's item holds a :class:`BoundToThread`."""

    def parse(self, response, **_):
        item: dict[str, object] = {"url": response.url}
        if response.url.endswith("/p/1"):
            item["bound"] = BoundToThread()
        yield item
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class LockInMeta:
    """A downloader middleware that leaves an unpicklable object in ``request.meta`` (as
    scrapy-playwright's page or a Selenium driver does); a retry copies it."""

    def process_request(self, request, spider=None):
        request.meta.setdefault("conn", threading.Lock())


class Details(Base):
    """/p/0's links are parsed by ``parse_detail``."""

    def parse(self, response, **_):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_detail)

    def parse_detail(self, response):
        yield {"detail": response.url}


class DetailsRenamed(Base):
    """:class:`Details` after an edit: ``parse_detail`` is now ``parse_item``."""

    def parse(self, response, **_):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_item)

    def parse_item(self, response):
        yield {"detail": response.url}


class Errbacks(Base):
    """Every link with an errback that yields an item and a request for /after."""

    def parse(self, response, **_):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, errback=self.failed)

    def failed(self, failure):
        yield {"failed": failure.request.url.split("/", 3)[3]}
        yield scrapy.Request(self.url("/after"), callback=self.parse)


class TwoHosts(Base):
    """Starts at /p/0 on 127.0.0.1 and at /slow/0 on localhost (the same server)."""

    def start_requests(self):
        yield scrapy.Request(self.url("/p/0"), callback=self.parse)
        yield scrapy.Request(f"http://localhost:{self.port}/slow/0", callback=self.parse)


class PrintPipeline:
    def process_item(self, item, spider=None):
        print("item", json.dumps(item), flush=True)
        return item


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spider", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--settings", default="{}", help="JSON: more Scrapy settings")
    args = parser.parse_args()
    from scrapy.crawler import CrawlerProcess

    settings: dict[str, object] = {
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS": 8,
        "ITEM_PIPELINES": {"scrapy_cases.PrintPipeline": 100},
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "ADDONS": {"ackqueue.contrib.scrapy.Addon": 0},
        "JOBDIR": args.dir,
        **json.loads(args.settings),
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(globals()[args.spider])
    process.crawl(crawler, port=args.port)
    process.start()
    assert crawler.stats is not None
    ours = {k: v for k, v in (crawler.stats.get_stats() or {}).items() if k.startswith("ackq")}
    print("stats", json.dumps(ours), flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
