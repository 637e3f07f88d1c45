"""A damaged byte in the middle of a queue file must not cost the commits after it.

With a stale index (a kill -9 after the last close) FileStorage scans the newer part of the
file when it opens; a transaction header with a wrong length or status there makes it cut the
file at that point and save everything after it as ``.trN``. That copy holds commits whose puts
and acks returned: it is kept, an error names it, and ``ackqueue salvage`` puts its items back.
Only a tail that is the unfinished last commit is dropped (test_leftover_files.py).
"""

from __future__ import annotations

import logging
import os
import pathlib
import pickletools
import shutil
import stat
import struct

import pytest
import ZODB
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.format import TRANS_HDR_LEN

import ackqueue
from ackqueue.cli.commands import main as cli
from ackqueue.records import ROOT_KEY
from ackqueue.storage import counts
from ackqueue.storage.filestorage import QueueFileStorage, open_file_storage

CLOSED_WITH = 100  # items in the file when its index was last saved
PUT_AFTER = 200  # items put afterwards, each its own commit, before the "kill -9"


def killed_file(tmp_path, acks: int = 0) -> tuple[str, list[int], set[int]]:
    """A queue file as a kill -9 leaves it: its index saved at an earlier close, then more
    commits, puts and ``acks`` acks (copied while the queue is open, which is what is on disk
    after SIGKILL); the items put, and those acked."""
    work = str(tmp_path / "work.fs")
    with ackqueue.AckQueue(work, autopack=False) as q:
        q.put_many(range(CLOSED_WITH))
    killed = tmp_path / "killed"
    killed.mkdir()
    path = str(killed / "q.fs")
    acked: set[int] = set()
    with ackqueue.AckQueue(work, autopack=False) as q, q.connect() as c:
        for n in range(CLOSED_WITH, CLOSED_WITH + PUT_AFTER):
            q.put(n)
            if len(acked) < acks and n % 2:
                item = c.get_nowait()
                c.ack(item)
                acked.add(item)
        shutil.copy(work + ".index", path + ".index")  # the one saved at the earlier close
        shutil.copy(work, path)
    return path, list(range(CLOSED_WITH + PUT_AFTER)), acked


def transaction_starts(path: str) -> list[int]:
    storage = FileStorage(path, read_only=True)
    try:
        return [t._tpos for t in storage.iterator()]
    finally:
        storage.close()


