"""The delivery layer: the in-memory state of handing items out, one object per concern.

What is ready, in order (:mod:`.ready`, :mod:`.supply`), what is delayed (:mod:`.delays`),
item data known without a read (:mod:`.prefetch`), what each consumer holds with its lease
(:mod:`.holds`, :mod:`.holding`), giving holds back when their holder goes away
(:mod:`.recovery`), the lock, conditions, lifecycle and ``join()`` count (:mod:`.signals`), the
key scheme of each queue kind (:mod:`.ordering`) with its sequence numbers (:mod:`.seqs`),
groups: their rules (:mod:`.groups`), the grouped ready index of one process
(:mod:`.grouped`) and when to use it (:mod:`.grouping`), the records passed between the hooks
(:mod:`.claims`), the counts behind ``metrics()`` (:mod:`.metering`), and the interface that
single-process and shared mode both implement (:mod:`.mode`), with its single-process
implementation (:mod:`.local`).

May import :mod:`ackqueue.storage`, :mod:`ackqueue.base`, :mod:`ackqueue.records` and
:mod:`ackqueue.errors`.
"""
