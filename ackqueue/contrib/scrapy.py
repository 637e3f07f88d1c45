"""A Scrapy crawl that survives ``kill -9``: the frontier, the seen-set and the scraped items in
one ackqueue file, each page's outcome committed once.

Enable it with one line in the project's settings::

    ADDONS = {"ackqueue.contrib.scrapy.Addon": 0}
    JOBDIR = "crawls/books"          # the frontier is JOBDIR/frontier.fs
    # or ACKQUEUE_PATH = "books.fs"

How a request lives (one queue file, two named queues: ``requests`` and ``items``):

- the :class:`Scheduler` puts each request (``Request.to_dict``) by key, the request's
  fingerprint, with ``unique="forever"``: a request seen once is never put again, also after a
  restart (this replaces ``requests.seen`` and its memory). A ``dont_filter`` request is put
  without the check; start requests are keyed even then, so a resumed crawl does not fetch them
  again. Its group is its download slot (the host, or ``meta["download_slot"]``), so
  ``CONCURRENT_REQUESTS_PER_DOMAIN`` becomes ``max_held_per_group`` and ``DOWNLOAD_DELAY``
  ``group_interval``; with ``AUTOTHROTTLE_ENABLED``, the delay AutoThrottle gives a slot
  becomes its group's interval (``q.set_group``: stored, so every process of a shared crawl
  and the next run keep it). Scrapy's priority orders it (higher first).
- ``next_request`` gets the request and holds it. It is acked only when Scrapy is done with it:
  the :class:`FrontierMiddleware` (a spider middleware at the engine end) collects what the
  callback yielded, and when the callback's output ends it commits, in one transaction, the
  child requests, the items (into the ``items`` queue) and the ack. Only then are the items
  passed on to the item pipelines. A kill at any moment leaves each page's outcome committed
  once; only the requests Scrapy had in flight are fetched again.
- A retry (a downloader middleware hands the engine the held request again, ``meta`` copied)
  gives the held request back as the retry in one commit (``nack(replace=)``): it keeps its
  key, and the retry's ``meta``. A redirect (a request for another URL) is put in its host's
  group under its own key (dropped if seen, as Scrapy's duplicate filter drops it), in one
  commit with the ack of the held one.
- A request that fails for good (the download raised past every downloader middleware, or a
  downloader middleware's process_response raised, as RedirectMiddleware's IgnoreRequest) is
  acked when its errback is called (every held request gets one: :class:`SettlingErrback`);
  with the spider's errback, in one commit with what it returned (its requests and items), as
  a callback's output is. A request that Scrapy dropped in a way no interface reports is
  acked when Scrapy is idle (see :meth:`Scheduler.has_pending_requests`).
- What cannot be stored (a child request or an item that cannot be pickled, a callback that
  is no method of the spider) is dropped with an error naming it; the rest of the page is
  committed. A stored request that cannot be loaded (its callback gone from the spider) is
  moved to the dead letters of ``requests`` with an error naming it; the crawl goes on.

Settings: ``ACKQUEUE_PATH`` (default ``JOBDIR/frontier.fs``), ``ACKQUEUE_SHARED`` (several
Scrapy processes on one frontier: ``shared=True``), ``ACKQUEUE_DURABILITY`` (``"strict"``, the
default, or ``"relaxed"``). A frontier file written for another spider is refused.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

try:
    from scrapy import Request, signals
except ImportError as exc:  # pragma: no cover - said to whoever enables the add-on without it
    raise ImportError(
        "ackqueue.contrib.scrapy needs Scrapy: pip install Scrapy (or install ackqueue with "
        "its [scrapy] extra)"
    ) from exc
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import arg_to_iter
from scrapy.utils.request import request_from_dict
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

import ackqueue

log = logging.getLogger("ackqueue")

HOLD = "ackqueue_hold"  # meta: which held request a request is (retries and redirects copy it)
START = "ackqueue_start"  # meta: a start request (keyed even with dont_filter)
PRIORITY_LIMIT = (1 << 22) - 1  # ackqueue's priorities are ints in [-2**22, 2**22)
_frontiers: dict[int, Frontier] = {}  # id(crawler) -> its frontier, for the middlewares


class UnserializableRequestError(TypeError):
    """A request cannot be stored: its callback or errback is not a method of the spider (a
    lambda, a function), or its ``meta`` or ``cb_kwargs`` cannot be pickled."""


class ForeignFrontierError(ackqueue.AckQueueError):
    """The frontier file belongs to another spider."""


class Addon:
    """``ADDONS = {"ackqueue.contrib.scrapy.Addon": 0}``: the scheduler and its middlewares."""

    def update_settings(self, settings: Any) -> None:
        settings.set("SCHEDULER", "ackqueue.contrib.scrapy.Scheduler", priority="addon")
        # The lowest order puts both at the engine end: the spider middleware sees the output
        # every other middleware let through, the downloader middleware a failure none handled.
        settings["SPIDER_MIDDLEWARES"]["ackqueue.contrib.scrapy.FrontierMiddleware"] = 1
        settings["DOWNLOADER_MIDDLEWARES"]["ackqueue.contrib.scrapy.FailureMiddleware"] = 1


class Frontier:
    """The two queues of one crawl and the requests this process holds."""

    def __init__(self, crawler: Any, spider: Any) -> None:
        settings = crawler.settings
        self.crawler, self.spider, self.stats = crawler, spider, crawler.stats
        path = frontier_path(settings)
        shared = settings.getbool("ACKQUEUE_SHARED", False)
        options: dict[str, Any] = {
            "durability": settings.get("ACKQUEUE_DURABILITY", "strict"),
            "shared": shared,
        }
        per_slot = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8)
        delay = settings.getfloat("DOWNLOAD_DELAY", 0.0)
        self.requests: ackqueue.AckQueue[dict[str, Any]] = ackqueue.AckQueue(
            path, name="requests", unique="forever",
            max_held_per_group=per_slot if per_slot > 0 else None, group_interval=delay,
            **options,
        )
        try:
            self.items: ackqueue.AckQueue[Any] = ackqueue.AckQueue(path, name="items", **options)
            check_spider(path, spider.name, options)
        except BaseException:
            self.requests.close()
            raise
        self.consumer = self.requests.connect()
        self.held: dict[int, dict[str, Any]] = {}
        # The held requests whose response came out of the downloader middlewares: a failure
        # of theirs reaches the errback through the spider middlewares (see SettlingErrback).
        self.answered: set[int] = set()
        crawler.signals.connect(self.answer, signal=signals.response_received)
        self._tokens = itertools.count(1)
        self.path = path
        # How soon to look again when nothing may go out: a fraction of the host's interval.
        self.poll = min(1.0, max(0.01, delay / 4)) if delay else 0.05
        self.counted: deque[tuple[int, int, int, int]] = deque()
        self.committer = Committer(self)
        self.intervals: dict[str, float] = {}  # group -> the interval this process last set
        self.throttled = settings.getbool("AUTOTHROTTLE_ENABLED")
        if self.throttled:
            crawler.signals.connect(self.follow_throttle, signal=signals.response_received)

    # -- putting ------------------------------------------------------------------------------

    def entry(self, request: Request) -> dict[str, Any]:
        """``request`` as stored (without this process's hold mark)."""
        if isinstance(request.errback, SettlingErrback):
            # Copied from a held request (a retry, a redirect): stored with the spider's own.
            request = request.replace(errback=request.errback.original)
        try:
            data: dict[str, Any] = request.to_dict(spider=self.spider)
            data["meta"] = {k: v for k, v in (data.get("meta") or {}).items() if k != HOLD}
        except Exception as exc:
            raise UnserializableRequestError(
                f"ackqueue cannot store {request!r}: {exc} (a request's callback and errback "
                "must be methods of the spider, and its meta and cb_kwargs picklable)"
            ) from exc
        # Pickled here too, in the reactor's thread, though the commit pickles it again: a
        # request that fails there fails its whole page's commit, out of reach of Scrapy.
        failure = unpicklable(data)
        if failure is not None:
            raise UnserializableRequestError(
                f"ackqueue cannot store {request!r}: it cannot be pickled ({failure}) (a "
                "request's callback and errback must be methods of the spider, and its meta "
                "and cb_kwargs picklable)"
            ) from failure
        return data

    def key(self, request: Request) -> str | None:
        """The request's key: its fingerprint; a ``dont_filter`` request has none unless it is
        a start request (so that a resumed crawl does not put its start requests again)."""
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request).hex()
        if not request.dont_filter:
            return str(fingerprint)
        if request.meta.get(START) or request.meta.get("is_start_request"):
            return f"start:{fingerprint}"
        return None

    def put(self, request: Request) -> bool:
        """Store a new request; False if its key was seen (a duplicate) or it cannot be
        stored (see :meth:`storable`)."""
        entry = self.storable(request)
        if entry is None:
            return False
        stored = self.requests.put(
            entry, key=self.key(request), group=slot_of(request), priority=priority_of(request),
        )
        self.count("enqueued" if stored is not False else "duplicates")
        return stored is not False

    # -- holding and settling -----------------------------------------------------------------

    def next_request(self) -> Request | None:
        while True:
            try:
                data = self.consumer.get_nowait()
            except ackqueue.Empty:
                return None
            try:
                request = request_from_dict(data, spider=self.spider)
                break
            except Exception as exc:
                self.bury(data, exc)
        token = next(self._tokens)
        request.meta[HOLD] = token
        request.errback = SettlingErrback(self.crawler, request.errback)
        self.held[token] = data
        self.count("dequeued")
        return request

    def redo(self, request: Request) -> bool:
        """``request`` was made from one we hold (a retry, a redirect): give the held one back
        as ``request`` (a retry), or ack it with ``request`` put under its own key (a
        redirect). False if it is not made from a held one."""
        token = request.meta.get(HOLD, 0)
        data = self.release(token)
        if data is None:
            return False
        entry = self.storable(request)  # None: an error naming the request is logged
        if entry is None:  # the retry cannot be stored: the held request is done
            self.abandon(token, data)
            return True
        try:
            self._redo(request, data, entry)
        except Exception:
            # Raised here, the error reaches only Scrapy's INFO log, and the held request,
            # out of ``held``, would keep the crawl from ever ending.
            log.exception("ackqueue cannot store %r, made from a held request: dropped", request)
            self.abandon(token, data)
        return True

    def _redo(self, request: Request, data: dict[str, Any], entry: dict[str, Any]) -> None:
        if "download_slot" not in data["meta"]:
            # Scrapy's downloader wrote the held request's slot into its meta, and a redirect
            # copies it: the slot of the new request is its own host's, as if put anew.
            entry["meta"].pop("download_slot", None)
        group = stored_slot(entry)
        fingerprint = self.crawler.request_fingerprinter.fingerprint
        same = fingerprint(request) == fingerprint(request_from_dict(data, spider=self.spider))
        if same and group == stored_slot(data):
            # A retry: the same request again, under the held one's key, with the retry's meta.
            self.consumer.nack(data, replace=entry)
            self.count("redone")
            return
        # A redirect (to this host or another): into its host's group, under its own key (a
        # URL already seen is dropped, as Scrapy's duplicate filter drops a redirect to it),
        # in one commit with the ack of the held request. The held one's key is not the new
        # URL's: kept, it would let the new URL be fetched again when linked or redirected to.
        key = None if same else self.key(request)  # same: its key is the held one's, acked
        for attempt in itertools.count(1):
            try:
                with self.consumer.transaction():
                    self.consumer.ack(data)
                    stored = self.requests.put(
                        entry, key=key, group=group, priority=priority_of(request)
                    )
                break
            except ackqueue.KeyTakenError:
                # A page committed in the committer's thread put the same URL first:
                # nothing was stored; again, the put sees it (a duplicate).
                if attempt == 3:
                    raise
        self.count("redone" if stored is not False else "duplicates")

    def settle(self, request: Request | None, children: list[Request], items: list[Any]) -> Job:
        """What Scrapy made of ``request`` (its child requests and items) and its ack, ready
        for the :class:`Committer`. ``request`` None or not held (an errback's output, a
        request made elsewhere): the children and items alone."""
        data = None if request is None else self.release(request.meta.get(HOLD, 0))
        entries = []
        for child in children:
            stored = self.storable(child)
            if stored is not None:
                entries.append((stored, self.key(child), slot_of(child), priority_of(child)))
        kept = []
        for item in items:
            # Pickled here too, as a child request is (see entry): one that cannot be would
            # fail the page's commit in the committer's thread.
            failure = unpicklable(item)
            if failure is not None:
                log.error("ackqueue cannot store an item (%s) of %r: it cannot be pickled (%s);"
                          " dropped, the rest of the page stored",
                          type(item).__qualname__, request, failure)
                self.count("unserializable")
            else:
                kept.append(item)
        return Job(entries, kept, data)

    def storable(self, request: Request) -> dict[str, Any] | None:
        """``request`` as stored, or None with the error logged (naming the request) and the
        request dropped, as Scrapy drops a request it cannot schedule; raising here would
        lose the rest of the page's outcome."""
        try:
            return self.entry(request)
        except UnserializableRequestError as exc:
            log.error("%s", exc)
            self.count("unserializable")
            return None

    def commit(self, jobs: list[Job]) -> None:
        """Commit the outcomes of ``jobs`` in one transaction (in the committer's thread)."""
        for job in jobs:
            for group, interval in job.intervals.items():
                # Its own commit, rare (see follow_throttle), and not one to undo with a page's.
                self.requests.set_group(group, interval=interval)
        jobs = [job for job in jobs if job.requests or job.items or job.data is not None]
        if not jobs:
            return
        # One put_many per group and priority (keyed or not), in the order first seen, rather
        # than one put per child request; one put_many of the items, one ack_many: a third
        # less CPU a page in this thread (see _put_batches). A host's requests keep their
        # order, which is what its group delivers by.
        batches: dict[tuple[str, int, bool], tuple[list[dict[str, Any]], list[str]]] = {}
        keys: set[str] = set()
        duplicates = 0
        for job in jobs:
            for entry, key, group, priority in job.requests:
                if key is not None:
                    if key in keys:  # linked twice by the pages of this commit
                        duplicates += 1
                        continue
                    keys.add(key)
                entries, batch_keys = batches.setdefault((group, priority, key is not None),
                                                         ([], []))
                entries.append(entry)
                if key is not None:
                    batch_keys.append(key)
        items = [item for job in jobs for item in job.items]
        acks = [job.data for job in jobs if job.data is not None]
        with self.consumer.transaction():
            stored, dropped = self._put_batches(batches)
            if items:
                self.items.put_many(items)
            if acks:
                self.consumer.ack_many(acks)
        self.counted.append((stored, duplicates + dropped, len(items), len(acks)))

    def _put_batches(
        self, batches: dict[tuple[str, int, bool], tuple[list[dict[str, Any]], list[str]]]
    ) -> tuple[int, int]:
        """Put each batch of child requests; how many were stored, and how many were not
        (their key live or seen). Measured with a 7-page commit of 2 children each (one new,
        one seen), an item and an ack per page, on tmpfs: 895 us of CPU a page with a put
        per request and an ack per page, 674 with these batches, 623 with ack_many too."""
        stored = dropped = 0
        for (group, priority, keyed), (entries, keys) in batches.items():
            if not keyed:
                self.requests.put_many(entries, group=group, priority=priority)
                stored += len(entries)
                continue
            puts = self.requests.put_many(entries, keys=keys, group=group, priority=priority)
            assert puts is not None  # by key: which were stored
            stored += sum(puts)
            dropped += len(puts) - sum(puts)
        return stored, dropped

    def account(self) -> None:
        """Count in Scrapy's stats what commits in the committer's thread did (in the
        reactor's thread, where Scrapy's stats live)."""
        while self.counted:
            stored, duplicates, items, acked = self.counted.popleft()
            self.count("enqueued", stored)
            self.count("duplicates", duplicates)
            self.count("items", items)
            self.count("acked", acked)

    def abandon(self, token: int, data: dict[str, Any]) -> None:
        """What Scrapy made of the held ``data`` could not be stored (the error logged): ack it
        alone, so that the crawl can end; if even the ack fails, hold it again (token
        ``token``), for :meth:`settle_orphans` to ack once Scrapy is idle."""
        try:
            self.consumer.ack(data)
        except ackqueue.NotHeldError:
            return  # settled already
        except Exception:
            log.exception("ackqueue cannot ack a request (%s)", data.get("url"))
            self.held[token] = data
            return
        self.count("failed")

    def bury(self, data: dict[str, Any], exc: Exception) -> None:
        """A stored request that cannot be made a request again (its callback is gone from the
        spider, say): to the dead letters, kept for a requeue once the spider can take it.
        Left held, it would be in no one's hands and keep the crawl from ending."""
        reason = f"cannot load the stored request: {exc}"
        log.error(
            "ackqueue cannot load the stored request <%s %s> (callback %r, errback %r): %s; "
            "moved to the dead letters (once the spider can take it: python -m ackqueue "
            "requeue --name requests --dead --yes %s)",
            data.get("method", "GET"), data.get("url"), data.get("callback"),
            data.get("errback"), exc, self.path,
        )
        self.consumer.reject(data, reason=reason)
        self.count("dead")

    def holds(self, request: Request) -> bool:
        """Whether ``request`` is one this process holds (not yet settled)."""
        return request.meta.get(HOLD, 0) in self.held

    def release(self, token: int) -> dict[str, Any] | None:
        """The held request ``token``, no longer held (None: not held)."""
        self.answered.discard(token)
        return self.held.pop(token, None)

    def answer(self, response: Any, request: Request, **_: Any) -> None:
        """``response_received``: ``request``'s response leaves the downloader middlewares."""
        token = request.meta.get(HOLD, 0)
        if token in self.held:
            self.answered.add(token)

    def drop(self, request: Request) -> None:
        """Scrapy is done with ``request`` and made nothing of it (a failure)."""
        data = self.release(request.meta.get(HOLD, 0))
        if data is not None:
            self.consumer.ack(data)
            self.count("failed")

    def settle_orphans(self) -> None:
        """Ack every request still held while Scrapy has none in flight: Scrapy dropped it in a
        way that no interface reports (an IgnoreRequest from a downloader middleware's
        process_response goes straight to the errback, say), and it made what it made of it.
        A last resort: every held request's errback settles it (see SettlingErrback)."""
        for token in list(self.held):
            self.consumer.ack(self.held.pop(token))
            self.count("settled_when_idle")
        self.answered.clear()

    # -- AutoThrottle -------------------------------------------------------------------------

    # A new interval is stored only when it differs from the one stored by more than this
    # (relative) or THROTTLE_SECONDS: AutoThrottle moves a slot's delay on every response, and
    # storing it is a commit.
    THROTTLE_CHANGE = 0.1
    THROTTLE_SECONDS = 0.01

    def follow_throttle(self, response: Any, request: Request, **_: Any) -> None:
        """``response_received`` (sent after ``response_downloaded``, where AutoThrottle sets
        the slot's delay): make the slot's delay its group's interval, stored, so that every
        process of the crawl and the next run keep it. Only internal attributes give the
        delay (``engine.downloader.slots``, ``Slot.delay``); tests/contrib/test_scrapy.py
        runs on every Scrapy version the extra allows."""
        data = self.held.get(request.meta.get(HOLD, 0))
        slots = getattr(self.crawler.engine.downloader, "slots", None)
        slot = None if slots is None else slots.get(request.meta.get("download_slot"))
        delay = getattr(slot, "delay", None)
        if data is None or delay is None:
            return
        group, delay = stored_slot(data), float(delay)
        last = self.intervals.get(group)
        if last is not None and abs(delay - last) <= max(
            self.THROTTLE_SECONDS, self.THROTTLE_CHANGE * last
        ):
            return
        self.intervals[group] = delay
        done = self.committer.submit(Job([], [], None, {group: delay}))
        done.addErrback(lambda failure: log.error("ackqueue: %s", failure.getErrorMessage()))

    # -- figures ------------------------------------------------------------------------------

    def count(self, what: str, n: int = 1) -> None:
        if n:
            self.stats.inc_value(f"ackqueue/{what}", n)

    def publish_stats(self) -> None:
        m = self.requests.metrics()
        for name in ("ready", "held", "delayed", "dead"):
            self.stats.set_value(f"ackqueue/frontier/{name}", getattr(m, name))
        self.stats.set_value("ackqueue/frontier/seen", self.requests.seen_count())
        self.stats.set_value("ackqueue/items/stored", self.items.qsize())

    def close(self) -> None:
        self.crawler.signals.disconnect(self.answer, signal=signals.response_received)
        if self.throttled:
            self.crawler.signals.disconnect(self.follow_throttle, signal=signals.response_received)
        try:
            self.committer.stop()
            self.account()
            self.publish_stats()
        finally:
            self.consumer.close()  # what is still held is ready again for the next run
            self.items.close()
            self.requests.close()


