"""A resumable asyncio web crawler: stop it any way you like, run it again, it finishes the job.

The asyncio twin of ``crawler.py``, on the standard library alone: the event loop serves a
generated site on 127.0.0.1 (it never reaches the internet) and crawls it with several tasks,
each with its own consumer of the URL frontier; HTTP is a few lines over
``asyncio.open_connection``. The frontier and the fetched pages are two ackqueue queues in one
file, and each step -- put the page's new links, store the page, ack its URL -- is one
``async with c.transaction():``, so a crash anywhere leaves all of the step or none of it.

    python examples/async_crawler.py /tmp/acrawl     # crawl; Ctrl-C or kill -9 it, then
    python examples/async_crawler.py /tmp/acrawl     # run again: it resumes

At the end it checks its own work: every page stored exactly once, and no page that an earlier
run had finished was fetched again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from typing import Any

import ackqueue

LINK = re.compile(r'href="(/page/\d+)"')


def links_of(page: int, pages: int) -> list[int]:
    """The generated site: a page links to the next one and to two far-away ones."""
    return sorted({(page + 1) % pages, (page * 3 + 1) % pages, (page * 7 + 2) % pages})


class Site:
    """The site, served by the crawler's own loop; it counts fetches of finished pages."""

    def __init__(self, pages: int, delay: float, finished: set[str]) -> None:
        self.pages, self.delay, self.finished = pages, delay, finished
        self.refetched: list[str] = []
        self.base = ""
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            path = request.split()[1].decode()
            match = re.fullmatch(r"/page/(\d+)", path)
            if match is None or int(match.group(1)) >= self.pages:
                writer.write(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            if path in self.finished:
                self.refetched.append(path)
            await asyncio.sleep(self.delay)  # a real server takes a while
            links = "".join(f'<a href="/page/{n}">{n}</a> '
                            for n in links_of(int(match.group(1)), self.pages))
            body = f"<html><body><h1>{path}</h1>{links}</body></html>".encode()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        finally:
            await writer.drain()
            writer.close()


async def fetch(url: str) -> str:
    """GET ``url`` (http://host:port/path) with HTTP/1.0; the body as text."""
    host_port, path = url.removeprefix("http://").split("/", 1)
    host, port = host_port.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"GET /{path} HTTP/1.0\r\nHost: {host_port}\r\n\r\n".encode())
        await writer.drain()
        response = await reader.read()
    finally:
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200"):
        raise OSError(f"{url}: {head.splitlines()[0].decode()}")
    return body.decode()


def stored(q: ackqueue.AsyncAckQueue[Any]) -> list[Any]:
    """Every item stored in ``q`` now, left in place: got without blocking, given back."""
    items = []
    with q.sync.connect() as c:
        while True:
            try:
                items.append(c.get_nowait())
            except ackqueue.Empty:
                return items


class Crawler:
    def __init__(self, state_dir: str, site_pages: int, tasks: int, delay: float,
                 verbose: bool) -> None:
        os.makedirs(state_dir, exist_ok=True)
        path = os.path.join(state_dir, "crawl.fs")
        self.frontier: ackqueue.AsyncAckQueue[str] = ackqueue.AsyncAckQueue(path, name="frontier")
        self.pages: ackqueue.AsyncAckQueue[dict[str, Any]] = ackqueue.AsyncAckQueue(
            path, name="pages")  # for the next stage, an indexer
        self.tasks = tasks
        self.verbose = verbose
        self.stop = asyncio.Event()
        self.busy = 0
        self.fetched = 0
        finished = {page["path"] for page in stored(self.pages)}
        self.seen = finished | set(stored(self.frontier))
        self.resumed = bool(self.seen)
        self.site = Site(site_pages, delay, finished)

    async def step(self, c: ackqueue.AsyncConsumer[str], path: str) -> None:
        """Fetch one page, then store it, put its new links and ack it: all or nothing."""
        html = await fetch(self.site.base + path)
        links = LINK.findall(html)
        new = [link for link in dict.fromkeys(links) if link not in self.seen]
        self.seen.update(new)
        try:
            async with c.transaction():
                await self.frontier.put_many(new)
                await self.pages.put({"path": path, "links": len(links), "bytes": len(html)})
                await c.ack(path)
        except BaseException:
            self.seen.difference_update(new)  # they were not put after all
            raise
        self.fetched += 1
        if self.verbose:
            print(f"fetched {path}", flush=True)

    async def worker(self) -> None:
        async with self.frontier.connect() as c:
            while not self.stop.is_set():
                try:
                    path = await c.get(timeout=0.1)
                except ackqueue.Empty:
                    continue
                self.busy += 1
                try:
                    await self.step(c, path)
                finally:
                    self.busy -= 1

    def finished(self) -> bool:
        return not self.busy and self.frontier.qsize() == 0 and self.frontier.unacked_count() == 0

    async def run(self) -> bool:
        """Crawl until the frontier is empty (True) or a stop was asked for (False)."""
        await self.site.start()
        if not self.seen:
            await self.frontier.put("/page/0")
            self.seen.add("/page/0")
        print(("resuming" if self.resumed else "starting") + f" a crawl of {self.site.base} "
              f"with {self.tasks} tasks", flush=True)
        workers = [asyncio.create_task(self.worker()) for _ in range(self.tasks)]
        quiet = 0
        reported = time.monotonic()
        while not self.stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.05)
            quiet = quiet + 1 if self.finished() else 0
            if not self.verbose and time.monotonic() - reported >= 1.0:
                reported = time.monotonic()
                print(f"  {self.fetched} pages so far; Ctrl-C stops, a rerun resumes",
                      flush=True)
            if quiet >= 3:  # empty and idle three checks in a row: done
                self.stop.set()
        await asyncio.gather(*workers)
        return quiet >= 3

    async def close(self) -> None:
        await self.frontier.aclose()
        await self.pages.aclose()
        if self.site.server is not None:
            self.site.server.close()


async def crawl(args: argparse.Namespace) -> int:
    crawler = Crawler(args.state_dir, args.pages, args.tasks, args.delay, args.verbose)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, crawler.stop.set)
    complete = await crawler.run()
    if not complete:
        await crawler.close()
        print(f"interrupted after {crawler.fetched} pages; run again to resume", flush=True)
        return 130
    paths = [page["path"] for page in stored(crawler.pages)]
    await crawler.close()
    once = len(paths) == len(set(paths)) == args.pages
    refetched = len(crawler.site.refetched)
    print(f"crawl complete: {len(set(paths))} of {args.pages} pages"
          f"{', each stored once' if once else ', NOT each stored once'}; "
          f"{crawler.fetched} fetched in this run; {refetched} finished pages fetched again",
          flush=True)
    return 0 if once and refetched == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("state_dir", help="where the crawl's queue file lives")
    parser.add_argument("--pages", type=int, default=200, help="size of the generated site")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.2,
                        help="server time per page in seconds (default 0.2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every page")
    return asyncio.run(crawl(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