def damage(path: str, offset: int, byte: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(byte)


def drained(path: str) -> list[int]:
    with ackqueue.AckQueue(path) as q:
        return sorted(q.get_nowait() for _ in range(q.qsize()))


def stored(path: str) -> list[int]:
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        return sorted(c.get_nowait() for _ in range(q.qsize()))  # given back on close


@pytest.mark.parametrize("field", ["length", "status"])
def test_a_damaged_header_mid_file_keeps_the_commits_after_it_and_salvage_puts_them_back(
    tmp_path, caplog, field
):
    path, put, acked = killed_file(tmp_path, acks=60)
    starts = transaction_starts(path)
    middle = starts[-PUT_AFTER // 2]  # a put of the second half, long returned
    if field == "length":
        damage(path, middle + 8, b"\x7f")  # the high byte of the transaction length
    else:
        damage(path, middle + 16, b"c")  # flagged as if still between vote and finish
    with caplog.at_level(logging.WARNING, logger="ackqueue"):
        left = stored(path)
    assert len(left) < len(put)  # FileStorage cut the file: the later puts are not in it
    copies = sorted(n for n in os.listdir(tmp_path / "killed") if ".tr" in n)
    assert copies == ["q.fs.tr0", "q.fs.tr0.before"]
    assert stat.S_IMODE(os.stat(path + ".tr0.before").st_mode) == 0o600  # the user's items
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    told = [e for e in errors if e.startswith(f"{path} is damaged: FileStorage cut it at byte ")]
    assert len(told) == 1, errors
    assert f"cut it at byte {middle} and saved the " in told[0]
    assert f"in {path}.tr0 and the file as it was cut in {path}.tr0.before." in told[0]
    assert told[0].endswith(f"until you run: ackqueue salvage {path}.tr0 --into {path}")

    assert cli(["salvage", path + ".tr0", "--into", path]) == 0
    got = drained(path)
    # Every put that returned and was not acked, once. An ack cut off with the tail gives its
    # item again (at least once); one that stayed in the file does not.
    assert len(got) == len(set(got))
    assert set(put) - acked <= set(got) <= set(put)
    assert acked & set(left) == acked & set(got)
    # A copy is salvaged once: a second run refuses instead of putting the items twice.
    assert cli(["salvage", path + ".tr0", "--into", path]) != 0


@pytest.mark.parametrize(
    ("field", "found"),
    [
        ("id", "reading its transactions, FileStorage found: time-stamp reduction at {at}"),
        ("status", "reading its transactions, FileStorage found: has invalid status, X, at {at}"),
        ("lengths", "has invalid transaction header at {at}"),
    ],
)
@pytest.mark.parametrize("read_only", [False, True])
def test_damage_the_open_does_not_cut_off_refuses_the_file(tmp_path, field, found, read_only):
    """Damage FileStorage's scan after a stale index only logs and goes on past (a
    transaction id not after the one before it, a status byte no commit writes), or raises
    at (the lengths of a header's user and description running past it): what it read may be
    wrong, so the open is refused as damaged (not as a foreign file), saying what it found,
    where, and to salvage; a read-only look (``ackqueue stats``) too. Nothing is changed."""
    path, _, _ = killed_file(tmp_path)
    starts = transaction_starts(path)
    at = starts[-PUT_AFTER // 2]
    if field == "id":
        with open(path, "rb") as f:
            f.seek(starts[-PUT_AFTER // 2 - 2])
            earlier = f.read(8)
        damage(path, at, earlier)
    elif field == "status":
        damage(path, at + 16, b"X")
    else:
        damage(path, at + 17, b"\xff")  # the high byte of the user name's length
    before = pathlib.Path(path).read_bytes()
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        if read_only:
            open_file_storage(path, read_only=True)
        else:
            ackqueue.AckQueue(path)
    assert str(raised.value).startswith(
        f"queue file {path} is damaged: {found.format(at=at)}. Keep a copy of it as it is"
    ), raised.value
    assert f"ackqueue salvage {path} --into NEW" in str(raised.value)
    assert pathlib.Path(path).read_bytes() == before
    assert sorted(os.listdir(tmp_path / "killed")) == ["q.fs", "q.fs.index"]


def test_a_damaged_header_mid_file_and_a_torn_last_commit_keep_the_commits_between(
    tmp_path, caplog
):
    """Both at once: a damaged byte mid-file and a kill during the last commit's write (its
    record cut short inside its data, still flagged "c"). The tail FileStorage cuts then ends
    in bytes that repeat no length, so walking back from its end finds no transaction; the
    finished ones before the torn commit are there all the same, and must be kept (they were
    taken for an unfinished commit and deleted: every put after the damage was lost)."""
    path, put, _ = killed_file(tmp_path)
    starts = transaction_starts(path)
    middle, last = starts[-PUT_AFTER // 2], starts[-1]
    with open(path, "r+b") as f:
        f.truncate(last + TRANS_HDR_LEN + 20)  # the last put's commit torn inside its data
    damage(path, last + 16, b"c")
    damage(path, middle + 8, b"\x7f")  # the high byte of a returned commit's length
    with caplog.at_level(logging.WARNING, logger="ackqueue"):
        left = stored(path)
    assert len(left) < len(put) - 1
    copies = sorted(n for n in os.listdir(tmp_path / "killed") if ".tr" in n)
    assert copies == ["q.fs.tr0", "q.fs.tr0.before"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("q.fs.tr0" in e and "ackqueue salvage" in e for e in errors), errors
    assert cli(["salvage", path + ".tr0", "--into", path]) == 0
    assert drained(path) == put[:-1]  # every put that returned; the torn one never did


def test_a_read_only_look_at_a_file_damaged_mid_way_says_so_instead_of_showing_less(
    tmp_path, capsys
):
    """Opened read-only (``ackqueue stats``), FileStorage stops at the damage without a word
    and would show the file without the commits after it: the look is refused, naming the
    byte and the way back. A file that merely ends in a commit a kill cut short is shown."""
    path, put, _ = killed_file(tmp_path)
    starts = transaction_starts(path)
    middle, last = starts[-PUT_AFTER // 2], starts[-1]
    torn = str(tmp_path / "torn.fs")
    shutil.copy(path, torn)
    with open(torn, "r+b") as f:
        f.truncate(last + TRANS_HDR_LEN + 20)
    damage(torn, last + 16, b"c")
    damage(path, middle + 8, b"\x7f")
    assert cli(["stats", path]) == 1
    said = capsys.readouterr().err
    assert f"damaged at byte {middle}" in said and "hold commits that had returned" in said
    assert f"ackqueue salvage {path}.trN --into {path}" in said
    assert cli(["stats", torn]) == 0
    assert f"stored  {len(put) - 1} (ready" in capsys.readouterr().out


def test_the_copy_of_the_cut_file_is_never_written_through_a_planted_link(tmp_path, caplog):
    """Where the file as FileStorage cut it is to be kept, another user may have planted a
    symlink first: the copy is not written through it (the file it points to is left as it
    was), and the error says the copy could not be saved."""
    path, _put, _ = killed_file(tmp_path)
    damage(path, transaction_starts(path)[-PUT_AFTER // 2] + 8, b"\x7f")
    victim = tmp_path / "victim"
    victim.write_text("someone else's")
    os.symlink(victim, path + ".tr0.before")
    with caplog.at_level(logging.WARNING, logger="ackqueue"):
        stored(path)
    assert victim.read_text() == "someone else's"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("could not be saved to" in e and "q.fs.tr0" in e for e in errors), errors


def test_an_unfinished_last_commit_after_a_kill_is_still_dropped(tmp_path, caplog):
    path, put, _ = killed_file(tmp_path)
    last = transaction_starts(path)[-1]
    size = os.path.getsize(path)
    damage(path, last + 16, b"c")  # killed between the last commit's vote and its finish
    with caplog.at_level(logging.WARNING, logger="ackqueue"):
        assert drained(path) == put[:-1]
    assert not [n for n in os.listdir(tmp_path / "killed") if ".tr" in n]
    said = [r.getMessage() for r in caplog.records if r.name == "ackqueue"]
    assert f"{path} ended in a commit that never finished ({size - last} bytes, from a crash " \
        "during a commit); it was dropped, as no put or ack of it had returned" in said, said


def test_a_wrong_count_recorded_by_a_commit_is_repaired_when_the_file_is_opened_after_a_kill(
    tmp_path, caplog
):
    """Each commit records its change of the count in its transaction header (counts.py);
    one wrong byte there must not strand an item: after an unclean stop the opener checks
    the count against the entries and puts it right."""
    path, put, _ = killed_file(tmp_path)
    start = transaction_starts(path)[-PUT_AFTER // 2]
    with open(path, "r+b") as f:
        f.seek(start)
        head = f.read(200)
        change = b"defaultq\x03K\x01"  # {"default": 1} pickled: this put's change
        at = head.index(change) + len(change) - 1
        f.seek(start + at)
        f.write(b"\x00")
    with caplog.at_level(logging.WARNING, logger="ackqueue"), ackqueue.AckQueue(path) as q:
        assert q.qsize() == len(put)
    assert any("count" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    with ackqueue.AckQueue(path) as q:
        got = []
        while True:
            try:
                got.append(q.get_nowait())
            except ackqueue.Empty:
                break
        assert got == put and q.qsize() == 0


def recorded_count(path: str) -> int | None:
    """The count of queue ``default`` as the recorded counts vouch for it (None: they do
    not), read-only."""
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        length = db.open().root()[ROOT_KEY]["default"].length
        base = length()
        change = counts.checked_changes(
            db.storage, "default", length._p_serial, base, ["default"]
        )
        return None if change is None else base + change
    finally:
        db.close()


def test_a_wrong_total_recorded_by_a_commit_is_caught_and_the_count_recounted(tmp_path):
    """Each commit also records the count it leaves (counts.py), which is what lets an opener
    after a kill trust the recorded changes without reading the entries: one wrong byte in a
    recorded count breaks that chain, so the opener counts the entries instead."""
    path, put, _ = killed_file(tmp_path)
    assert recorded_count(path) == len(put)
    start = transaction_starts(path)[-PUT_AFTER // 2]
    with open(path, "r+b") as f:
        f.seek(start)
        head = f.read(300)
        # The pickled metadata of the transaction, after its user name and description (a
        # search for the pickle's first byte found one in the transaction id now and then).
        user, description = struct.unpack(">HH", head[17:21])
        metadata = TRANS_HDR_LEN + user + description
        assert head[metadata] == 0x80, head[:metadata + 1]
        after = None
        for opcode, arg, at in pickletools.genops(head[metadata:]):
            if arg == "ackqueue.totals":
                after = at
            elif after is not None and opcode.name.startswith("BININT"):
                value = metadata + at + 1  # the count this commit recorded (one queue)
                break
        f.seek(start + value)
        f.write(bytes([head[value] ^ 1]))
    assert recorded_count(path) is None  # the chain no longer holds
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == len(put)
    assert drained(path) == put


def test_a_damaged_queue_name_in_a_commits_counts_breaks_the_chain(tmp_path):
    """A commit's metadata pickles a queue's name once and refers to it for its total, so one
    changed byte there files both the change and the total under a name no queue has: the
    chain of recorded counts must not hold then (it did, and the count came out one short,
    stranding the last item: corrupt_bytes.py --seed 12)."""
    path, put, _ = killed_file(tmp_path)
    start = transaction_starts(path)[-1]
    with open(path, "r+b") as f:
        f.seek(start)
        head = f.read(300)
        at = head.index(b"default") + 1  # its "e", where the commit's change is filed
        f.seek(start + at)
        f.write(b"\x10")
    assert recorded_count(path) is None
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == len(put)
    assert drained(path) == put