@dataclass
class Job:
    """One page's outcome: child requests as ``(entry, key, group, priority)``, its items,
    and the held request to ack (None: none); or groups' new intervals (AutoThrottle's)."""

    requests: list[tuple[dict[str, Any], str | None, str, int]]
    items: list[Any]
    data: dict[str, Any] | None
    intervals: dict[str, float] = field(default_factory=dict)  # group -> interval to store


class Committer:
    """A thread that commits the outcomes of the pages Scrapy finished, those that finished
    while it committed the last ones together in one transaction: the reactor goes on while
    a commit waits for the disk, and a commit's cost is shared by the pages in it. Each page's
    outcome is whole in one commit, whichever commit that is. ``call_from_thread`` runs a
    function in the reactor's thread (the reactor's own ``callFromThread`` unless given)."""

    most = 64  # pages in one commit at most
    gather_most = 0.05  # seconds a commit waits at most for more pages (see _gather)

    def __init__(
        self, frontier: Frontier, call_from_thread: Callable[..., object] | None = None
    ) -> None:
        if call_from_thread is None:
            from twisted.internet import reactor  # here: Scrapy installs its reactor at start

            call_from_thread = reactor.callFromThread
        self._frontier, self._call_from_thread = frontier, call_from_thread
        self._cond = threading.Condition()
        self._work: list[tuple[Job, Deferred[None]]] = []
        self._stopping = False
        self._took = 0.0  # how long the last commit took
        self._thread = threading.Thread(target=self._run, name="ackqueue-committer", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Deferred[None]:
        """Fires (in the reactor's thread) once ``job`` is committed."""
        done: Deferred[None] = Deferred()
        with self._cond:
            self._work.append((job, done))
            self._cond.notify()
        return done

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _gather(self) -> None:
        """With pages waiting (and the condition held), wait for more to join them while this
        process holds requests whose pages may settle soon, for up to twice as long as the
        last commit took (at most :attr:`gather_most`). A commit's cost is mostly per commit:
        committing whatever waited when the last one ended made 627 commits of a 1,000-page
        local crawl (1.6 pages each); gathering so made about 150, for 13 % less CPU a page
        and about 10 % more pages a second (``benchmarks/kill_scrapy.py``). With nothing
        held, no page can come before this commit lets the next request out: no wait."""
        deadline = time.monotonic() + min(self.gather_most, 2 * self._took)
        while len(self._work) < self.most and not self._stopping and self._frontier.held:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._work and not self._stopping:
                    self._cond.wait()
                if not self._work:
                    return
                self._gather()
                batch, self._work = self._work[: self.most], self._work[self.most :]
            outcomes: list[tuple[Deferred[None], Exception | None]]
            try:
                began = time.monotonic()
                self._frontier.commit([job for job, _ in batch])
                self._took = time.monotonic() - began
                outcomes = [(done, None) for _, done in batch]
            except Exception:
                # Nothing of the batch was committed: each page on its own, so that one page's
                # error (a held request acked elsewhere, say) is only that page's.
                outcomes = []
                for job, done in batch:
                    try:
                        self._frontier.commit([job])
                        outcomes.append((done, None))
                    except Exception as exc:
                        outcomes.append((done, exc))
            self._call_from_thread(_fire, outcomes)


def _fire(outcomes: list[tuple[Deferred[None], Exception | None]]) -> None:
    for done, failure in outcomes:
        if failure is None:
            done.callback(None)
        else:
            done.errback(failure)


def frontier_path(settings: Any) -> str:
    path = settings.get("ACKQUEUE_PATH")
    if path:
        return str(path)
    jobdir = settings.get("JOBDIR")
    if jobdir:
        os.makedirs(jobdir, exist_ok=True)
        return os.path.join(jobdir, "frontier.fs")
    raise ValueError(
        "ackqueue.contrib.scrapy needs a file for the frontier: set ACKQUEUE_PATH (a file "
        "path) or JOBDIR (the frontier is then JOBDIR/frontier.fs)"
    )


def check_spider(path: str, name: str, options: dict[str, Any]) -> None:
    """The file belongs to the spider ``name`` (the first to open it), or a clear error."""
    owner: ackqueue.AckQueue[str] = ackqueue.AckQueue(path, name="spider", **options)
    with owner:
        owner.put(name, key="spider")  # False: the file has its spider already
        c: ackqueue.Consumer[str]
        with owner.connect() as c:
            # Not a blocking get: Scrapy's event loop runs on this thread. Empty only while
            # another process of a shared crawl makes the same check.
            deadline = time.monotonic() + 30
            while True:
                try:
                    stored = c.get_nowait()
                    break
                except ackqueue.Empty:
                    if time.monotonic() > deadline:
                        raise ForeignFrontierError(
                            f"{path}: cannot read which spider it belongs to"
                        ) from None
                    time.sleep(0.05)
            c.nack(stored)
    if stored != name:
        raise ForeignFrontierError(
            f"{path} is the frontier of spider {stored!r}, not of {name!r}: give this spider "
            "its own ACKQUEUE_PATH or JOBDIR"
        )


def slot_of(request: Request) -> str:
    """The request's download slot, as Scrapy's downloader names it by default."""
    slot = request.meta.get("download_slot")
    if slot is not None:
        return str(slot)
    return urlparse_cached(request).hostname or ""


def stored_slot(data: dict[str, Any]) -> str:
    """The download slot of a request as stored (``Request.to_dict``), as :func:`slot_of`
    says of the request."""
    slot = data["meta"].get("download_slot")
    if slot is not None:
        return str(slot)
    return urlparse(data["url"]).hostname or ""


def priority_of(request: Request) -> int:
    """Scrapy's priority (higher first) as ackqueue's (lower first), within its range."""
    return max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, -int(request.priority)))


