"""A Scrapy crawl that survives kill -9: ackqueue's add-on on a site served on 127.0.0.1.

The script serves a generated site (``--pages`` pages, each linking two others) from a thread,
then crawls it with Scrapy and one line of settings, ``ADDONS = {"ackqueue.contrib.scrapy.Addon":
0}``: the frontier, the seen-set and the scraped items live in ``JOBDIR/frontier.fs``. With
``--die-after N`` the crawl kills itself (SIGKILL) after N items; run it again and it resumes:
no page whose outcome was committed is fetched again, and each page's item is stored once.

    python examples/scrapy_crawl.py crawl-job --pages 200 --die-after 50
    python examples/scrapy_crawl.py crawl-job --pages 200

Needs Scrapy: ``pip install Scrapy`` (or, in a checkout, ``pip install '.[scrapy]'``).
"""

from __future__ import annotations

import argparse
import http.server
import os
import re
import signal
import threading

import scrapy
from scrapy.crawler import CrawlerProcess

import ackqueue


def serve_site(pages: int, jobdir: str) -> http.server.ThreadingHTTPServer:
    """The site, on the port of the crawl's first run (the stored requests name it)."""
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            found = re.fullmatch(r"/p/(\d+)", self.path)
            if not found or int(found.group(1)) >= pages:
                self.send_error(404)
                return
            n = int(found.group(1))
            links = "".join(f'<a href="/p/{(2 * n + k) % pages}">link</a>' for k in (1, 2))
            body = f"<html><title>page {n}</title><body>{links}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    os.makedirs(jobdir, exist_ok=True)
    port_file = os.path.join(jobdir, "site-port")
    port = 0
    if os.path.exists(port_file):
        with open(port_file) as f:
            port = int(f.read())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    with open(port_file, "w") as f:
        f.write(str(server.server_address[1]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class PagesSpider(scrapy.Spider):
    name = "pages"

    def __init__(self, port: int = 0, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.start_urls = [f"http://127.0.0.1:{port}/p/0"]

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a", callback=self.parse)


class DieAfter:
    """An item pipeline that kills the process after ``--die-after`` items (0: never)."""

    limit = 0
    seen = 0

    def process_item(self, item, spider=None):
        DieAfter.seen += 1
        if DieAfter.seen == DieAfter.limit:
            print(f"killing the crawl (SIGKILL) after {DieAfter.seen} items", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return item


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobdir", help="the crawl's JOBDIR (its frontier is JOBDIR/frontier.fs)")
    parser.add_argument("--pages", type=int, default=200, help="pages on the local site")
    parser.add_argument("--die-after", type=int, default=0, metavar="N",
                        help="SIGKILL the crawl after N items (0: run to the end)")
    args = parser.parse_args()
    DieAfter.limit = args.die_after
    server = serve_site(args.pages, args.jobdir)
    process = CrawlerProcess({
        "ADDONS": {"ackqueue.contrib.scrapy.Addon": 0},
        "JOBDIR": args.jobdir,
        "ITEM_PIPELINES": {DieAfter: 100},
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    })
    process.crawl(PagesSpider, port=server.server_address[1])
    process.start()
    server.shutdown()
    frontier = os.path.join(args.jobdir, "frontier.fs")
    with ackqueue.AckQueue(frontier, name="items") as items, items.connect() as reader:
        urls = set()
        while True:  # read every stored item; the reader acks none, so all stay stored
            try:
                urls.add(reader.get_nowait()["url"])
            except ackqueue.Empty:
                break
        print(f"this run: {DieAfter.seen} items; {frontier} holds {items.unacked_count()} "
              f"items, for {len(urls)} of the {args.pages} pages")


if __name__ == "__main__":
    main()
