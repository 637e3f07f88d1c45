"""A campaign of filesystem and local-user faults under a running queue, each outcome classified.

A writer process puts, gets and acks (one process, or ``shared=True``) and appends one line
per confirmed event to a log outside the faulted filesystem, flushed at once; at a moment
chosen from its log (after a random number of events) the campaign makes one move:

* ``full``: the queue sits on a small tmpfs, which another file fills until ENOSPC; after the
  writer has seen its puts and acks fail, the file is removed again. The writer must recover by
  itself (a confirmed put and a confirmed ack after the space is back).
* ``vanish``: the queue's directory is removed (``rm -r``) or its tmpfs lazily unmounted
  (``umount -l``) under the running queue; in one process the file is small and packed often, so
  some moves land during an automatic pack. The writer must go on or fail with ackqueue's
  errors (never hang: a held commit lock, issue 21 item 7, would), and ``close()`` must return.
  The campaign reads the file through the descriptor its holder keeps, so what the writer
  confirmed must be in it.
* ``user``: in a directory every user may write (no sticky bit) holding the queue, a second
  Unix user (uid 65534) plants symlinks at every name the queue creates beside its file, each
  to a file of the queue's owner, or (``shared=True``) swaps the server's private directory for
  her own with a listening socket in it; meanwhile the writer reopens its queue and the
  campaign kills the private server at random moments. No link may be followed (each target
  keeps its content and mode), nobody may connect to her socket, and the writer must refuse
  clearly (a ``StorageError`` naming the owner) or go on unaffected.

After each move the writer is stopped (every wait bounded), the file copied and opened in one
process, drained, and checked against the log: every confirmed put is still there or was acked,
no confirmed ack comes back. The outcome of a try is one of :data:`OUTCOMES`.

Used by ``benchmarks/fs_faults.py``; needs root (mounts, a second user).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from campaign_children import env_at, server_pid, start_child, stderr_tail
from conftest import alive

import ackqueue

MOVES = ("full", "vanish", "user")
# intact: the fault changed nothing the writer saw; clear error: it saw ackqueue's errors only
# and nothing was lost; reported loss: the file is out of reach (a pack's rename or reopen met
# the vanished directory) and the writer was told so by ackqueue's errors; the rest fail the
# campaign. stuck: no recovery once the fault was gone;
# followed: a planted link was written through; connected: a client reached her socket.
OUTCOMES = ("intact", "clear error", "reported loss", "unclear error", "loss", "stuck", "hang",
            "followed", "connected")
FAILING = OUTCOMES[3:]
NOBODY = 65534
LEASE = 2.0  # the shared writer's session lease
WAIT = 30.0  # the bound of every wait for the writer or its server

WRITER = r"""
import faulthandler, logging, os, random, signal, sys, time
import ackqueue

faulthandler.register(signal.SIGUSR1)  # the campaign asks for the stacks of a hung writer
path, log_path, stop, seed, shared, reopen, tag, small_packs = sys.argv[1:9]
rng = random.Random(int(seed))
log = open(log_path, "a", buffering=1)

def note(*words):
    log.write(" ".join(str(w).replace(" ", "_").replace("\n", "|")[:300] for w in words) + "\n")

class Logged(logging.Handler):
    def emit(self, record):
        note("logged", record.levelname, record.getMessage())

logging.getLogger("ackqueue").addHandler(Logged(logging.WARNING))
if small_packs == "1":  # packs every few hundred kB: vanishing moves land in them
    from ackqueue.storage.filestorage import AutoPacker
    AutoPacker.__init__.__defaults__ = (None, 64 * 1024, 128 * 1024)
options = dict(shared=True, session_timeout=float(sys.argv[9])) if shared == "1" else {}

def open_queue():
    q = ackqueue.AckQueue(path, **options)
    return q, q.connect()