def frontier_of(crawler: Any) -> Frontier | None:
    return _frontiers.get(id(crawler))


class Scheduler:
    """Scrapy's scheduler on an ackqueue file (see the module docstring)."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.frontier: Frontier | None = None
        self._waking: Any = None  # a pending reactor.callLater of _look_again

    @classmethod
    def from_crawler(cls, crawler: Any) -> Scheduler:
        return cls(crawler)

    def open(self, spider: Any) -> None:
        self.frontier = Frontier(self.crawler, spider)
        _frontiers[id(self.crawler)] = self.frontier
        m = self.frontier.requests.metrics()
        log.info(
            "ackqueue frontier %s: %d requests ready, %d delayed, %d items stored",
            self.frontier.path, m.ready, m.delayed, self.frontier.items.qsize(),
        )

    def close(self, reason: str) -> None:
        if self._waking is not None and self._waking.active():
            self._waking.cancel()
        frontier, self.frontier = self.frontier, None
        if frontier is not None:
            _frontiers.pop(id(self.crawler), None)
            frontier.close()

    def has_pending_requests(self) -> bool:
        """Requests ready, delayed or held (a held one may still yield requests). Scrapy asks
        this only once it has nothing in flight: a request still held then was dropped without
        a word (see :meth:`Frontier.settle_orphans`)."""
        frontier = self._open()
        if frontier.held and not scrapy_busy(self.crawler):
            frontier.settle_orphans()
        q = frontier.requests
        if frontier.held or q.qsize() > 0 or q.delayed_count() > 0:
            return True
        # Another process's holds (ACKQUEUE_SHARED) may still yield requests; in one process
        # this is 0 here. One read, and Scrapy asks only when it has nothing in flight.
        return q.stored_count() > 0

    def enqueue_request(self, request: Request) -> bool:
        frontier = self._open()
        if frontier.redo(request):
            return True
        request.meta.pop(HOLD, None)  # copied from a request no longer held: a new one
        return frontier.put(request)

    def next_request(self) -> Request | None:
        frontier = self._open()
        request = frontier.next_request()
        if request is None:
            # Nothing may go out now, though requests may wait for their host's interval, cap
            # or delay, which no timer of Scrapy's knows: look again soon, not at the engine's
            # next heartbeat (seconds away).
            self._look_again(frontier.poll)
        return request

    def _look_again(self, seconds: float) -> None:
        if self._waking is not None and self._waking.active():
            return
        from twisted.internet import reactor

        clock: Any = reactor  # the installed reactor; its stub types say too little
        self._waking = clock.callLater(seconds, ask_engine, self.crawler)

    def _open(self) -> Frontier:
        if self.frontier is None:
            raise RuntimeError("the ackqueue scheduler is not open")
        return self.frontier


def ask_engine(crawler: Any) -> None:
    """Have the engine ask for the next request now rather than at its next heartbeat
    (seconds away). An internal attribute: the engine's slot, ``_slot`` from Scrapy 2.13 on,
    ``slot`` before."""
    engine = crawler.engine
    slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
    if slot is not None:
        slot.nextcall.schedule()


def scrapy_busy(crawler: Any) -> bool:
    """Whether Scrapy has a request in the downloader or a response in the spider. Only
    internal attributes serve here (``engine.downloader.active``, ``engine.scraper.slot``);
    tests/contrib/test_scrapy.py runs on every Scrapy version the extra allows."""
    engine = crawler.engine
    if engine.downloader.active:
        return True
    slot = getattr(engine.scraper, "slot", None)
    return slot is not None and not slot.is_idle()


async def settle(
    crawler: Any, request: Request | None, children: list[Request], items: list[Any]
) -> list[Any]:
    """Commit what Scrapy made of ``request`` (held, or None) with its ack; return the items
    committed (those that could be stored), to pass on."""
    frontier = frontier_of(crawler)
    if frontier is None:
        raise RuntimeError(
            "ackqueue's middlewares need ackqueue's scheduler: enable them with "
            'ADDONS = {"ackqueue.contrib.scrapy.Addon": 0}'
        )
    job = frontier.settle(request, children, items)
    try:
        await maybe_deferred_to_future(frontier.committer.submit(job))
    except Exception:
        if job.data is not None and request is not None:
            # Settled though nothing of its outcome was stored: left out of ``held`` and
            # unacked, it would keep the crawl from ever ending.
            log.error("ackqueue cannot commit what %r made: its request is acked alone",
                      request)
            frontier.abandon(request.meta.get(HOLD, 0), job.data)
        raise
    finally:
        frontier.account()
    # The children went to the queue, not through engine.crawl, and the ack made room in the
    # page's group: ask for the next request now.
    ask_engine(crawler)
    return job.items


async def settled_output(
    crawler: Any, request: Request, output: Any
) -> AsyncIterator[Any]:
    """What a failed request's errback returned (anything Scrapy takes from a callback),
    committed with the request's ack as a callback's output is; then its items, passed on."""
    children: list[Request] = []
    items: list[Any] = []
    try:
        async for thing in spider_output(output):
            (children if isinstance(thing, Request) else items).append(thing)
    except Exception:
        await settle(crawler, request, children, items)  # what it yielded before it raised
        raise
    for item in await settle(crawler, request, children, items):
        yield item


async def spider_output(output: Any) -> AsyncIterator[Any]:
    """Each thing of a callback's or errback's ``output``, as Scrapy reads them: an iterable,
    an async iterable, a coroutine or Deferred of one, or a single request or item."""
    if isinstance(output, Deferred):
        output = await maybe_deferred_to_future(output)
    elif inspect.isawaitable(output):
        output = await output
    if hasattr(output, "__aiter__"):
        async for thing in output:
            yield thing
    else:
        for thing in arg_to_iter(output):
            yield thing


class FrontierMiddleware:
    """Spider middleware at the engine end: collects a response's output and settles it."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        crawler.signals.connect(self._spider_error, signal=signals.spider_error)

    @classmethod
    def from_crawler(cls, crawler: Any) -> FrontierMiddleware:
        return cls(crawler)

    def process_start_requests(self, start: Iterable[Any], *_: Any, **__: Any) -> Iterator[Any]:
        """Scrapy < 2.13: mark start requests (they are keyed even with ``dont_filter``)."""
        for thing in start:
            if isinstance(thing, Request):
                thing.meta.setdefault(START, True)
            yield thing

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for thing in start:
            if isinstance(thing, Request):
                thing.meta.setdefault(START, True)
            yield thing

    async def process_spider_output(
        self, response: Any, result: AsyncIterator[Any], *_: Any, **__: Any
    ) -> AsyncIterator[Any]:
        """Collect the output; once it ends (or raises), commit it with the ack, then pass
        the items on. An async generator: Scrapy hands it every output as an async iterable
        (this middleware is the last before the engine, so nothing after it needs a sync one)."""
        children: list[Request] = []
        items: list[Any] = []
        try:
            async for thing in result:
                (children if isinstance(thing, Request) else items).append(thing)
        except Exception:
            await self._settle(response, children, items)  # what it yielded before it raised
            raise
        for item in await self._settle(response, children, items):
            yield item

    async def _settle(
        self, response: Any, children: list[Request], items: list[Any]
    ) -> list[Any]:
        request = None if response is None else response.request
        return await settle(self.crawler, request, children, items)

    def _spider_error(self, failure: Any, response: Any, **_: Any) -> None:
        """A response whose processing raised before any output (a spider middleware's
        process_spider_input, no errback): Scrapy is done with its request."""
        frontier = frontier_of(self.crawler)
        if frontier is not None and response is not None and response.request is not None:
            frontier.drop(response.request)


