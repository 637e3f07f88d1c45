"""What lies after the point where FileStorage cuts a damaged or torn file: only a commit that
never finished (nothing in it had returned: it may go) or finished commits (puts and acks that
returned: kept for ``ackqueue salvage``). filestorage.py reads FileStorage's transaction
records for that; here on records FileStorage wrote, and on records made at each boundary of
the format (a transaction's header, its data, its length repeated after it).

The opening and salvage of such files is tests/storage/test_damaged_tail.py's and the
corruption campaign's; these pin the reading itself, case by case.
"""

from __future__ import annotations

import struct
import threading

import pytest
from ZODB.FileStorage.format import TRANS_HDR, TRANS_HDR_LEN

import ackqueue
from ackqueue.storage.filestorage import (
    _finished_transaction_first,
    only_an_unfinished_commit,
    rejoin_cut_file,
)

TID = b"\x03\xd5\x00\x00\x00\x00\x00\x01"


def record(status: bytes, body: bytes = b"", *, length: int | None = None,
           trailer: int | None = None) -> bytes:
    """A transaction record: its header (``length`` as declared there), ``body``, and its
    length repeated after it (``trailer``); both the true length unless given."""
    true_length = TRANS_HDR_LEN + len(body)
    header = struct.pack(TRANS_HDR, TID, true_length if length is None else length, status,
                         0, 0, 0)
    return header + body + struct.pack(">Q", true_length if trailer is None else trailer)


FINISHED = record(b" ", b"\x00" * 40)
UNFINISHED = record(b"c", b"\x00" * 40)  # voted, never finished


def an_unfinished_commit_holding(inner: bytes, extra: int = 0) -> bytes:
    """A commit flagged ``c`` whose data ends with bytes that read as a finished transaction
    (an item's bytes may hold anything), its declared length reaching the end of the tail
    (``extra``: bytes after that)."""
    length = TRANS_HDR_LEN + len(inner) - 8 - extra
    return struct.pack(TRANS_HDR, TID, length, b"c", 0, 0, 0) + inner


@pytest.mark.parametrize(
    ("tail", "unfinished_only"),
    [
        (b"", True),
        (FINISHED[:TRANS_HDR_LEN - 1], True),  # less than a header
        (UNFINISHED, True),
        (UNFINISHED[:-8], True),  # its length not yet repeated
        (UNFINISHED[:TRANS_HDR_LEN + 10], True),  # cut inside its data
        (FINISHED[:-8], True),  # a commit cut short before its length was repeated
        (FINISHED, False),
        (record(b"p", b"\x00" * 40), False),  # finished, then packed
        (record(b"u", b"\x00" * 40), False),  # finished, then undone
        (record(b" "), False),  # a finished transaction with no data records
        (FINISHED + UNFINISHED, False),
        (FINISHED + FINISHED, False),
        (UNFINISHED + UNFINISHED, True),
        # Finished commits, then the last one torn during its write: its end repeats no
        # length, and the finished ones before it are found all the same.
        (FINISHED + UNFINISHED[:TRANS_HDR_LEN + 10], False),
        (record(b" ", b"\x00" * 40, length=10**6) + FINISHED + UNFINISHED[:-3], False),
        (FINISHED[:30] + UNFINISHED[:-3], True),  # nothing whole before the torn end
        # A torn end of zero bytes (an item's, or blocks a power loss left unwritten), after
        # a finished transaction whose repeated length itself ends in a zero byte (256).
        (record(b" ", b"\x01" * 233) + UNFINISHED[:TRANS_HDR_LEN] + bytes(5000), False),
        (bytes(5000), True),
        (UNFINISHED[:TRANS_HDR_LEN] + bytes(5000), True),
        # A torn end holding many runs of zero bytes (the serials of new records), each a
        # window's look, not a copy of the tail before it.
        (FINISHED + UNFINISHED[:TRANS_HDR_LEN] + (bytes(8) + b"abcdefgh") * 500, False),
        ((bytes(8) + b"abcdefgh") * 500, True),
        # The first header's length damaged (what made FileStorage cut): still read as whole.
        (record(b" ", b"\x00" * 40, length=TRANS_HDR_LEN + 41), False),
        # A repeated length pointing inside a tail at a header that disagrees: not a
        # transaction, whatever status byte is there (one byte in, and further in).
        (b"\x00" + record(b" ", b"\x00" * 40, length=TRANS_HDR_LEN + 39), True),
        (b"\x00" * 30 + record(b" ", b"\x00" * 40, length=TRANS_HDR_LEN + 39), True),
        # Lengths that reach before the tail's start, or below a header's size.
        (b"\x00" * 30 + struct.pack(">Q", 10_000), True),
        (b"\x00" * 30 + struct.pack(">Q", 2**63 + 5), True),
        # An unfinished commit whose item bytes hold what reads as a finished transaction:
        # the commit's own header says where it ends, and nothing comes after it.
        (an_unfinished_commit_holding(FINISHED), True),
        # One byte more than that commit declares: what ends the tail is another record.
        (an_unfinished_commit_holding(FINISHED, extra=1), False),
    ],
    ids=lambda value: "" if isinstance(value, bytes) else str(value),
)
def test_a_tail_holds_finished_commits_exactly_when_one_ends_it(
    tail: bytes, unfinished_only: bool
) -> None:
    assert only_an_unfinished_commit(tail) is unfinished_only


