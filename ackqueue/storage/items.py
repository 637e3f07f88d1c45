"""How an item is stored: the serializer that encodes it (:class:`Codec`, chosen by the
``serializer=`` option), and a put on its way to the book (:class:`Staged`).

A queue's items are encoded by its serializer: ``"pickle"`` (the default: any picklable
object, and a stored pickle is code that runs when loaded), ``"json"`` (what JSON carries:
dicts with str keys, lists, str, int, float, bool, None; a tuple comes back a list; stored
data is only data), or a caller's object with ``dumps(obj) -> bytes`` and
``loads(bytes) -> obj``. The queue record stores the serializer's name (:func:`codec_for`):
a ``name`` attribute of the object if it has a str one, else its class's qualified name (the
module's name for a module). An item the serializer cannot encode is an
:class:`~ackqueue.UnpicklableItemError` (a ``TypeError``) at ``put``, nothing stored; one it
cannot decode any more is an :class:`~ackqueue.ItemLoadError`, and the item moves to the dead
letters with its bytes kept.

A pickle that cannot be made is an :class:`~ackqueue.UnpicklableItemError` at ``put`` (nothing
is stored); one that cannot be loaded any more (its class is gone) is an
:class:`~ackqueue.ItemLoadError` that names the missing class. A pickle naming a class of
``__main__`` (the script being run) loads in no other program: ``put`` logs a warning, once a
class, and the load error says what to do.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import pickle
import pickletools
import threading
from dataclasses import dataclass
from typing import IO, Any, Protocol

from ackqueue.errors import ItemLoadError, UnpicklableItemError

log = logging.getLogger("ackqueue")

MAIN = "__main__"
_MAIN_HINT = (
    "define the class in a module that the putting program and every getting program import, "
    "not in the script run as __main__"
)
_warned_main: set[str] = set()  # the __main__ classes a put has warned about, once each
_warned_lock = threading.Lock()


@dataclass
class Staged:
    """A put whose item is pickled and keyed, not yet committed."""

    key: Any
    seq: int
    data: bytes
    not_before: float = 0.0
    group: str | None = None


class Serializer(Protocol):
    """What ``serializer=`` accepts besides ``"pickle"`` and ``"json"``."""

    def dumps(self, obj: Any, /) -> bytes: ...

    def loads(self, data: bytes, /) -> Any: ...


PICKLE = "pickle"
JSON = "json"


class Codec:
    """A queue's serializer, by the name its record stores; ``trusted`` when decoding may run
    code (pickle), so that only pickle items are expected to be code."""

    def __init__(self, name: str, serializer: Serializer | None) -> None:
        self.name = name
        self._serializer = serializer

    def encode(self, item: Any) -> bytes:
        """The bytes stored for ``item``; :class:`~ackqueue.UnpicklableItemError` if the
        serializer cannot encode it."""
        serializer = self._serializer
        if serializer is None:
            return pickle_item(item)
        try:
            data = serializer.dumps(item)
        except Exception as exc:
            raise UnpicklableItemError(
                f"cannot store an item of type {type(item).__qualname__}: serializer "
                f"{self.name!r} cannot encode it ({type(exc).__name__}: {exc})"
            ) from exc
        if not isinstance(data, bytes):
            raise UnpicklableItemError(
                f"cannot store an item of type {type(item).__qualname__}: serializer "
                f"{self.name!r} returned {type(data).__name__}, not bytes, from dumps()"
            )
        return data

    def decode(self, data: bytes, what: object) -> Any:
        """The item stored as ``data``; :class:`~ackqueue.ItemLoadError` naming ``what`` (its
        ``str``, made only then) if the serializer cannot decode it."""
        serializer = self._serializer
        if serializer is None:
            return unpickle_item(data, what)
        try:
            return serializer.loads(data)
        except Exception as exc:
            raise ItemLoadError(
                f"cannot load {what}: serializer {self.name!r} cannot decode its "
                f"{len(data)} bytes ({type(exc).__name__}: {exc})"
            ) from exc


    def key_form(self, item: Any, data: bytes) -> Any:
        """The item as a ``PriorityAckQueue`` keys its entry by it: the item itself with
        pickle; with another serializer, the item as decoded from ``data``, which must be
        made of plain values (so that the tree names no class: see ``records.py``)."""
        if self._serializer is None:
            return item
        decoded = self.decode(data, "the item")
        if not _plain(decoded):
            raise UnpicklableItemError(
                f"a PriorityAckQueue with serializer {self.name!r} orders by the item as it "
                f"decodes, which must be made of str, bytes, int, float, bool, None, tuples, "
                f"lists and dicts, not {type(decoded).__qualname__} {decoded!r:.80}"
            )
        return decoded


_PLAIN = frozenset({str, bytes, int, float, bool, type(None)})


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind in (tuple, list):
        return all(_plain(v) for v in value)
    if kind is dict:
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return False


class _Json:
    """JSON as UTF-8 bytes, strict (no NaN or infinity, which other JSON readers refuse)."""

    name = JSON
    # One encoder for every put: json.dumps with options builds a new one each call.
    _encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode

    def dumps(self, obj: Any) -> bytes:
        return self._encode(obj).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


PICKLE_CODEC = Codec(PICKLE, None)
JSON_CODEC = Codec(JSON, _Json())


def codec_for(serializer: object) -> Codec:
    """The codec of a ``serializer=`` option (a clear ``TypeError`` or ``ValueError`` for one
    that is none)."""
    if serializer == PICKLE:
        return PICKLE_CODEC
    if serializer == JSON:
        return JSON_CODEC
    if isinstance(serializer, str):
        raise ValueError(f"serializer must be 'pickle', 'json' or an object with dumps() and "
                         f"loads(), not {serializer!r}")
    if not (callable(getattr(serializer, "dumps", None))
            and callable(getattr(serializer, "loads", None))):
        raise TypeError(f"serializer must be 'pickle', 'json' or an object with dumps(obj) -> "
                        f"bytes and loads(bytes) -> obj, not {serializer!r}")
    name = serializer_name(serializer)
    if name in (PICKLE, JSON):
        raise ValueError(f"serializer {serializer!r} is named {name!r}, the name of ackqueue's "
                         f"own: give serializer={name!r}, or a name of its own to the object")
    return Codec(name, serializer)  # type: ignore[arg-type]


class _Absent:
    """A caller's serializer as a program without it knows it: by the name its queue record
    gives (the command line changing a queue moves items' bytes, and decodes none)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def dumps(self, obj: Any) -> bytes:
        raise TypeError(f"this program does not have serializer {self.name!r}")

    def loads(self, data: bytes) -> Any:
        raise ValueError(f"this program does not have serializer {self.name!r}")


def stored_serializer(name: str) -> str | Serializer:
    """The ``serializer=`` that opens a queue whose record names ``name``."""
    return name if name in (PICKLE, JSON) else _Absent(name)


def serializer_name(serializer: object) -> str:
    """The name a queue record stores for a caller's serializer: its ``name`` attribute if it
    is a str, else its qualified class name (a module's own name)."""
    name = getattr(serializer, "name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(serializer, type(json)):
        return serializer.__name__
    kind = type(serializer)
    return f"{kind.__module__}.{kind.__qualname__}"


def pickle_item(item: Any) -> bytes:
    try:
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise UnpicklableItemError(
            f"cannot store an item of type {type(item).__qualname__}: it cannot be pickled ({exc})"
        ) from exc
    if MAIN.encode() in data:  # cheap: almost no pickle holds the name at all
        _warn_of_main_classes(data)
    return data


def _warn_of_main_classes(data: bytes) -> None:
    for name in _main_classes(data):
        with _warned_lock:
            if name in _warned_main:
                continue
            _warned_main.add(name)
        log.warning(
            "an item put refers to class %s.%s, defined in the script being run: another "
            "program (a worker process, the ackqueue command line) cannot load it, and each of "
            "its gets there moves such an item to the dead letters. To fix it, %s",
            MAIN, name, _MAIN_HINT,
        )


def _main_classes(data: bytes) -> list[str]:
    """The names of ``__main__`` the pickle loads (classes, functions): the strings it pushes
    just before each ``STACK_GLOBAL`` (fetched from its memo after their first use), or the
    argument of each ``GLOBAL`` (protocols below 4)."""
    found: list[str] = []
    memo: dict[Any, str | None] = {}  # index -> the string stored there, if one
    strings: list[str] = []  # the strings on top of the stack, the last pushed last
    with contextlib.suppress(Exception):  # a pickle it cannot walk warns of nothing
        for opcode, arg, _ in pickletools.genops(data):
            op = opcode.name
            if op == "MEMOIZE":
                memo[len(memo)] = strings[-1] if strings else None
                continue
            if op in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = strings[-1] if strings else None
                continue
            if op == "STACK_GLOBAL" and strings[-2:-1] == [MAIN]:
                found.append(strings[-1])
            elif op == "GLOBAL" and isinstance(arg, str) and arg.startswith(MAIN + " "):
                found.append(arg.partition(" ")[2])
            pushed = memo.get(arg) if op in ("GET", "BINGET", "LONG_BINGET") else arg
            is_string = "UNICODE" in op or op in ("GET", "BINGET", "LONG_BINGET")
            strings = [*strings[-1:], pushed] if is_string and isinstance(pushed, str) else []
    return found


def unpickle_item(data: bytes, what: object) -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise ItemLoadError(f"cannot load {what}: {_describe(data, exc)}") from exc


class _NamingUnpickler(pickle.Unpickler):
    """Remembers the class it failed to find, to name it in the error."""

    missing: str | None = None

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception:
            self.missing = f"{module}.{name}"
            raise


class _Inert:
    """Whatever a record names, as :class:`_InertUnpickler` builds it: takes any arguments and
    state, runs no code of the class named."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Inert:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


# The packages whose classes ackqueue's records name: one that names a class they lack was
# changed (a user's item may name any module, which the check does not import).
_WRITTEN_BY_ACKQUEUE = ("ackqueue", "BTrees", "persistent", "zodbpickle", "ZODB")


class _InertUnpickler(pickle.Unpickler):
    """Reads a record's pickle through every opcode, loading no class and no reference: it
    fails only where the bytes themselves are not a pickle."""

    def find_class(self, module: str, name: str) -> Any:
        if not all(part.isidentifier() for part in f"{module}.{name}".split(".")):
            raise pickle.UnpicklingError(f"it names {module}.{name}, which is no class")
        if module.partition(".")[0] in _WRITTEN_BY_ACKQUEUE:  # importing them runs nothing new
            try:
                getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError) as exc:
                raise pickle.UnpicklingError(
                    f"it names {module}.{name}, which is no class ({exc})"
                ) from exc
        return _Inert

    def persistent_load(self, pid: Any) -> Any:
        # ZODB writes a reference as an oid (8 bytes), a tuple (oid, class) or a list whose
        # arguments hold the oid: a reference without one is damage the real load would meet.
        parts = pid[1] if isinstance(pid, list) and len(pid) == 2 else pid
        parts = parts if isinstance(parts, (tuple, list)) else (parts,)
        if not any(isinstance(p, bytes) and len(p) == 8 for p in parts):
            raise pickle.UnpicklingError(f"a reference names no record: {pid!r}")
        if isinstance(pid, tuple) and len(pid) == 2 and pid[1] is not _Inert:
            raise pickle.UnpicklingError(f"a reference's class is no class: {pid[1]!r}")
        return _Inert()


def record_damage(data: bytes) -> str | None:
    """What is wrong with a ZODB record's bytes, if they are not its two whole pickles (class,
    then state). One unpickler reads both: ZODB writes them with one pickler whose memo is
    cleared before the class only, so the state may refer to what the class pickle memoized
    (read apart, a sound BTree record failed with "Memo value not found")."""
    stream = io.BytesIO(data)
    unpickler = _InertUnpickler(stream)
    for part in ("class", "state"):
        try:
            unpickler.load()
        except Exception as exc:
            return f"its {part} does not unpickle ({type(exc).__name__}: {exc})"
    if stream.read(1):
        return "holds bytes after its state"
    return None


def pickle_damage(stream: IO[bytes]) -> str | None:
    """What is wrong with the bytes of the next pickle in ``stream``, read through every
    opcode without loading any class or running any code; None if they are a whole pickle."""
    try:
        _InertUnpickler(stream).load()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _describe(data: bytes, exc: Exception) -> str:
    """Name the missing class, which is what a user needs to fix it."""
    unpickler = _NamingUnpickler(io.BytesIO(data))
    with contextlib.suppress(Exception):
        unpickler.load()
    if unpickler.missing and unpickler.missing.startswith(MAIN + "."):
        name = unpickler.missing[len(MAIN) + 1:]
        return (
            f"class {unpickler.missing} cannot be found: it was defined in the script that put "
            f"the item, which this program is not ({type(exc).__name__}: {exc}). To fix it, "
            f"{_MAIN_HINT}; the items stored already name {unpickler.missing}: put them back from "
            f"the dead letters (ackqueue requeue PATH --dead, or q.requeue_dead()) and get them "
            f"in a program that first sets __main__.{name} = yourmodule.{name}"
        )
    if unpickler.missing:
        return f"class {unpickler.missing} cannot be found ({type(exc).__name__}: {exc})"
    broken = pickle_damage(io.BytesIO(data))
    if broken is not None:
        return f"its stored bytes are damaged, not a whole pickle ({broken})"
    return f"{type(exc).__name__}: {exc}"
