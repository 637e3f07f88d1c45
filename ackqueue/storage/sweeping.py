"""Deleting entries that shared-mode acks marked done, and loading entries in chunks.

Inside a change on any connection (the shared sweeper's own, or the writer's when a plain
open deletes what shared mode left); see :mod:`ackqueue.shared.sweeping`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ackqueue.records import QueueRecord


def sweep_done(record: QueueRecord, scan: int | None, gap: int | None = None) -> int:
    """Delete the entries marked done among the first ``scan`` keys of ``record`` (all with
    None), inside a change on any connection; return how many. With ``gap``, stop after that
    many entries in a row that are not done (acks happen near the head)."""
    entries, delayed = record.entries, record.delayed
    doomed = []
    kept = 0
    for chunk in chunks(entries.items(), scan):
        for key, entry in chunk:
            if entry.done:
                doomed.append(key)
                kept = 0
            else:
                kept += 1
        if gap is not None and kept >= gap:
            break
    for key in doomed:
        del entries[key]
        if delayed is not None and key in delayed:
            del delayed[key]
    return len(doomed)


PREFETCH = 64


def chunks(
    items: Iterable[tuple[Any, Any]], limit: int | None, size: int = PREFETCH
) -> Iterator[list[tuple[Any, Any]]]:
    """``(key, entry)`` pairs in chunks, the entries of each loaded in one go (at most
    ``limit`` pairs in all; None: every one).

    Each entry is a record of its own, loaded from the server when first touched: one round
    trip each, one after another. Asking for a chunk at once (``Connection.prefetch``; ZEO
    sends the loads together, FileStorage ignores it) makes that about one round trip."""
    chunk: list[tuple[Any, Any]] = []
    for n, pair in enumerate(items):
        if limit is not None and n >= limit:
            break
        chunk.append(pair)
        if len(chunk) >= size:
            yield _loaded(chunk)
            chunk = []
    if chunk:
        yield _loaded(chunk)


def _loaded(chunk: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    jar = chunk[0][1]._p_jar
    if jar is not None:
        jar.prefetch([entry for _, entry in chunk])
    return chunk
