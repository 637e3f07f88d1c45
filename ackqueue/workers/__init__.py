"""The workers layer: :class:`~ackqueue.workers.pool.WorkerPool`, threads that run a handler
on each item, built on the public queue API only (:mod:`ackqueue.queue`)."""
