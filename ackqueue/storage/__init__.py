"""The storage layer: everything that knows ZODB.

The generic part: opening a storage and sharing one database per file (:mod:`.store`, which
holds the registry of engines by URI scheme), group commit (:mod:`.commit`), queue counts
(:mod:`.counts`), what a storage's failures look like (:mod:`.failures`), transactions
(:mod:`.transactions`), and the stored book of one queue (:mod:`.book`, with its reader
connection, its groups and the deletion of entries that shared-mode acks marked done): its
items (:mod:`.items`), dead letters (:mod:`.deadletters`) and item keys (:mod:`.keys`: the key
index, the seen-set and puts by key).

The engines, each behind the contract of :mod:`.engine` (which also reads storage URIs):
a FileStorage file of this process with its fsync policy, repair, leftover files and automatic
packing (:mod:`.filestorage`), memory (:mod:`.memory`), ZEO, including the private server that
``shared=True`` starts for a file (:mod:`.zeo`, and the server process, :mod:`.zeoserver`), and
PostgreSQL through RelStorage (:mod:`.postgresql`).

May import :mod:`ackqueue.base`, :mod:`ackqueue.records` (the file format) and
:mod:`ackqueue.errors`; nothing from the layers above.
"""
