"""ZEO clients that never hand out an object id fetched from a server before it restarted.

A ZEO client fetches new object ids from its server in batches and keeps the rest for later
commits. A restarted server counts on from the last id stored in its file, so it gives the ids
a client still keeps to other clients as well: two objects stored under one id, and one of them
silently lost (seen as a confirmed put never delivered, and as an acked item delivered again,
after a ZEO restart). ZEO 6 keeps the batch across a reconnect; these helpers drop it there.
"""

from __future__ import annotations

from typing import Any

# Set on a storage once it drops its fetched ids at each connection.
FORGETS_IDS = "_ackqueue_forgets_ids"


def is_zeo_client(storage: Any) -> bool:
    return any(kind.__module__ == "ZEO.ClientStorage" for kind in type(storage).__mro__)


def forget_ids_on_reconnect(storage: Any) -> None:
    """Make a ZEO client ``storage`` (``shared=True``'s, a URI's or a caller's) drop the ids
    it fetched in advance at every new connection to its server, before any commit can use
    them; anything else is left as it is.

    No lock: ZEO's ``new_oid`` holds its id lock while it waits on the server, and the notice of
    a connection comes on the thread that call waits for."""
    if not is_zeo_client(storage) or getattr(storage, FORGETS_IDS, False):
        return
    connected = storage.notify_connected

    def notify_connected(conn: Any, info: Any) -> None:
        storage._oids = []
        connected(conn, info)

    storage.notify_connected = notify_connected
    setattr(storage, FORGETS_IDS, True)
