"""Changes asked of a live process from the command line: requests left beside the file.

A queue file open in one process (without ``shared=True``) is locked: ``ackqueue pause``,
``resume``, ``purge``, ``requeue --dead``, ``remove`` and ``pack`` cannot open it. They leave
a request instead, ``<storage>.request`` (JSON: an id, the command, the queue's name and the
command's arguments); the process that has the file open looks for it once a second (on its
status thread, :mod:`.status`), removes it, carries it out on the queue it has open, and
answers in ``<storage>.reply.<id>``, which the command prints and removes. One request at a
time: a second command waits for the slot.

Only the file's own user may ask: both files are created owner-only with ``O_EXCL`` and
``O_NOFOLLOW`` (a link planted in their place is refused, never followed), and a request not
owned by the process's user, not a plain file, or writable by others is ignored. The request
names only what a command line can: no code, no pickles.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import time
import uuid
from collections.abc import Callable
from typing import Any

from ackqueue.errors import Empty

log = logging.getLogger("ackqueue")

REQUEST_SUFFIX = ".request"
REPLY_SUFFIX = ".reply."
MAX_BYTES = 1 << 20  # a request or a reply is a few hundred bytes; refuse a flood
COMMANDS = ("pause", "resume", "purge_ready", "purge_dead", "requeue_dead", "remove",
            "remove_group", "pack")
PURGE_BATCH = 500
_ID = re.compile(r"[0-9a-f]{32}")
_distrusted: set[str] = set()  # files already said to be ignored (once each in the log)


class RequestError(Exception):
    """A request could not be left, or was not answered; the message says what to do."""


# -- the command line's side ---------------------------------------------------------------------


def ask(storage_path: str, command: str, queue: str, pid: int, pickup_timeout: float = 10.0,
        **arguments: Any) -> Any:
    """Leave a request for the process ``pid`` that has ``storage_path`` open; wait for it to
    be taken (``pickup_timeout`` seconds), then for the answer: the result of the change, or
    a RequestError with the process's words for why it failed."""
    if command not in COMMANDS:
        raise ValueError(f"no such request: {command!r}")
    rid = uuid.uuid4().hex
    body = json.dumps({"id": rid, "command": command, "queue": queue, "args": arguments})
    request = storage_path + REQUEST_SUFFIX
    deadline = time.monotonic() + pickup_timeout
    while True:  # the slot may hold another command's request, about to be taken
        try:
            _publish(request, body)
            break
        except FileExistsError:
            if time.monotonic() > deadline:
                raise RequestError(
                    f"{request} is still there after {pickup_timeout:.0f} s: another request "
                    f"waits, and process {pid} takes none; remove the file if that process is "
                    "not an ackqueue queue, then try again"
                ) from None
            time.sleep(0.05)
    reply = storage_path + REPLY_SUFFIX + rid
    try:
        while os.path.lexists(request) and _mine(request, rid):
            if time.monotonic() > deadline:
                with contextlib.suppress(OSError):
                    os.unlink(request)
                raise RequestError(
                    f"process {pid} has {storage_path} open but did not take the request within "
                    f"{pickup_timeout:.0f} s (it takes requests once a second while a queue of "
                    "the file is open in it; an ackqueue older than this command takes none): "
                    "stop that process and run the command again"
                )
            time.sleep(0.05)
        while True:  # taken: the change may take long (a pack); Ctrl-C stops only the waiting
            answer = _read_own(reply)
            if answer is None and not _process_runs(pid):
                answer = _read_own(reply)  # answered just before it ended
                if answer is None:
                    raise RequestError(f"process {pid} ended before it answered the request")
            if answer is not None:
                if not answer.get("done"):
                    raise RequestError(f"process {pid} could not do it: {answer.get('message')}")
                return answer.get("result")
            time.sleep(0.05)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(reply)


def _mine(request: str, rid: str) -> bool:
    """Whether the request at ``request`` is still the one with id ``rid``."""
    body = _read_own(request)
    return body is None or body.get("id") == rid


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the live process's side ---------------------------------------------------------------------


