"""A campaign of random one-byte corruptions of a queue file, each outcome classified.

A child process builds a queue file with a known content (plain, keyed, grouped and delayed
puts; acks; items moved to the dead letters; items held when it stopped), closed either
cleanly or by SIGKILL after a clean close of an earlier state (so its saved index is stale and
the open scans the newer commits). Each trial copies that file, changes one byte at a random
offset to another random value (seeded), and uses the copy as a user would: ``ackqueue stats``,
then open it, ``qsize``, get and ack every item, list the dead letters, close. The outcome is:

* ``intact``: every item and dead letter is as it was built;
* ``clear error``: an ackqueue error says the file is damaged, names it, and says what to do
  (``ackqueue salvage``), raised or logged at ERROR level (``ackqueue stats`` prints it);
* ``altered``: the same items come back but some with other content (FileStorage keeps no
  checksums: a changed byte inside a stored int or string is read as written);
* ``loss``: a confirmed item is missing (or an acked one back) with no clear error;
* ``internal``: any other exception, or an ackqueue error that does not say the above.

Used by ``tests/storage/test_corruption_campaign.py`` (a few hundred trials) and
``benchmarks/corrupt_bytes.py`` (thousands).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import shutil
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from campaign_children import env_at, start_child

OUTCOMES = ("intact", "clear error", "altered", "loss", "internal")
OPTIONS: dict[str, Any] = {"max_attempts": 2, "autopack": False, "durability": "relaxed"}

def item_name(n: int) -> str:
    return f"k{n}" if n % 5 == 0 else f"g{n}" if n % 7 == 0 else f"i{n}"


ALL_PUT = [item_name(n) for n in range(40)] + ["later"]  # every item BUILDER puts

BUILDER = r"""
import os, sys, time
import ackqueue

path, killed = sys.argv[1], sys.argv[2] == "1"
options = dict(max_attempts=2, autopack=False)

def fill(q, c, start, stop):
    for n in range(start, stop):  # item_name(n)
        if n % 5 == 0:
            q.put(f"k{n}", key=f"key{n}")
        elif n % 7 == 0:
            q.put(f"g{n}", group=f"host{n % 3}")
        else:
            q.put(f"i{n}")
    # acks: the first two ready items go for good
    for _ in range(2):
        c.ack(c.get_nowait())
    # dead letters: delivered max_attempts times without an ack
    item = c.get_nowait()
    c.nack(item)
    while True:
        again = c.get_nowait()
        if again == item:
            c.nack(again)
            break
        c.nack(again)

q = ackqueue.AckQueue(path, **options)
c = q.connect()
fill(q, c, 0, 20)
c.close()
q.close()  # the index saved here is what a kill -9 leaves stale
q = ackqueue.AckQueue(path, **options)
c = q.connect()
fill(q, c, 20, 40)
q.put("later", delay=3600)
held = [c.get_nowait() for _ in range(2)]  # back in the queue at close, or after the kill
if killed:
    print("open", flush=True)
    time.sleep(3600)
c.close()
q.close()
print("open", flush=True)
"""


@dataclass
class Content:
    """What a queue file holds: its items (without the delayed one) and its dead letters."""

    items: Counter[Any]
    dead: Counter[Any]
    delayed: int


@dataclass
class Result:
    counts: Counter[str] = field(default_factory=Counter)
    salvaged: list[tuple[int, int]] = field(default_factory=list)  # (put back, held), per run
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        shown = self.examples.setdefault(outcome, [])
        if len(shown) < 8:
            shown.append(detail)

    def summary(self) -> str:
        text = ", ".join(f"{o}: {self.counts[o]}" for o in OUTCOMES)
        if self.salvaged:
            back = sum(b for b, _ in self.salvaged)
            held = sum(h for _, h in self.salvaged)
            text += (f"; ackqueue salvage run {len(self.salvaged)} times, put back {back} of "
                     f"the {held} items those files held")
        return text


def build(directory: str, root: str, killed: bool) -> str:
    """A queue file built by a child process (SIGKILLed after its last commit if ``killed``);
    its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "q.fs")
    child = start_child(BUILDER, [path, "1" if killed else "0"], env_at(root))
    if killed:
        child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    if killed:
        assert child.returncode == -signal.SIGKILL, child.returncode
    else:
        assert child.returncode == 0, child.returncode
    return path


