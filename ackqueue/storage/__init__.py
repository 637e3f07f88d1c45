"""The storage layer: everything that knows ZODB.

Opening storages and sharing one database per file (:mod:`.store`), group commit
(:mod:`.commit`), fsync policy (:mod:`.durability`), repair of torn files (:mod:`.repair`),
packing (:mod:`.packing`), queue counts (:mod:`.counts`), URIs (:mod:`.uri`), transactions
(:mod:`.transactions`), and the stored book of one queue: its entries, delays and dead letters,
the edits that change them and the reads that see them (:mod:`.book`).
May import :mod:`ackqueue.base`, :mod:`ackqueue.errors` and :mod:`ackqueue.records` (the file
format); nothing from the layers above.
"""
