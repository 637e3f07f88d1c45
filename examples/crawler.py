"""A resumable, polite web crawler: stop it any way you like, run it again, and it finishes.

It serves a generated site of several hosts on 127.0.0.1 itself (it never reaches the
internet) and crawls it with several threads. The URL frontier is one ackqueue queue and the
fetched pages go to another, in the same file. The frontier does what a crawler's frontier
must, on disk and not in RAM:

* URLs are put by key (``put(url, key=url)``): a URL already waiting, held or fetched
  (``unique="forever"``) is not queued again, so there is no seen-set to rebuild at start;
* each URL is put in its host's group: at most ``--per-host`` requests to one host at once
  (``max_held_per_group``), and gets go round-robin across hosts;
* a host that answers 429 with Retry-After gets the URL back later (``c.snooze``), without
  spending one of its attempts.

Each step -- put the page's new links, store the page, ack its URL -- is one transaction, the
dedup included, so a crash anywhere leaves either all of the step or none of it.

    python examples/crawler.py /tmp/crawl            # crawl; Ctrl-C or kill -9 it, then
    python examples/crawler.py /tmp/crawl            # run again: it resumes

Each page takes the server 0.2 s (``--delay``), so a crawl of 50 pages runs for a few
seconds, time enough to stop it; it reports its progress every second.

At the end it checks its own work: every page stored exactly once, no page that an earlier
run had finished fetched again, and never more than ``--per-host`` requests at once to a host.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import ackqueue

LINK = re.compile(r'href="(http://[^"]+)"')
# Talk to our own servers directly, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def url_of(page: int, hosts: int) -> str:
    """The generated site: page ``n`` lives on host ``n % hosts``, under a name of its own
    (the crawler maps the names to the servers' ports, as DNS would)."""
    return f"http://site{page % hosts}.test/page/{page}"


def links_of(page: int, pages: int) -> list[int]:
    """A page links to the next one and to two far-away ones."""
    return sorted({(page + 1) % pages, (page * 3 + 1) % pages, (page * 7 + 2) % pages})


class Site:
    """The hosts, each served on 127.0.0.1; they count what the crawl must not do: fetch a
    page finished in an earlier run, or send one host more requests at once than allowed."""

    def __init__(self, pages: int, hosts: int, delay: float, finished: set[str]) -> None:
        self.refetched: list[str] = []
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.servers: dict[str, ThreadingHTTPServer] = {}
        self._busy: dict[str, int] = {}
        self._throttled: set[int] = set()
        for h in range(hosts):
            name = f"site{h}.test"
            server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(name, pages, hosts,
                                                                          delay, finished))
            server.daemon_threads = True
            self.servers[name] = server
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def address(self, url: str) -> str:
        """Where ``url`` is served here."""
        parts = urlsplit(url)
        port = self.servers[parts.hostname or ""].server_address[1]
        return f"http://127.0.0.1:{port}{parts.path}"

    def _handler(self, name: str, pages: int, hosts: int, delay: float,
                 finished: set[str]) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                match = re.fullmatch(r"/page/(\d+)", self.path)
                if match is None or url_of(int(match.group(1)) % pages, hosts) != (
                        f"http://{name}{self.path}"):
                    self.send_error(404)
                    return
                page = int(match.group(1))
                with site.lock:
                    if f"http://{name}{self.path}" in finished:
                        site.refetched.append(self.path)
                    site._busy[name] = site._busy.get(name, 0) + 1
                    site.most_at_once = max(site.most_at_once, site._busy[name])
                    throttle = page % 7 == 3 and page not in site._throttled
                    site._throttled.add(page)
                try:
                    time.sleep(delay)  # a real server takes a while
                finally:  # before answering: the crawler may ask again once it has the answer
                    with site.lock:
                        site._busy[name] -= 1
                if throttle:  # busy: come back later, once
                    self.send_response(429)
                    self.send_header("Retry-After", "0.05")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                links = "".join(f'<a href="{url_of(n, hosts)}">{n}</a> '
                                for n in links_of(page, pages))
                body = f"<html><body><h1>{self.path}</h1>{links}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler

    def shutdown(self) -> None:
        for server in self.servers.values():
            server.shutdown()


def stored(q: ackqueue.AckQueue) -> list:
    """Every item stored in ``q`` now, left in place: got and, on leaving, given back."""
    items = []
    with q.connect() as c:
        while True:
            try:
                items.append(c.get_nowait())
            except ackqueue.Empty:
                return items


