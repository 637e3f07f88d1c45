"""The delivery layer: the in-memory state of handing items out, one object per concern.

- :mod:`.ready`: the ready index, keys in the queue's order with a lazily read backlog;
- :mod:`.supply`: what a queue can hand out (ready, delayed until their due time, known
  without a read) and the :class:`~ackqueue.delivery.supply.Claim` a get takes out of it;
- :mod:`.itemcache`: pickles a get can hand out without reading the database;
- :mod:`.groups`: groups of items: their rules, the grouped ready index of one process and
  how the mode makes its ready index (:class:`~ackqueue.delivery.groups.Indexing`);
- :mod:`.holds`: what each consumer holds, the holds of every consumer with their leases, and
  giving them back when their holder goes away;
- :mod:`.conditions`: the queue's lock and conditions, its lifecycle, the ``join()`` count
  and the ready listeners of waiters that are not threads;
- :mod:`.ordering`: the key scheme of each queue kind, with its sequence numbers;
- :mod:`.mode`: the interface of a queue's mode (one process, or several sharing the
  queue), the one place that knows one from the other, with its capabilities (rides, stored
  holds);
- :mod:`.local`: single-process mode.

May import :mod:`ackqueue.storage`, :mod:`ackqueue.base`, :mod:`ackqueue.records` and
:mod:`ackqueue.errors`.
"""