def serve(storage_path: str, queues: list[Any]) -> None:
    """Carry out the request left for ``storage_path``, if any, on the open ``queues`` of it
    (called about once a second from the status thread)."""
    request = storage_path + REQUEST_SUFFIX
    if not os.path.lexists(request):
        return
    body = _read_own(request)
    if body is None:
        return  # not to be trusted (said once in the log), or unreadable
    with contextlib.suppress(OSError):
        os.unlink(request)  # taken: carried out once, whatever happens next
    rid = str(body.get("id", ""))
    if not _ID.fullmatch(rid):
        log.warning("ignored a request beside %s without a valid id", storage_path)
        return
    result: Any = None
    try:
        message, result = perform(storage_path, queues, body)
        done = True
    except Exception as exc:
        done, message = False, f"{type(exc).__name__}: {exc}"
    log.info("a request from the command line for %s: %s", storage_path, message)
    answer = {"done": done, "message": message, "result": result}
    with contextlib.suppress(OSError):
        _publish(storage_path + REPLY_SUFFIX + rid, json.dumps(answer))


def perform(storage_path: str, queues: list[Any], body: dict[str, Any]) -> tuple[str, Any]:
    """Carry out one request on the queue it names: what was done, in words for the log, and
    the result of the queue's method (a count, or None)."""
    command, name = body.get("command"), body.get("queue")
    args = body.get("args") or {}
    if command not in COMMANDS or not isinstance(name, str) or not isinstance(args, dict):
        raise ValueError(f"not a request this version carries out: {command!r}")
    open_here = {q.name: q for q in queues if not q.closed}
    q = open_here.get(name)
    if q is None:
        if command == "pack" and open_here:  # a pack is file-wide: any open queue packs it
            q = next(iter(open_here.values()))
        else:
            names = ", ".join(repr(n) for n in sorted(open_here)) or "none"
            raise LookupError(
                f"queue {name!r} is not open in process {os.getpid()}, which has "
                f"{storage_path} open (its open queues: {names}); a request reaches only the "
                "queues open there: stop that process and run the command again"
            )
    if command == "pause":
        q.pause()
        return f"paused queue {name!r}", None
    if command == "resume":
        q.resume()
        return f"resumed queue {name!r}", None
    if command == "purge_dead":
        n = q.purge_dead()
        return f"purged {_counted(n, 'dead letter')} of queue {name!r}", n
    if command == "purge_ready":
        n = purge_ready(q)
        return f"purged {_counted(n, 'ready item')} of queue {name!r}", n
    if command == "requeue_dead":
        n = q.requeue_dead()
        return f"requeued {_counted(n, 'dead letter')} of queue {name!r}", n
    if command == "remove":
        key = args.get("key")
        if not isinstance(key, str):
            raise ValueError(f"a key to remove is a str, not {key!r}")
        q.remove(key.encode() if args.get("bytes") else key)
        return f"removed the item with key {key!r} from queue {name!r}", None
    if command == "remove_group":
        group = str(args.get("group"))
        n = q.remove_group(group)
        return f"removed {_counted(n, 'item')} of group {group!r} from queue {name!r}", n
    before = os.path.getsize(storage_path)
    q.pack()
    after = os.path.getsize(storage_path)
    return f"packed {storage_path} (every queue in it): {before:,} -> {after:,} bytes", after


def purge_ready(q: Any, progress: Callable[[int, int], None] | None = None) -> int:
    """Remove every ready item of ``q`` for good, a batch a commit; how many."""
    total, removed = q.qsize(), 0
    while True:
        taken = 0
        with q.transaction():
            for _ in range(PURGE_BATCH):
                try:
                    q.get_nowait()
                except Empty:
                    break  # leave the batch normally, so that what it took is committed
                taken += 1
        for _ in range(taken):  # they will never be worked on: join() must not wait for them
            with contextlib.suppress(ValueError):
                q.task_done()
        removed += taken
        if not taken:
            return removed
        if progress is not None:
            progress(removed, total)


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


# -- the files -------------------------------------------------------------------------------------


def _publish(path: str, body: str) -> None:
    """Create ``path`` holding ``body``, for the owner alone, never through a link, failing
    with FileExistsError if it exists; it appears whole (a reader never sees it half written)."""
    draft = f"{path}.{uuid.uuid4().hex}.tmp"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "w") as f:
            f.write(body)
        os.link(draft, path, follow_symlinks=False)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)


def _read_own(path: str) -> dict[str, Any] | None:
    """The JSON object at ``path`` if it is a plain file of this user that nobody else may
    write; None if it is missing, unreadable or not to be trusted."""
    try:  # O_NONBLOCK: a FIFO planted in its place must not hang the reader
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        # Checked before the descriptor becomes a file object: open() refuses a directory
        # (IsADirectoryError), which a directory planted here made escape, once a second.
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & 0o022):
            if path not in _distrusted:
                _distrusted.add(path)
                log.warning("ignored %s: not a plain file of this user, or writable by others",
                            path)
            return None
        with open(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return None  # being written: it is read again next time
    return body if isinstance(body, dict) else None
