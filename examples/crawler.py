"""A resumable web crawler: stop it any way you like, run it again, and it finishes the job.

It serves a generated site on 127.0.0.1 itself (it never reaches the internet) and crawls it
with several threads. The URL frontier is one ackqueue queue and the fetched pages go to
another, in the same file. Each step -- put the page's new links, store the page, ack its URL --
is one transaction, so a crash anywhere leaves either all of the step or none of it.

    python examples/crawler.py /tmp/crawl            # crawl; Ctrl-C or kill -9 it, then
    python examples/crawler.py /tmp/crawl            # run again: it resumes

Each page takes the server 0.2 s (``--delay``), so a crawl of 50 pages with 4 threads runs for
a few seconds, time enough to stop it; it reports its progress every second.

At the end it checks its own work: every page stored exactly once, and no page that an earlier
run had finished was fetched again.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ackqueue

LINK = re.compile(r'href="(/page/\d+)"')
# Talk to our own server directly, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def links_of(page: int, pages: int) -> list[int]:
    """The generated site: a page links to the next one and to two far-away ones."""
    return sorted({(page + 1) % pages, (page * 3 + 1) % pages, (page * 7 + 2) % pages})


class Site:
    """The site, served on 127.0.0.1; it counts fetches of pages finished in earlier runs."""

    def __init__(self, pages: int, delay: float, finished: set[str]) -> None:
        self.refetched: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                match = re.fullmatch(r"/page/(\d+)", self.path)
                if match is None or int(match.group(1)) >= pages:
                    self.send_error(404)
                    return
                if self.path in finished:
                    site.refetched.append(self.path)
                time.sleep(delay)  # a real server takes a while
                links = "".join(f'<a href="/page/{n}">{n}</a> '
                                for n in links_of(int(match.group(1)), pages))
                body = f"<html><body><h1>{self.path}</h1>{links}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


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
    def __init__(self, state_dir: str, site_pages: int, threads: int, delay: float,
                 verbose: bool) -> None:
        os.makedirs(state_dir, exist_ok=True)
        path = os.path.join(state_dir, "crawl.fs")
        self.frontier = ackqueue.AckQueue(path, name="frontier")
        self.pages = ackqueue.AckQueue(path, name="pages")  # for the next stage, an indexer
        self.threads = threads
        self.verbose = verbose
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.busy = 0
        self.fetched = 0
        finished = {page["path"] for page in stored(self.pages)}
        self.seen = finished | set(stored(self.frontier))
        self.resumed = bool(self.seen)
        if not self.seen:
            self.frontier.put("/page/0")
            self.seen.add("/page/0")
        self.site = Site(site_pages, delay, finished)

    def step(self, c: ackqueue.Consumer, path: str) -> None:
        """Fetch one page, then store it, put its new links and ack it: all or nothing."""
        with OPENER.open(self.site.base + path, timeout=30) as response:
            html = response.read().decode()
        links = LINK.findall(html)
        with self.lock:
            new = [link for link in dict.fromkeys(links) if link not in self.seen]
            self.seen.update(new)
        try:
            with c.transaction():
                for link in new:
                    self.frontier.put(link)
                self.pages.put({"path": path, "links": len(links), "bytes": len(html)})
                c.ack(path)
        except BaseException:
            with self.lock:
                self.seen.difference_update(new)  # they were not put after all
            raise
        with self.lock:
            self.fetched += 1
            if self.verbose:  # under the lock: threads printing at once interleave lines
                print(f"fetched {path}", flush=True)

    def worker(self) -> None:
        with self.frontier.connect() as c:
            while not self.stop.is_set():
                try:
                    path = c.get(timeout=0.1)
                except ackqueue.Empty:
                    continue
                with self.lock:
                    self.busy += 1
                try:
                    self.step(c, path)
                finally:
                    with self.lock:
                        self.busy -= 1

    def finished(self) -> bool:
        with self.lock:
            if self.busy:
                return False
        return self.frontier.qsize() == 0 and self.frontier.unacked_count() == 0

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
        self.site.server.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("state_dir", help="where the crawl's queue file lives")
    parser.add_argument("--pages", type=int, default=200, help="size of the generated site")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.2,
                        help="server time per page in seconds (default 0.2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every page")
    args = parser.parse_args(argv)

    crawler = Crawler(args.state_dir, args.pages, args.threads, args.delay, args.verbose)
    signal.signal(signal.SIGINT, lambda *_: crawler.stop.set())
    signal.signal(signal.SIGTERM, lambda *_: crawler.stop.set())
    print(("resuming" if crawler.resumed else "starting") + f" a crawl of {crawler.site.base} "
          f"with {args.threads} threads", flush=True)
    complete = crawler.run()
    if not complete:
        crawler.close()
        print(f"interrupted after {crawler.fetched} pages; run again to resume", flush=True)
        return 130
    paths = [page["path"] for page in stored(crawler.pages)]
    crawler.close()
    once = len(paths) == len(set(paths)) == args.pages
    refetched = len(crawler.site.refetched)
    print(f"crawl complete: {len(set(paths))} of {args.pages} pages"
          f"{', each stored once' if once else ', NOT each stored once'}; "
          f"{crawler.fetched} fetched in this run; {refetched} finished pages fetched again",
          flush=True)
    return 0 if once and refetched == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