def read(path: str, unloadable: list[str] | None = None) -> Content:
    """Stats, then drain: what a user of the file gets (raises what the queue raises)."""
    import ackqueue

    with ackqueue.AckQueue(path, **OPTIONS) as q, q.connect() as c:
        q.qsize()
        items: Counter[Any] = Counter()
        while True:
            try:
                item = c.get_nowait()
            except ackqueue.Empty:
                break
            except ackqueue.ItemLoadError as exc:
                # the item's own bytes: it is in the dead letters now, the rest goes on
                if unloadable is None:
                    raise
                unloadable.append(str(exc))
                continue
            c.ack(item)
            try:
                items[item] += 1
            except TypeError:  # a changed byte in its pickle made it a list, a dict...
                items[repr(item)] += 1
        dead = Counter(d.item for d in q.dead_letters())
        delayed = q.delayed_count() if hasattr(q, "delayed_count") else 0
    return Content(items, dead, delayed)


def says_damaged(message: str, path: str) -> bool:
    """Whether ``message`` is the clear error the campaign asks for: the file is damaged, which
    file, and what to do."""
    lowered = message.lower()
    return "damaged" in lowered and path in message and "ackqueue salvage" in message


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def stats(path: str) -> tuple[int, str]:
    """``ackqueue stats path`` in this process: its exit status and what it printed."""
    from ackqueue.cli.commands import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = cli(["stats", path])
    return status, out.getvalue()


def trial(
    base: str, work: str, expected: Content, rng: random.Random,
    salvaged: list[tuple[int, int]] | None = None,
) -> tuple[str, str]:
    """One corruption of a copy of ``base`` in the empty directory ``work``: its outcome and
    what it showed. Where the error says to run ``ackqueue salvage FILE --into NEW``, it is
    run, and what it put back is added to ``salvaged`` (see :func:`salvage`)."""
    path = os.path.join(work, "q.fs")
    shutil.copy(base, path)
    if os.path.exists(base + ".index"):
        shutil.copy(base + ".index", path + ".index")
    size = os.path.getsize(path)
    offset = rng.randrange(size)
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        new = rng.choice([b for b in range(256) if b != old])
        f.seek(offset)
        f.write(bytes([new]))
    where = f"offset {offset} of {size}: {old:#04x} -> {new:#04x}"
    handler = _Errors()
    logger = logging.getLogger("ackqueue")
    logger.addHandler(handler)
    try:
        stats_outcome = _stats_outcome(path)
        got: Content | None = None
        unloadable: list[str] = []
        try:
            got = read(path, unloadable)
        except Exception as exc:
            import ackqueue

            if isinstance(exc, ackqueue.AckQueueError) and says_damaged(str(exc), path):
                read_outcome = "clear error", f"{type(exc).__name__}: {str(exc)[:300]}"
                if salvaged is not None and f"ackqueue salvage {path} --into" in str(exc):
                    salvaged.append(salvage(path, os.path.join(work, "new.fs"), expected))
            else:
                read_outcome = "internal", _shown(exc)
    finally:
        logger.removeHandler(handler)
    if got is not None:
        logged = any(says_damaged(m, path) for m in handler.messages)
        read_outcome = _compared(got, expected, logged)
        unclear = [m for m in unloadable if "damaged" not in m]
        if unclear:
            read_outcome = "internal", f"ItemLoadError: {unclear[0][:300]}"
        elif unloadable and read_outcome[0] != "intact":
            # an item whose own bytes are damaged: set aside in the dead letters, saying so
            read_outcome = "clear error", f"ItemLoadError: {unloadable[0][:300]}"
    worst = max(stats_outcome, read_outcome, key=lambda o: _RANK[o[0]])
    return worst[0], f"{where}: {'stats' if worst is stats_outcome else 'queue'}: {worst[1]}"


