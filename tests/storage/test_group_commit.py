"""The group committer: many threads' changes share commits, and each caller returns once."""

from __future__ import annotations

import random
import threading
import time

from persistent.mapping import PersistentMapping

from ackqueue.storage.store import Store

THREADS = 16
CHANGES = 300


def test_every_change_of_many_threads_commits_once_and_its_caller_returns(tmp_path):
    """Callers arrive at every moment of a group's life (while it commits, while it is
    fsynced, while the next leader is being woken): each change is applied exactly once, each
    caller gets its own change's result, and none sleeps on (a lost wake-up would leave its
    thread alive past the deadline below)."""
    store = Store.acquire(str(tmp_path / "g.fs"), None)
    results: dict[int, list[int]] = {t: [] for t in range(THREADS)}
    failures: list[BaseException] = []

    def setup() -> None:
        store.root()["counts"] = PersistentMapping({t: 0 for t in range(THREADS)})

    store.run(setup)

    def worker(t: int) -> None:
        def bump() -> int:
            counts = store.root()["counts"]
            counts[t] += 1
            return int(counts[t])

        rng = random.Random(t)
        try:
            for _ in range(CHANGES):
                results[t].append(store.run(bump))
                # Uneven work between changes, holding the GIL as real callers do, so that
                # callers come back at every moment of a group's life: while it commits,
                # while it is fsynced, while the next leader waits for the GIL to wake up.
                sum(range(rng.randrange(3000)))
        except BaseException as exc:  # reported below: a thread's error must fail the test
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    try:
        assert not hung, f"callers never returned: {hung}"
        assert not failures
        for t in range(THREADS):
            assert results[t] == list(range(1, CHANGES + 1))  # each change applied once
        assert store.commits < 1 + THREADS * CHANGES  # and they did share commits
    finally:
        if not hung:
            store.release()


def test_a_commit_moves_the_writer_to_the_latest_commit_once(tmp_path):
    """Each commit of the writer connection polls the storage for other commits once (at its
    begin), not again when it completes: the second poll was CPU of every put and ack."""
    store = Store.acquire(str(tmp_path / "p.fs"), None)
    try:
        store.run(lambda: store.root().__setitem__("n", 0))
        writer = store.writer
        polls: list[object] = []
        poll = writer.newTransaction

        def counted(*args: object, **kw: object) -> None:
            polls.append(args)
            poll(*args, **kw)

        writer.newTransaction = counted  # the transaction manager calls it on the connection
        for i in range(10):
            store.run(lambda i=i: store.root().__setitem__("n", i))
        assert len(polls) == 10
        writer.newTransaction = poll
        assert store.run(lambda: store.root()["n"]) == 9
    finally:
        store.release()
