"""The storage layer: everything that knows ZODB.

Opening storages and sharing one database per file (:mod:`.store`), opening a queue file
(:mod:`.files`), group commit (:mod:`.commit`), fsync policy (:mod:`.durability`), repair of
torn files (:mod:`.repair`), the scratch files left beside one (:mod:`.leftovers`), packing
(:mod:`.packing`), queue counts (:mod:`.counts`), URIs (:mod:`.uri`, :mod:`.postgres`), the
server that ``shared=True`` starts for a file (:mod:`.sharedserver`, :mod:`.zeoserver`), ZEO
clients that drop object ids fetched before a server restart (:mod:`.zeoclient`), what a
storage's failures look like (:mod:`.failures`), transactions (:mod:`.transactions`), and the
stored book of one queue (:mod:`.book`, with its reader connection, its groups and the
deletion of entries that shared-mode acks marked done): its items (:mod:`.items`), dead
letters (:mod:`.deadletters`), key index and seen-set (:mod:`.keyindex`, :mod:`.keys`).

May import :mod:`ackqueue.base`, :mod:`ackqueue.records` (the file format) and
:mod:`ackqueue.errors`; nothing from the layers above.
"""
