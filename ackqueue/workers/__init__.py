"""The workers layer: :class:`~ackqueue.workers.pool.WorkerPool` (:mod:`.pool`), threads that
run a handler on each item, fed by feeder threads (:mod:`.feeder`) through a shared board
(:mod:`.board`), retrying with backoff (:mod:`.retry`) and reporting counts (:mod:`.stats`);
and :class:`~ackqueue.workers.processes.ProcessPool` (:mod:`.processes`), worker processes each
running a WorkerPool on the queue opened with ``shared=True`` (:mod:`.child`). The options every
pool shares (the asyncio one too) are checked in one place (:mod:`.options`).

May import :mod:`ackqueue.queue` (its public API only) and :mod:`ackqueue.errors`.
"""