q, c = open_queue()
print("open", flush=True)
n = 0
while not os.path.exists(stop):
    n += 1
    name = f"{tag}-{n}"
    item = None
    try:
        if q is None:
            q, c = open_queue()
            note("reopened")
        elif reopen == "1" and rng.random() < 0.03:
            c.close()
            q.close()
            q = None
            q, c = open_queue()
            note("reopened")
        elif rng.random() < 0.55:
            note("put?", name)
            q.put(name + "." + "x" * rng.randint(200, 2000))
            note("put", name)
        else:
            try:
                item = c.get(timeout=0.05)
            except ackqueue.Empty:
                continue
            note("got", item.split(".")[0])
            c.ack(item)
            note("acked", item.split(".")[0])
    except ackqueue.StorageError as exc:
        note("failed", type(exc).__name__, exc)
        if item is not None:  # its ack may or may not have committed
            note("ackfail", item.split(".")[0])
        time.sleep(0.05)  # back off: the fault is the campaign's to undo
    except Exception as exc:
        note("internal", type(exc).__name__, exc)
        if item is not None:
            note("ackfail", item.split(".")[0])
        time.sleep(0.05)
note("closing")
try:
    if q is not None:
        c.close()
        q.close()
    note("closed")
except ackqueue.StorageError as exc:
    note("close-failed", type(exc).__name__, exc)
except Exception as exc:
    note("close-internal", type(exc).__name__, exc)
"""

ATTACKER = r"""
import json, os, socket, sys, time
from ackqueue.storage import zeo as sharedserver
os.setgroups([])
os.setgid(NOBODY)
os.setuid(NOBODY)
world, name, move, stop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if move == "links":
    planted = []
    for link, target in json.loads(sys.argv[5]).items():
        at = os.path.join(world, link)
        try:
            if os.path.lexists(at):  # a file of the owner's: no sticky bit, so hers to remove
                os.unlink(at)
            os.symlink(target, at)
            planted.append(link)
        except OSError as exc:
            print("could not plant", link, exc, file=sys.stderr)
    print(json.dumps(planted), flush=True)
    sys.exit(0)
directory = sharedserver.private_dir(os.path.join(world, name))
moved = directory + ".moved"
os.rename(directory, moved)  # the owner's directory: hers to rename in this parent
os.mkdir(directory, 0o700)
her = socket.socket(socket.AF_UNIX)
her.bind(os.path.join(directory, sharedserver.SOCKET))
her.listen()
her.settimeout(0.01)
print("[]", flush=True)
accepted = 0
while not os.path.exists(stop):
    try:
        her.accept()[0].close()
        accepted += 1
    except (socket.timeout, BlockingIOError):
        pass
her.close()
os.unlink(os.path.join(directory, sharedserver.SOCKET))
os.rmdir(directory)
os.rename(moved, directory)
print(accepted, flush=True)
""".replace("NOBODY", str(NOBODY))


class Unavailable(Exception):
    """A move cannot run here (not root, mounts not allowed); its message says why."""


@dataclass
class Result:
    move: str
    shared: bool
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    confirmed_puts: int = 0
    confirmed_acks: int = 0
    errors_seen: int = 0  # tries in which the writer saw at least one error
    logged_errors: int = 0  # ERROR records of the ackqueue logger, over all tries
    notes: Counter[str] = field(default_factory=Counter)  # how many tries were made how
    seconds: float = 0.0

    def add(self, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        if outcome != "intact":
            shown = self.examples.setdefault(outcome, [])
            if len(shown) < 5:
                shown.append(detail)

    def reclassify(self, outcome: str, new: str, tag: str, why: str) -> None:
        """Count try ``tag``, judged ``outcome``, as ``new`` instead (for ``why``: a check the
        judge does not make)."""
        self.counts[outcome] -= 1
        if outcome in self.examples:
            self.examples[outcome] = [d for d in self.examples[outcome]
                                      if not d.startswith(f"{tag}: ")]
        self.add(new, f"{tag}: {why}")

    @property
    def failed(self) -> bool:
        return any(self.counts[o] for o in FAILING)

    def summary(self) -> str:
        tries = sum(self.counts.values())
        outcomes = ", ".join(f"{o} {self.counts[o]}" for o in OUTCOMES if self.counts[o])
        return (f"{self.move} ({'shared' if self.shared else 'one process'}): {tries} tries in "
                f"{self.seconds:.0f} s: {outcomes or 'none'}; {self.confirmed_puts} confirmed "
                f"puts, {self.confirmed_acks} confirmed acks checked; errors seen in "
                f"{self.errors_seen} tries, {self.logged_errors} logged errors"
                + "".join(f"; {n} {what}" for what, n in self.notes.items()))


def why_not(move: str, tmp: str) -> str | None:
    """Why ``move`` cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (it mounts filesystems and runs a second user)"
    if move in ("full", "vanish"):
        probe = os.path.join(tmp, "probe")
        os.makedirs(probe, exist_ok=True)
        try:
            with mounted(probe, "1m"):
                pass
        except Unavailable as exc:
            return str(exc)
    return None