_RANK = {"intact": 0, "altered": 1, "clear error": 2, "loss": 3, "internal": 4}


def salvage(path: str, into: str, expected: Content) -> tuple[int, int]:
    """``ackqueue salvage path --into into`` as the error says: how many items it put back and
    how many of those the file held (an item put back that it never held is an AssertionError:
    salvage must not make items up)."""
    import ackqueue
    from ackqueue.cli.commands import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = cli(["salvage", path, "--into", into])
    if status != 0:
        return 0, sum(expected.items.values())
    with ackqueue.AckQueue(into, **OPTIONS) as q:
        back = Counter(q.get_nowait() for _ in range(q.qsize()))
    # An item acked in a commit that fsrecover skipped is back (at least once): not made up.
    made_up = set(back) - set(ALL_PUT)
    assert not made_up, f"salvage of {path} made up {made_up}"
    return sum((back & (expected.items + expected.dead)).values()), sum(expected.items.values())


def _stats_outcome(path: str) -> tuple[str, str]:
    try:
        status, printed = stats(path)
    except Exception as exc:
        return "internal", _shown(exc)
    if status == 0:
        return "intact", ""
    if says_damaged(printed, path):
        return "clear error", printed.strip()[-300:]
    return "internal", printed.strip()[-300:]


def _compared(got: Content, expected: Content, logged: bool) -> tuple[str, str]:
    if got.items == expected.items and got.dead == expected.dead:
        return "intact", ""
    if logged:
        return "clear error", "logged"
    confirmed = expected.items + expected.dead
    back = got.items + got.dead
    missing, extra = confirmed - back, back - confirmed
    if sum(back.values()) == sum(confirmed.values()) and not set(extra) & set(confirmed):
        return "altered", f"{sorted(map(repr, missing))[:4]} read as {sorted(map(repr, extra))[:4]}"
    return "loss", f"missing {sorted(map(repr, missing))[:6]}, extra {sorted(map(repr, extra))[:6]}"


def _shown(exc: BaseException) -> str:
    """The exception, where it was raised, and what caused it."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        frames = traceback.extract_tb(seen.__traceback__)
        at = f" at {frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno}" if frames else ""
        parts.append(f"{type(seen).__name__}({str(seen)[:150]!r}){at}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


def run(tmp: str, root: str, trials: int, seed: int, killed: bool) -> Result:
    """``trials`` one-byte corruptions of one file built in ``tmp``."""
    started = time.monotonic()
    base = build(os.path.join(tmp, "base"), root, killed)
    pristine = os.path.join(tmp, "pristine")
    os.makedirs(pristine)
    shutil.copy(base, os.path.join(pristine, "q.fs"))
    if os.path.exists(base + ".index"):
        shutil.copy(base + ".index", os.path.join(pristine, "q.fs.index"))
    expected = read(os.path.join(pristine, "q.fs"))
    rng = random.Random(seed)
    result = Result()
    # ZODB logs each record it cannot load with its traceback (and each damage its scan
    # finds): the DamagedFileError raised says it, and thousands would bury the summary.
    quiet = logging.NullHandler()
    zodb = logging.getLogger("ZODB")
    zodb.addHandler(quiet)
    propagates, zodb.propagate = zodb.propagate, False
    try:
        for n in range(trials):
            work = os.path.join(tmp, f"t{n}")
            os.makedirs(work)
            outcome, detail = trial(base, work, expected, rng, result.salvaged)
            result.add(outcome, detail)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        zodb.removeHandler(quiet)
        zodb.propagate = propagates
    result.seconds = time.monotonic() - started
    return result


if __name__ == "__main__":  # a quick look: python tests/corruption_campaign.py TRIALS SEED
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for killed in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(tmp, root, int(sys.argv[1]), int(sys.argv[2]), killed)
        print("killed" if killed else "closed", r.summary(), f"{r.seconds:.0f} s")
        for outcome in ("internal", "loss", "altered"):
            for line in r.examples.get(outcome, []):
                print("  ", outcome, line)
