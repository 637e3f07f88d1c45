"""The delivery layer: the in-memory state of handing items out, one object per concern.

What is ready, in order (:mod:`.ready`, :mod:`.supply`), what is delayed (:mod:`.delays`),
what each consumer holds with its lease (:mod:`.holds`, :mod:`.holding`), the ``join()`` count
(:mod:`.tasks`), the key scheme of each queue kind (:mod:`.ordering`), and the interface that
single-process and shared mode both implement (:mod:`.mode`), with its single-process
implementation (:mod:`.local`). May import :mod:`ackqueue.base`, :mod:`ackqueue.storage` and
:mod:`ackqueue.errors`.
"""