@contextlib.contextmanager
def mounted(where: str, size: str) -> Iterator[str]:
    os.makedirs(where, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", where], capture_output=True)


def _lines(path: str) -> list[list[str]]:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    whole = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    return [line.split(" ") for line in whole]


class Try:
    """One move's writer: its log, its process, and the bounded waits on it."""

    def __init__(self, path: str, logdir: str, tag: str, shared: bool, rng: random.Random,
                 root: str, reopen: bool = False, small_packs: bool = False) -> None:
        self.path, self.shared, self.tag = path, shared, tag
        self.log = os.path.join(logdir, f"log-{tag}")
        self.stop = os.path.join(logdir, f"stop-{tag}")
        self.err = os.path.join(logdir, f"stderr-{tag}")
        self.hung: list[str] = []
        self.server: int | None = None
        flags = ["1" if x else "0" for x in (shared, reopen)]
        self.proc = start_child(
            WRITER, [path, self.log, self.stop, str(rng.randrange(1 << 30)), *flags, tag,
                     "1" if small_packs else "0", str(LEASE)],
            env_at(root), stderr_path=self.err)
        self.note_server()

    def note_server(self) -> None:
        if self.shared:
            self.server = server_pid(self.path) or self.server

    def events(self) -> list[list[str]]:
        return _lines(self.log)

    def wait_for(self, what: str, done: Callable[[list[list[str]]], bool],
                 within: float = WAIT) -> bool:
        """Wait until ``done(log)``; False (a hang noted) if the writer logs nothing for
        ``within`` seconds, ends, or logs without getting there for ``4 * within``."""
        last, deadline = -1, time.monotonic() + within
        overall = time.monotonic() + 4 * within
        while not done(lines := self.events()):
            if len(lines) != last:
                last, deadline = len(lines), time.monotonic() + within
            if min(deadline, overall) < time.monotonic() or self.proc.poll() is not None:
                self.hung.append(f"no {what} from the writer (it logged nothing for "
                                 f"{time.monotonic() - deadline + within:.0f} s; exit "
                                 f"{self.proc.poll()})")
                return False
            time.sleep(0.005)
        return True

    def wait_events(self, n: int, within: float = WAIT) -> bool:
        target = len(self.events()) + n
        return self.wait_for(f"{n} events", lambda lines: len(lines) >= target, within)

    def finish(self) -> None:
        """Stop the writer and its server, bounded; a hang dumps the writer's stacks."""
        open(self.stop, "w").close()
        try:
            self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)  # the dump's length, not a wait for anything
            self.proc.kill()
            self.proc.wait()
            self.hung.append(f"the writer did not stop within {WAIT:.0f} s: "
                             f"{stderr_tail(self.err, 4000)}")
        else:
            if self.proc.returncode != 0:
                self.hung.append(f"the writer exited {self.proc.returncode}: "
                                 f"{stderr_tail(self.err)}")
        if self.server is not None:
            deadline = time.monotonic() + WAIT
            while alive(self.server):
                if time.monotonic() > deadline:
                    os.kill(self.server, signal.SIGKILL)
                    self.hung.append(f"the private server {self.server} did not exit within "
                                     f"{WAIT:.0f} s of its last client (issue 21 item 9)")
                    break
                time.sleep(0.02)

    def judge(self, copy: str | None, result: Result) -> str:
        """Check the file copied to ``copy`` (None: it could not be read) against the log;
        count and return the outcome."""
        lines = self.events()
        words: dict[str, set[str]] = {w: set() for w in ("put", "put?", "acked", "ackfail")}
        errors: list[str] = []
        unclear: list[str] = []
        logged: list[str] = []
        for what, *rest in lines:
            if what in words:
                words[what].add(rest[0])
            elif what in ("failed", "close-failed"):
                errors.append(" ".join(rest))
            elif what in ("internal", "close-internal"):
                unclear.append(" ".join(rest))
            elif what == "logged":
                logged.append(" ".join(rest))
        result.confirmed_puts += len(words["put"])
        result.confirmed_acks += len(words["acked"])
        result.errors_seen += bool(errors or unclear)
        if any("belongs_to_nobody" in line for line in logged + errors):
            result.notes["refused her directory"] += 1
        logged = [line for line in logged if line.startswith("ERROR")]
        result.logged_errors += len(logged)
        if logged:
            shown = result.examples.setdefault("logged", [])
            if len(shown) < 5:
                shown.append(f"{self.tag}: {logged[0][:400]}")
        problems = []
        if copy is not None:
            problems = _check(copy, words)
        elif not errors:
            problems.append("the file is out of reach and the writer was told nothing")
        detail = f"{self.tag}: " + "; ".join(self.hung + problems + unclear + errors[:2])[:1500]
        if copy is None and not (self.hung or problems or unclear):
            outcome = "reported loss"
        elif self.hung:
            outcome = "hang"
        elif problems:
            outcome = "loss"
        elif unclear:
            outcome = "unclear error"
        else:
            outcome = "clear error" if errors else "intact"
        result.add(outcome, detail)
        return outcome


