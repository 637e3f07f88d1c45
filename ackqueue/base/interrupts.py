"""Holding Ctrl-C back while the file and the queue's memory disagree.

Python raises ``KeyboardInterrupt`` in the main thread between any two bytecodes. Landing
inside a ZODB commit it makes FileStorage close itself ("Failure in _finish. Closing."),
and landing between a commit and the matching in-memory update it leaves an item stored
but never handed out, or acked in the file but still held. So an operation runs under a
:class:`Shield`: while the shield is up a SIGINT is only recorded, and it is raised once the
operation has finished, through whatever handler was installed before.

A blocking wait must stay interruptible (Ctrl-C on a ``get`` that waits for an item has to
work), so an operation starts *open*: a SIGINT that finds it blocked in a wait interrupts it
at once, as usual. Anywhere else it waits for the next :func:`checkpoint` (the queue calls
one before each wait) or the end of the operation: raised inside ``threading.Condition``'s
own Python code (its ``__enter__``, the lock hand-over around a wait), KeyboardInterrupt
leaves the queue's mutex held, and the next operation hangs. The operation calls
:func:`hold_back` at the moment it takes something (claims an item, stages a put), and from
then on the interrupt waits until the operation is done. Shields nest: the
outermost one does the holding back, and an inner one that is closed (or is closed later)
closes it, so a whole operation finishes once any part of it has taken something.

Only the main thread receives signals, so elsewhere the shield does nothing.

A shield is entered two or three times per operation, so it keeps its cost down: the
outermost shield up is kept in a module variable (only the main thread sets it), so inner
shields, :func:`checkpoint` and :func:`hold_back` never ask the signal module, and the handler
is swapped through ``_signal``, the C module under ``signal``, whose Python wrappers convert
every handler to an enum and back (a fifth of a put's cost went there). The shield itself is
the handler while it is up (no object made for it), and the main thread's id is kept in a
module variable, renewed in a child after a fork (where the forking thread is the main one):
``threading.main_thread()`` at every shield, hold-back and checkpoint cost a tenth of a
microsecond each, three to five times an operation.
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

try:
    import _signal as _raw_signal  # signal's C module: the same calls without enum conversions
except ImportError:  # pragma: no cover - every CPython has it
    _raw_signal = signal

_SIGINT = int(signal.SIGINT)


_get_ident = threading.get_ident
_main_ident = threading.main_thread().ident  # asked at every shield, checkpoint and hold_back


def _note_main_thread() -> None:
    global _main_ident
    _main_ident = threading.main_thread().ident  # after a fork: the thread that forked


if hasattr(os, "register_at_fork"):  # registered after threading's own, so it runs after it
    os.register_at_fork(after_in_child=_note_main_thread)


class Shield:
    """Defers SIGINT until the ``with`` block ends (main thread only).

    While open, a SIGINT that finds the thread blocked in a wait, or a held-back one at a
    :func:`checkpoint`, is raised at once; after :meth:`close`, none is.
    """

    __slots__ = ("_active", "_nudge", "_open", "_outer", "_pending", "_previous")

    # Each put, get and ack enters one or two shields: they are kept lean (no recorder object
    # of their own, nothing set that only the outermost shield up uses).
    def __init__(self, interruptible: bool = True) -> None:
        self._active = False
        self._open = interruptible
        self._pending = False
        self._outer: Shield | None = None

    def __enter__(self) -> Shield:
        global _current
        if _get_ident() != _main_ident:
            return self
        outer = _current
        if outer is None:
            previous = _raw_signal.getsignal(_SIGINT)
            if isinstance(previous, Shield):
                outer = previous  # up, though not (or no longer) this module's _current
        if outer is not None:
            # An outer shield holds it back; a closed inner one closes it.
            self._outer = outer
            if not self._open:
                outer.close()
            return self
        if not callable(previous):
            return self  # SIG_IGN/SIG_DFL: Ctrl-C raises nothing to hold back
        self._previous: Any = previous
        self._nudge: Callable[[], None] | None = None
        self._active = True  # before the handler is in: it may fire at once
        try:
            _raw_signal.signal(_SIGINT, self)
        except ValueError:  # not the main interpreter: signals are not ours to handle
            self._active = False
            return self
        _current = self
        return self

    def close(self) -> None:
        """From now on the operation has taken something: hold SIGINT back."""
        self._open = False
        if self._outer is not None:
            self._outer.close()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._open and _blocked_in_wait(frame):
            # Nothing taken yet, and blocked where an exception is safe: interrupt as usual.
            # A second SIGINT while this one unwinds waits for the end of the operation.
            self._open = False
            self._previous(signum, frame)
        else:
            self._pending = True
            if self._open and self._nudge is not None:
                # Between the last checkpoint and the wait it leads to, a recorded SIGINT would
                # wait as long as the wait does (for ever, without a timeout). Another thread
                # wakes that wait (it can take the lock only once the wait has let it go), and
                # the loop around it comes to its checkpoint again.
                threading.Thread(target=self._nudge, name="ackqueue-ctrl-c", daemon=True).start()

    __call__ = _on_signal  # the shield is the SIGINT handler while it is up

    def _deliver_if_open(self) -> None:
        if self._open and self._pending:
            self._pending = False
            self._open = False
            self._previous(signal.SIGINT, None)

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        global _current
        if self._active:
            # Forget it first: a SIGINT from here on is still recorded by this shield (and
            # raised below), or goes to the restored handler, never to a stale shield.
            if _current is self:
                _current = None
            _raw_signal.signal(_SIGINT, self._previous)
            self._active = False
        if self._pending:
            self._pending = False
            signal.raise_signal(signal.SIGINT)  # the user's handler runs now


def checkpoint(nudge: Callable[[], None] | None = None) -> None:
    """A safe point of an operation that has taken nothing yet: a SIGINT held back is raised.

    ``nudge`` wakes the wait that may follow (it is called from another thread), so that a
    SIGINT arriving on the way there reaches the next checkpoint instead of waiting with it.
    """
    shield = _current
    if shield is not None and _get_ident() == _main_ident:
        shield._nudge = nudge
        shield._deliver_if_open()


def _wait_lines() -> frozenset[int]:
    """The lines of ``threading.Condition.wait`` that block in a lock acquire.

    An exception there leaves the condition's lock as it should be (the acquire is inside
    the ``try`` whose ``finally`` takes the lock back, or before the lock was let go).
    """
    try:
        lines, first = inspect.getsourcelines(threading.Condition.wait)
    except (OSError, TypeError):
        return frozenset()
    return frozenset(first + i for i, line in enumerate(lines) if "waiter.acquire(" in line)


_WAIT_CODE = threading.Condition.wait.__code__
_WAIT_LINES = _wait_lines()


def _blocked_in_wait(frame: FrameType | None) -> bool:
    if frame is None or frame.f_code is not _WAIT_CODE:
        return False
    return not _WAIT_LINES or frame.f_lineno in _WAIT_LINES


def hold_back() -> None:
    """The calling operation has taken something: close the shield around it, if any."""
    shield = _current
    # Signals reach the main thread only; elsewhere its shield is not ours to close.
    if shield is not None and _get_ident() == _main_ident:
        shield.close()


_current: Shield | None = None  # the outermost shield up in the main thread, if any
