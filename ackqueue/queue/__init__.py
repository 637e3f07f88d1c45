"""The queue layer: the public queue classes and the consumer proxy.

- :mod:`.queues`: :class:`~ackqueue.queue.queues.AckQueue` and its twins, plugged into
  ``queue.Queue``'s hooks, with group control, dead letters and the ready listeners of front
  ends that wait without threads;
- :mod:`.assembly`: opening a queue's book, choosing its mode and building its collaborators
  (the only module of the layer that knows the modes by name);
- :mod:`.core`: the state every operation works with, and what one thread's call carries to
  the hooks;
- :mod:`.putting`: puts; :mod:`.keying`: puts by key and the seen-set;
- :mod:`.claiming`: taking items out of the supply for a get;
- :mod:`.deliveries`: handing items out and settling them (ack, nack, reject, snooze);
- :mod:`.lifecycle`: stopping (close, shutdown) and the finalizer of a queue collected
  unclosed;
- :mod:`.metrics`: ``metrics()`` and the counts behind it; :mod:`.status`: the status file
  other processes read; :mod:`.requests`: the command line's requests to a live process;
- :mod:`.consumer`: :class:`~ackqueue.queue.consumer.Consumer`, what ``connect()`` returns.

May import :mod:`ackqueue.shared`, :mod:`ackqueue.delivery`, :mod:`ackqueue.storage`,
:mod:`ackqueue.base`, :mod:`ackqueue.records` and :mod:`ackqueue.errors`; only the workers,
the asyncio layer and the command line import it.
"""