def _check(copy: str, words: dict[str, set[str]]) -> list[str]:
    """What the file ``copy`` lacks or holds wrongly, given the writer's confirmed events."""
    drained: list[str] = []
    try:
        with ackqueue.AckQueue[str](copy) as q, q.connect() as c:
            while True:
                try:
                    drained.append(c.get_nowait().split(".")[0])
                except ackqueue.Empty:
                    break
    except Exception as exc:
        return [f"the file does not open: {exc!r}"[:500]]
    left = set(drained)
    problems = []
    lost = words["put"] - left - words["acked"] - words["ackfail"]
    if lost:
        problems.append(f"{len(lost)} confirmed puts lost: {sorted(lost)[:5]}")
    back = words["acked"] & left
    if back:
        problems.append(f"{len(back)} confirmed acks came back: {sorted(back)[:5]}")
    unknown = left - words["put"] - words["put?"]
    if unknown:
        problems.append(f"{len(unknown)} items nobody put: {sorted(unknown)[:5]}")
    if len(drained) != len(left):
        problems.append("an item is in the file twice")
    return problems


def _recovered(since: int) -> Callable[[list[list[str]]], bool]:
    """Whether the writer confirmed a put and an ack after line ``since``."""
    def done(lines: list[list[str]]) -> bool:
        later = {line[0] for line in lines[since:]}
        return "put" in later and "acked" in later
    return done


def _failed_since(since: int) -> Callable[[list[list[str]]], bool]:
    return lambda lines: any(line[0] in ("failed", "internal") for line in lines[since:])