@pytest.mark.parametrize(
    ("tail", "first_is_finished"),
    [
        (FINISHED, True),
        (FINISHED + b"\x00" * 5, True),  # what comes after is not its business
        (record(b"p", b"\x00" * 8), True),
        (record(b"u"), True),
        (UNFINISHED, False),
        (FINISHED[:-1], False),  # its repeated length not whole
        (record(b" ", b"\x00" * 40, trailer=TRANS_HDR_LEN + 41), False),
        (record(b" ", b"\x00" * 40, length=TRANS_HDR_LEN - 1), False),
        (FINISHED[:TRANS_HDR_LEN - 1], False),
    ],
    ids=lambda value: "" if isinstance(value, bytes) else str(value),
)
def test_a_finished_transaction_first_is_one_whose_length_is_repeated_after_it(
    tail: bytes, first_is_finished: bool
) -> None:
    assert _finished_transaction_first(tail) is first_is_finished


def test_the_last_commits_filestorage_wrote_read_as_finished_and_a_torn_one_as_not(tmp_path):
    """The same reading on a queue file's own last transactions."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many(range(5))
        q.put("last")
    with open(path, "rb") as f:
        data = f.read()
    (last_length,) = struct.unpack(">Q", data[-8:])
    last = data[len(data) - 8 - last_length:]
    (before_length,) = struct.unpack(">Q", data[-16 - last_length:-8 - last_length])
    two = data[len(data) - 16 - last_length - before_length:]
    assert _finished_transaction_first(last) and _finished_transaction_first(two)
    assert not only_an_unfinished_commit(last)
    assert not only_an_unfinished_commit(two)
    for cut in (len(last) - 8, len(last) - 1, TRANS_HDR_LEN + 3):
        assert only_an_unfinished_commit(last[:cut]), cut
    flagged = last[:16] + b"c" + last[17:]  # as between its vote and its finish
    assert only_an_unfinished_commit(flagged)
    assert not only_an_unfinished_commit(two[:len(two) - len(last)] + flagged[:-8])


def test_salvaging_what_ends_in_a_dot_within_its_last_bytes_ends(tmp_path):
    """ZODB's fsrecover, which salvage falls back on, looks for a transaction's end at each
    "." (a pickle's last byte); one among a file's last 8 bytes made it read the same bytes
    for ever, and ``ackqueue salvage`` never returned. A tail no repeated length leads back
    through, ending so: the commits of the file before it come back, and the call returns."""
    before = str(tmp_path / "q.fs.tr0.before")
    with ackqueue.AckQueue(before) as q:
        q.put_many(["a", "b"])
    tail = str(tmp_path / "q.fs.tr0")
    with open(tail, "wb") as f:
        f.write(record(b" ", b"x" * 50, length=10**6)[:-8] + b"x.")
    recovered = str(tmp_path / "recovered.fs")
    outcome: list[object] = []

    def rejoin() -> None:
        try:
            rejoin_cut_file(before, tail, recovered)
            outcome.append("done")
        except Exception as exc:  # reported by the assertion below
            outcome.append(exc)

    worker = threading.Thread(target=rejoin, daemon=True)
    worker.start()
    worker.join(60)
    assert outcome == ["done"]
    with ackqueue.AckQueue(recovered) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == ["a", "b"]