def unpicklable(value: Any) -> Exception | None:
    """Why ``value`` cannot be pickled as the queue will pickle it, or None if it can."""
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        return exc
    return None


def settle_errback_output(
    crawler: Any, frontier: Frontier, request: Request, errback: Any, failure: Failure
) -> Any:
    """Call the spider's ``errback`` for the held ``request``; settle the request with what
    it returned (one commit with its requests and items), or alone if it returned nothing,
    did not silence the failure, or raised."""
    try:
        output = errback(failure)
    except BaseException:
        frontier.drop(request)
        raise
    if output is None or isinstance(output, Failure):  # nothing, or not silenced
        frontier.drop(request)
        return output
    frontier.count("failed")
    return settled_output(crawler, request, output)


class SettlingErrback:
    """The errback of every request this process holds, in place of the spider's own
    (``original``, None if none). A failure that Scrapy hands it outside the spider middlewares
    (a download error past every retry; an IgnoreRequest from a downloader middleware's
    process_response, which nothing else reports) settles the request at once, in one commit
    with what the spider's errback returned: left held, the request would keep a place of its
    host's ``max_held_per_group`` until Scrapy is idle, and the errback's output would not be
    committed. A failure of a response that reached the spider middlewares (an HttpError, say)
    is the spider's own errback's alone: its output goes through the FrontierMiddleware."""

    def __init__(self, crawler: Any, original: Any) -> None:
        self.crawler, self.original = crawler, original

    def __call__(self, failure: Failure) -> Any:
        request = getattr(failure, "request", None)  # Scrapy sets it before it calls errbacks
        frontier = frontier_of(self.crawler)
        if (
            frontier is None or request is None or not frontier.holds(request)
            or request.meta.get(HOLD, 0) in frontier.answered
        ):
            return failure if self.original is None else self.original(failure)
        if self.original is None:
            frontier.drop(request)
            return failure  # not silenced: Scrapy goes on as with no errback
        return settle_errback_output(self.crawler, frontier, request, self.original, failure)


class FailureMiddleware:
    """Downloader middleware at the engine end: a failure that reaches it was handled by no
    other middleware (no retry left), so Scrapy is done with the request."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> FailureMiddleware:
        return cls(crawler)

    def process_exception(
        self, request: Request, exception: Exception, *_: Any, **__: Any
    ) -> None:
        """Ack the request now; with an errback, once the errback's output is committed with
        it (that output reaches no spider middleware, so it is collected here). A held
        request's own :class:`SettlingErrback` does it, when Scrapy calls it: here only a
        request whose errback a middleware replaced."""
        frontier = frontier_of(self.crawler)
        if frontier is None:
            return
        errback = request.errback
        if isinstance(errback, SettlingErrback):
            return  # it settles the request when Scrapy calls it
        if errback is None or not frontier.holds(request):
            frontier.drop(request)
            return
        crawler = self.crawler

        def settle_errback(failure: Failure) -> Any:
            # Scrapy reads request.errback when it calls it, after this middleware.
            return settle_errback_output(crawler, frontier, request, errback, failure)

        request.errback = settle_errback