def _fill(directory: str) -> str:
    """Fill the filesystem of ``directory`` with a ballast file until ENOSPC."""
    ballast = os.path.join(directory, "ballast")
    with open(ballast, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:  # unbuffered: nothing left to fail at the close
            f.write(b"\0" * 4096)
    return ballast


def full_try(tmp: str, logdir: str, tag: str, shared: bool, rng: random.Random, root: str,
             result: Result) -> None:
    mnt = os.path.join(tmp, f"mnt-{tag}")
    with mounted(mnt, "8m"):
        t = Try(os.path.join(mnt, "q.fs"), logdir, tag, shared, rng, root)
        extra = []
        if t.wait_events(rng.randint(5, 80)):
            mark = len(t.events())
            ballast = _fill(mnt)
            # Until the writer has failed, or given up waiting: a writer that only got and
            # acked may not need room for a while.
            t.wait_for("a failure on the full disk", _failed_since(mark), within=10)
            t.hung.clear()
            t.wait_events(rng.randint(0, 20), within=10)
            t.hung.clear()
            os.remove(ballast)
            freed = len(t.events())
            if not t.wait_for("a put and an ack once space was back", _recovered(freed)):
                extra.append("the writer did not recover once space was back")
                t.hung.clear()
            t.wait_events(rng.randint(1, 20))
        t.note_server()
        t.finish()
        copy = os.path.join(tmp, f"check-{tag}.fs")
        shutil.copyfile(t.path, copy)
    outcome = t.judge(copy, result)
    if extra and outcome != "hang":
        result.reclassify(outcome, "stuck", tag, "; ".join(extra))


def remove_tree(directory: str) -> None:
    """``rm -r directory`` under the running queue, which may rename or remove a file in it
    meanwhile (a pack putting its copy in place, an index saved): what vanished under the
    walk is gone already, the rest is removed on the next walk."""
    for _ in range(100):
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.exists(directory):
            return
    raise AssertionError(f"{directory} could not be removed")


def vanish_try(tmp: str, logdir: str, tag: str, shared: bool, rng: random.Random, root: str,
               result: Result) -> None:
    mnt = os.path.join(tmp, f"mnt-{tag}")
    how = rng.choice(["rm -r", "umount -l"])
    result.notes[how] += 1
    with mounted(mnt, "32m"):
        directory = os.path.join(mnt, "queue")
        os.mkdir(directory)
        t = Try(os.path.join(directory, "q.fs"), logdir, tag, shared, rng, root,
                small_packs=not shared)
        t.wait_events(rng.randint(5, 400))
        t.note_server()
        if not shared and rng.random() < 0.5:
            # Into a pack: its copy is being written (packs come every few hundred events).
            deadline = time.monotonic() + 10
            while not os.path.exists(t.path + ".pack") and time.monotonic() < deadline:
                time.sleep(0.001)
            if os.path.exists(t.path + ".pack"):
                how += ", during a pack"
                result.notes["during a pack"] += 1
        if how.startswith("rm -r"):
            remove_tree(directory)
        else:
            subprocess.run(["umount", "-l", mnt], check=True)
        t.wait_events(rng.randint(10, 80))
        # The file as its holder (the writer, or its server) has it open: no path reaches it
        # any more, and a pack that finished before the move put a new file at the name.
        holder = t.server if shared else t.proc.pid
        keep = _held_file(holder, "q.fs") if holder else None
        t.finish()
        copy: str | None = None
        if keep is not None:
            copy = os.path.join(tmp, f"check-{tag}.fs")
            with os.fdopen(keep, "rb") as held, open(copy, "wb") as out:
                shutil.copyfileobj(held, out)
    t.tag = f"{tag} ({how})"
    t.judge(copy, result)


def _held_file(pid: int, name: str) -> int | None:
    """A new descriptor on the file named ``name`` that process ``pid`` has open, or None."""
    fds = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fds):
            with contextlib.suppress(OSError):
                target = os.readlink(os.path.join(fds, fd))
                if os.path.basename(target).removesuffix(" (deleted)") == name:
                    return os.open(os.path.join(fds, fd), os.O_RDONLY)
    return None


def _planted_names(path: str, pids: list[int]) -> list[str]:
    """Every name the queue, FileStorage and the CLI requests make beside ``path``."""
    name = os.path.basename(path)
    suffixes = [".tmp", ".lock", ".index.index_tmp", ".pack", ".old", ".status", ".request",
                ".tr0", ".tr0.before", ".tr1"]
    suffixes += [f".status.{pid}.tmp" for pid in pids]
    return [name + s for s in suffixes]