class Crawler:
    def __init__(self, state_dir: str, site_pages: int, hosts: int, per_host: int,
                 threads: int, delay: float, verbose: bool) -> None:
        os.makedirs(state_dir, exist_ok=True)
        path = os.path.join(state_dir, "crawl.fs")
        self.frontier = ackqueue.AckQueue(path, name="frontier", unique="forever",
                                          max_held_per_group=per_host)
        self.pages = ackqueue.AckQueue(path, name="pages")  # for the next stage, an indexer
        self.threads = threads
        self.verbose = verbose
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.busy = 0
        self.fetched = 0
        self.snoozed = 0
        finished = {page["url"] for page in stored(self.pages)}  # for the self-check only
        self.site = Site(site_pages, hosts, delay, finished)
        start = url_of(0, hosts)
        self.resumed = not self.frontier.put(start, key=start, group=self.host(start))

    @staticmethod
    def host(url: str) -> str:
        return urlsplit(url).hostname or ""

    def step(self, c: ackqueue.Consumer, url: str) -> None:
        """Fetch one page, then store it, put its links and ack it: all or nothing."""
        try:
            with OPENER.open(self.site.address(url), timeout=30) as response:
                html = response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code != 429:
                raise
            c.snooze(url, float(error.headers.get("Retry-After", "1")))
            with self.lock:
                self.snoozed += 1
            return
        links = list(dict.fromkeys(LINK.findall(html)))
        with c.transaction():
            for link in links:  # a link queued, held or fetched already is not put again
                self.frontier.put(link, key=link, group=self.host(link))
            self.pages.put({"url": url, "links": len(links), "bytes": len(html)})
            c.ack(url)
        with self.lock:
            self.fetched += 1
            if self.verbose:  # under the lock: threads printing at once interleave lines
                print(f"fetched {url}", flush=True)

    def worker(self) -> None:
        with self.frontier.connect() as c:
            while not self.stop.is_set():
                try:
                    url = c.get(timeout=0.1)
                except ackqueue.Empty:
                    continue
                with self.lock:
                    self.busy += 1
                try:
                    self.step(c, url)
                finally:
                    with self.lock:
                        self.busy -= 1

    def finished(self) -> bool:
        with self.lock:
            if self.busy:
                return False
        # Stored and not acked: ready, waiting for its host, snoozed or held (join()'s count).
        return self.frontier.unfinished_tasks == 0

    def run(self) -> bool:
        """Crawl until the frontier is empty (True) or a stop was asked for (False)."""
        workers = [threading.Thread(target=self.worker, daemon=True) for _ in range(self.threads)]
        for w in workers:
            w.start()
        quiet = 0
        reported = time.monotonic()
        while not self.stop.wait(0.05):
            quiet = quiet + 1 if self.finished() else 0
            if not self.verbose and time.monotonic() - reported >= 1.0:
                reported = time.monotonic()
                with self.lock:
                    print(f"  {self.fetched} pages so far; Ctrl-C stops, a rerun resumes",
                          flush=True)
            if quiet >= 3:  # empty and idle three checks in a row: done
                self.stop.set()
                break
        for w in workers:
            w.join()
        return quiet >= 3

    def close(self) -> None:
        self.frontier.close()
        self.pages.close()
        self.site.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("state_dir", help="where the crawl's queue file lives")
    parser.add_argument("--pages", type=int, default=200, help="size of the generated site")
    parser.add_argument("--hosts", type=int, default=3, help="hosts the site is spread over")
    parser.add_argument("--per-host", type=int, default=2,
                        help="requests at once to one host, at most (default 2)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.2,
                        help="server time per page in seconds (default 0.2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every page")
    args = parser.parse_args(argv)

    crawler = Crawler(args.state_dir, args.pages, args.hosts, args.per_host, args.threads,
                      args.delay, args.verbose)
    signal.signal(signal.SIGINT, lambda *_: crawler.stop.set())
    signal.signal(signal.SIGTERM, lambda *_: crawler.stop.set())
    print(("resuming" if crawler.resumed else "starting") + f" a crawl of {args.hosts} hosts "
          f"on 127.0.0.1 with {args.threads} threads, at most {args.per_host} requests at "
          "once per host", flush=True)
    complete = crawler.run()
    if not complete:
        crawler.close()
        print(f"interrupted after {crawler.fetched} pages; run again to resume", flush=True)
        return 130
    urls = [page["url"] for page in stored(crawler.pages)]
    crawler.close()
    once = len(urls) == len(set(urls)) == args.pages
    refetched = len(crawler.site.refetched)
    polite = crawler.site.most_at_once <= args.per_host
    print(f"crawl complete: {len(set(urls))} of {args.pages} pages"
          f"{', each stored once' if once else ', NOT each stored once'}; "
          f"{crawler.fetched} fetched in this run; {refetched} finished pages fetched again; "
          f"{crawler.snoozed} snoozed after a 429; at most {crawler.site.most_at_once} "
          f"request(s) at once to one host", flush=True)
    return 0 if once and refetched == 0 and polite else 1


if __name__ == "__main__":
    sys.exit(main())