def _tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants: what a local user sees with ``ps``."""
    found = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), \
                    open(f"/proc/{entry}/stat") as f:
                if int(f.read().split(") ", 1)[1].split()[1]) in found:
                    found.append(int(entry))
    return found


def user_try(tmp: str, logdir: str, tag: str, shared: bool, rng: random.Random, root: str,
             result: Result) -> None:
    world = tempfile.mkdtemp(prefix="ackqueue-world-")  # /tmp: others may reach it
    owned = tempfile.mkdtemp(prefix="ackqueue-owned-")
    os.chmod(world, 0o777)  # everyone may write, no sticky bit
    os.chmod(owned, 0o755)
    try:
        path = os.path.join(world, "q.fs")
        t = Try(path, logdir, tag, shared, rng, root, reopen=True)
        extra: list[str] = []
        connected = ""
        move = rng.choice(["links", "swap"]) if shared else "links"
        result.notes[move] += 1
        targets: dict[str, str] = {}
        attack_stop = os.path.join(world, "stop-attack")
        if t.wait_events(rng.randint(3, 60)):
            t.note_server()
            pids = _tree_pids(t.proc.pid) + ([t.server] if t.server else [])
            for n, link in enumerate(_planted_names(path, pids)):
                target = os.path.join(owned, f"target-{n}")
                with open(target, "w") as f:
                    f.write(f"precious {link}")
                os.chmod(target, 0o644)
                targets[link] = target
            attacker = subprocess.Popen(
                [sys.executable, "-c", ATTACKER, world, "q.fs", move, attack_stop,
                 json.dumps(targets)],
                env=env_at(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert attacker.stdout is not None
            attacker.stdout.readline()
            if shared and rng.random() < 0.6 and t.server is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(t.server, signal.SIGKILL)  # its clients start another
            # Refusing her directory may stall the writer for a while: its recovery once she
            # is gone is checked below.
            t.wait_events(rng.randint(10, 80), within=8)
            t.hung.clear()
            open(attack_stop, "w").close()
            try:
                out, err = attacker.communicate(timeout=WAIT)
            except subprocess.TimeoutExpired:
                attacker.kill()
                out, err = attacker.communicate()
            if move == "swap":
                if attacker.returncode != 0 or not out.strip().isdigit():
                    extra.append(f"the attacker failed: {err[-500:]}")
                elif int(out) > 0:
                    connected = f"{out.strip()} connections to her socket"
            restored = len(t.events())
            if not t.wait_for("a put and an ack after the attack", _recovered(restored),
                              within=60):
                extra.append("the writer did not recover after the attack")
                t.hung.clear()
            t.note_server()
        t.finish()
        followed = []
        for link, target in targets.items():
            st = os.stat(target)
            with open(target, "rb") as f:
                text = f.read()
            if text != f"precious {link}".encode() or stat.S_IMODE(st.st_mode) != 0o644:
                followed.append(f"{link} -> {target}: now {text[:40]!r} mode "
                                f"{stat.S_IMODE(st.st_mode):04o}")
        copy = os.path.join(tmp, f"check-{tag}.fs")
        shutil.copyfile(path, copy)
        t.tag = f"{tag} ({move})"
        outcome = t.judge(copy, result)
        if followed:
            result.reclassify(outcome, "followed", t.tag, "; ".join(followed))
        elif connected:
            result.reclassify(outcome, "connected", t.tag, connected)
        elif extra and outcome not in ("hang", "loss"):
            result.reclassify(outcome, "stuck", t.tag, "; ".join(extra))
    finally:
        shutil.rmtree(world, ignore_errors=True)
        shutil.rmtree(owned, ignore_errors=True)


TRIES = {"full": full_try, "vanish": vanish_try, "user": user_try}


def run(move: str, tmp: str, tries: int, root: str, shared: bool, seed: int = 0) -> Result:
    """Run ``tries`` tries of ``move`` in directory ``tmp``; the classified result.
    Raises :class:`Unavailable` where the move cannot run here."""
    reason = why_not(move, tmp)
    if reason is not None:
        raise Unavailable(reason)
    rng = random.Random(f"{seed}-{move}-{shared}")
    result = Result(move, shared)
    logdir = os.path.join(tmp, f"logs-{move}")
    os.makedirs(logdir, exist_ok=True)
    started = time.monotonic()
    for n in range(tries):
        TRIES[move](tmp, logdir, f"{move[0]}{n}", shared, rng, root, result)
    result.seconds = time.monotonic() - started
    return result
