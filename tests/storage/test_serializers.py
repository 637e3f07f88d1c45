"""``serializer=``: pickle, JSON or a caller's object encodes the items; the queue record names
it; a file from elsewhere opens, is read and consumed without running any of its code.

The crafted files here are written the way an attacker would: through ZODB with its default
class factory, a record's state set to an object whose pickle calls ``os.system`` or builds a
class of ``tests/side_effects.py`` that writes a marker file. Nothing of it may run.
"""

from __future__ import annotations

import datetime
import enum
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
import ZODB
from conftest import REPO_ROOT, TESTS_DIR, child_env
from side_effects import (
    Call,
    craft,
    craft_metadata,
    metadata_runs_when_trusted,
    poison_first_entry,
    runs_when_trusted,
    targets,
)

import ackqueue


class Upper:
    """A caller's serializer with a declared name: str items, stored upper-cased."""

    name = "upper-v1"

    def dumps(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"only str, not {type(obj).__name__}")
        return obj.upper().encode()

    def loads(self, data: bytes) -> Any:
        if data.startswith(b"!"):
            raise ValueError("a record this serializer never wrote")
        return data.decode().lower()


class Nameless:
    """A caller's serializer without a name: its qualified class name is recorded."""

    def dumps(self, obj: Any) -> bytes:
        return repr(obj).encode()

    def loads(self, data: bytes) -> Any:
        return data.decode()


def test_json_items_come_back_as_json_carries_them_after_a_reopen(qpath) -> None:
    items = [{"url": "https://x", "depth": 2}, [1, 2.5, None, True], "text", 7]
    with ackqueue.AckQueue(qpath, serializer="json") as q:
        q.put_many(items)
        q.put((1, "tuple"))
    with ackqueue.AckQueue(qpath, serializer="json") as q, q.connect() as c:
        got = [c.get_nowait() for _ in range(5)]
        assert got == [*items, [1, "tuple"]]  # a tuple comes back a list
        c.ack_many(got)
    with open(qpath, "rb") as f:
        assert b'{"url":"https://x","depth":2}' in f.read()  # stored as JSON text


@pytest.mark.parametrize("serializer, stored", [
    ("json", "'json'"), (Upper(), "'upper-v1'"),
    (Nameless(), f"'{__name__}.Nameless'"),
])
def test_opening_with_another_serializer_names_both(qpath, serializer, stored) -> None:
    with ackqueue.AckQueue(qpath, serializer=serializer) as q:
        q.put("x")
    with pytest.raises(ackqueue.SerializerMismatchError) as raised:
        ackqueue.AckQueue(qpath)
    assert f"serializer {stored}, not 'pickle'" in str(raised.value)
    assert isinstance(raised.value, ValueError)
    with ackqueue.AckQueue(qpath, serializer=serializer) as q:
        assert q.qsize() == 1


def test_a_serializer_object_may_not_take_the_name_of_a_built_in_one(qpath) -> None:
    with pytest.raises(ValueError, match="give serializer='json'"):
        ackqueue.AckQueue(qpath, serializer=json)  # the module, whose dumps gives str


def test_a_serializer_whose_dumps_gives_str_is_a_type_error_at_put(qpath) -> None:
    class Text(Nameless):
        def dumps(self, obj: Any) -> Any:
            return repr(obj)

    with ackqueue.AckQueue(qpath, serializer=Text()) as q:
        with pytest.raises(TypeError, match="returned str, not bytes"):
            q.put({"a": 1})
        assert q.qsize() == 0


def test_each_named_queue_of_a_file_has_its_own_serializer(qpath) -> None:
    with ackqueue.AckQueue(qpath, name="objects") as objects, \
            ackqueue.AckQueue(qpath, name="data", serializer="json") as data:
        objects.put({1, 2})
        data.put({"k": [1]})
    with ackqueue.AckQueue(qpath, name="data", serializer="json") as data, \
            ackqueue.AckQueue(qpath, name="objects") as objects:
        assert (objects.get_nowait(), data.get_nowait()) == ({1, 2}, {"k": [1]})


@pytest.mark.parametrize("serializer, item", [
    ("json", object()), ("json", float("nan")), ("json", {1: {"set": {1}}}), (Upper(), 5),
    ("pickle", lambda: None),
])
def test_an_item_the_serializer_cannot_encode_is_a_type_error_and_nothing_is_stored(
    qpath, serializer, item
) -> None:
    with ackqueue.AckQueue(qpath, serializer=serializer) as q:
        with pytest.raises(TypeError) as raised:
            q.put(item)
        assert isinstance(raised.value, ackqueue.UnpicklableItemError)
        with pytest.raises(TypeError):
            q.put_many(["fine", item] if serializer != "pickle" else [1, item])
        assert q.qsize() == 0 and q.unfinished_tasks == 0
    with ackqueue.AckQueue(qpath, serializer=serializer) as q:
        assert q.qsize() == 0


def test_bytes_the_serializer_cannot_decode_go_to_the_dead_letters_kept(qpath) -> None:
    class Writes(Upper):
        def dumps(self, obj: Any) -> bytes:
            return obj.encode() if obj.startswith("!") else super().dumps(obj)

    with ackqueue.AckQueue(qpath, serializer=Writes()) as q:
        q.put_many(["!garbled", "fine"])
    with ackqueue.AckQueue(qpath, serializer=Upper()) as q, q.connect() as c:
        with pytest.raises(ackqueue.ItemLoadError, match="serializer 'upper-v1' cannot decode"):
            c.get_nowait()
        assert c.get_nowait() == "fine"
        [letter] = q.dead_letters()
        assert isinstance(letter.item, ackqueue.UnloadableItem)
        assert letter.item.data == b"!garbled"  # the bytes are kept


@pytest.mark.parametrize("bad, message", [
    ("yaml", "serializer must be 'pickle', 'json'"), (object(), "dumps"), (None, "dumps"),
])
def test_a_bad_serializer_option_is_a_clear_error_before_anything_opens(qpath, bad, message):
    with pytest.raises((TypeError, ValueError), match=message):
        ackqueue.AckQueue(qpath, serializer=bad)
    assert not os.path.exists(qpath)


def test_db_with_json_needs_the_restricted_class_factory(tmp_path) -> None:
    plain = ZODB.DB(None)
    try:
        with pytest.raises(ValueError, match="class_factory=ackqueue.restricted_class_factory"):
            ackqueue.AckQueue(db=plain, serializer="json")
        with ackqueue.AckQueue(db=plain) as q:  # pickle: the caller's database as it is
            q.put(1)
    finally:
        plain.close()
    safe = ZODB.DB(None, class_factory=ackqueue.restricted_class_factory)
    try:
        with ackqueue.AckQueue(db=safe, serializer="json") as q:
            q.put({"a": 1})
            assert q.get_nowait() == {"a": 1}
    finally:
        safe.close()


# -- crafted files --------------------------------------------------------------------------


@pytest.fixture(params=["os.system", "a test module's function", "a test module's class"])
def crafted(request, tmp_path) -> tuple[str, str]:
    """A json queue file whose first entry's record calls a global with a side effect when
    it is loaded by an unrestricted loader, and the marker file that side effect writes."""
    path, marker = str(tmp_path / "crafted.fs"), str(tmp_path / "RAN")
    with ackqueue.AckQueue(path, serializer="json") as q:
        q.put_many(["first", "second"])
    poison_first_entry(path, targets(marker)[request.param])
    assert runs_when_trusted(path, marker)
    return path, marker


def test_a_crafted_entry_runs_nothing_and_goes_to_the_dead_letters(crafted, caplog) -> None:
    path, marker = crafted
    with ackqueue.AckQueue(path, serializer="json") as q, q.connect() as c:
        with pytest.raises(ackqueue.ItemLoadError) as raised:
            c.get_nowait()
        message = str(raised.value)
        assert "of queue 'default': record 0x" in message
        assert "not a persistent class of ackqueue" in message
        assert "dead letters" in message
        assert c.get_nowait() == "second"  # consumed past it
        [letter] = q.dead_letters()
        assert isinstance(letter.item, ackqueue.UnloadableItem)
        assert letter.item.data  # the record's bytes are kept
    assert not os.path.exists(marker)
    # The error says it once: no traceback of ZODB's own about the same record.
    assert [r for r in caplog.records if r.name == "ZODB.Connection"] == []


def test_a_crafted_queue_record_is_a_clear_error_at_open_and_runs_nothing(tmp_path) -> None:
    path, marker = str(tmp_path / "crafted.fs"), str(tmp_path / "RAN")
    with ackqueue.AckQueue(path, serializer="json") as q:
        q.put("x")
    craft(path, lambda queues: setattr(queues["default"], "paused", Call(os.system,
                                                                         f"touch {marker}")))
    with pytest.raises(ackqueue.UnsafeRecordError) as raised:
        ackqueue.AckQueue(path, serializer="json")
    message = str(raised.value)
    assert "record 0x01 (ackqueue.records.QueueRecord)" in message and "system" in message
    assert not os.path.exists(marker)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = child_env(PYTHONPATH=os.pathsep.join([REPO_ROOT, TESTS_DIR]))
    return subprocess.run([sys.executable, "-m", "ackqueue", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_command_line_reads_a_crafted_file_without_running_it(crafted) -> None:
    path, marker = crafted
    stats = run_cli("stats", path, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["queues"][0]["stored"] == 2
    peeked = run_cli("peek", path, "--json")
    assert peeked.returncode == 0, peeked.stderr
    first, second = json.loads(peeked.stdout)
    assert first["item_is_repr"] and "not a persistent class of ackqueue" in first["item"]
    assert (second["item"], second["item_is_repr"]) == ("second", False)
    assert run_cli("dead", path, "--json").returncode == 0
    assert not os.path.exists(marker)


# Each commit records its change of the queue's count in its transaction metadata, which a
# reader after an unclean stop adds up (storage/counts.py): ZODB loads that metadata with its
# unrestricted loader.


@pytest.fixture(params=["os.system", "a test module's function", "a test module's class"])
def crafted_metadata(request, tmp_path) -> tuple[str, str]:
    """A json queue file as a kill -9 of its writer leaves it (5 items, their count in the
    commits' metadata), then a commit whose metadata calls a global with a side effect when
    ZODB loads it, and the marker file that side effect writes."""
    path, marker = str(tmp_path / "crafted.fs"), str(tmp_path / "RAN")
    q = ackqueue.AckQueue(str(tmp_path / "writer.fs"), serializer="json")
    try:
        q.put_many(["first", "second", "third"])
        q.put("fourth")
        q.put("fifth")
        shutil.copyfile(str(tmp_path / "writer.fs"), path)  # what kill -9 would leave now
    finally:
        q.close()
    craft_metadata(path, targets(marker)[request.param])
    assert metadata_runs_when_trusted(path, marker)
    return path, marker


def test_crafted_metadata_runs_nothing_when_the_count_is_read_and_the_entries_count_instead(
    crafted_metadata, caplog
) -> None:
    path, marker = crafted_metadata
    with ackqueue.AckQueue(path, serializer="json") as q, q.connect() as c:
        assert q.qsize() == 5
        assert [c.get_nowait() for _ in range(5)] == [
            "first", "second", "third", "fourth", "fifth"
        ]
    assert not os.path.exists(marker)
    said = [r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records]
    [message] = [text for text in said if "the metadata of transaction" in text]
    assert f"{path}: the metadata of transaction " in message
    assert "which ackqueue never writes there" in message
    assert "nothing of it was loaded or run" in message


def test_the_command_line_counts_a_file_with_crafted_metadata_without_running_it(
    crafted_metadata,
) -> None:
    path, marker = crafted_metadata
    stats = run_cli("stats", path, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["queues"][0]["stored"] == 5
    assert "the metadata of transaction" in stats.stderr
    assert not os.path.exists(marker)


def test_peek_and_dead_show_json_items_as_json(qpath) -> None:
    with ackqueue.AckQueue(qpath, serializer="json", max_attempts=1) as q, q.connect() as c:
        q.put_many([{"a": [1, 2]}, {"b": None}])
        c.reject(c.get_nowait(), reason="bad")
    peeked = run_cli("peek", qpath, "--json")
    assert peeked.returncode == 0, peeked.stderr
    assert [(p["item"], p["item_is_repr"]) for p in json.loads(peeked.stdout)] == [
        ({"b": None}, False)
    ]
    dead = run_cli("dead", qpath, "--json")
    assert [(d["item"], d["reason"]) for d in json.loads(dead.stdout)] == [({"a": [1, 2]}, "bad")]
    text = run_cli("peek", qpath)
    assert "{'b': None}" in text.stdout
    stats = run_cli("stats", qpath, "--json")
    assert json.loads(stats.stdout)["queues"][0]["serializer"] == "json"
    assert "queue 'default' (fifo, serializer 'json'):" in run_cli("stats", qpath).stdout


def test_a_pickle_file_loads_as_zodb_does_priority_keys_of_any_class(qpath) -> None:
    """A PriorityAckQueue keys its entries by the items: with pickle (the file is code anyway)
    its tree may name any class, and loads once every open queue of the file uses pickle."""
    days = [datetime.date(2026, 11, d) for d in (3, 1, 2)]
    with ackqueue.PriorityAckQueue(qpath) as q:
        q.put_many(days)
    with ackqueue.PriorityAckQueue(qpath) as q:
        assert [q.get_nowait() for _ in days] == sorted(days)


def test_beside_a_json_queue_a_file_loads_only_ackqueues_classes(qpath, tmp_path) -> None:
    """While a queue with another serializer is open on a database, every record of it loads
    restricted: a pickle queue beside it cannot make that queue's process run code."""
    marker = str(tmp_path / "RAN")
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        q.put_many(["first", "second"])
    with ackqueue.AckQueue(qpath, name="data", serializer="json") as q:
        q.put({"a": 1})
    poison_first_entry(qpath, targets(marker)["a test module's function"], name="jobs")
    with ackqueue.AckQueue(qpath, name="data", serializer="json") as data, \
            ackqueue.AckQueue(qpath, name="jobs") as jobs:
        with pytest.raises(ackqueue.ItemLoadError, match="side_effects.touch"):
            jobs.get_nowait()
        assert (jobs.get_nowait(), data.get_nowait()) == ("second", {"a": 1})
    assert not os.path.exists(marker)


def test_once_the_json_queue_beside_them_closes_pickle_queues_load_any_class_again(qpath) -> None:
    """The restriction lasts while a queue with another serializer is open, not after: with
    only pickle queues left open, a priority queue's tree of dates loads (the closed queue's
    serializer was left counted before, and kept the file restricted for good)."""
    days = [datetime.date(2026, 11, d) for d in (3, 1, 2)]
    with ackqueue.PriorityAckQueue(qpath, name="days") as q:
        q.put_many(days)
    with ackqueue.AckQueue(qpath, name="jobs") as jobs:  # keeps the file open throughout
        with ackqueue.AckQueue(qpath, name="data", serializer="json") as data:
            data.put({"a": 1})
        with ackqueue.PriorityAckQueue(qpath, name="days") as q:
            assert [q.get_nowait() for _ in days] == sorted(days)
        jobs.put("still open")


@pytest.mark.parametrize("serializer", ["json", Upper()])
def test_the_command_line_changes_a_queue_with_the_serializer_its_record_names(
    qpath, serializer
) -> None:
    with ackqueue.AckQueue(qpath, serializer=serializer) as q, q.connect() as c:
        q.put_many(["one", "two"])
        c.reject(c.get_nowait(), reason="later")
    requeued = run_cli("requeue", qpath, "--dead", "--yes")
    assert requeued.returncode == 0, requeued.stderr
    packed = run_cli("pack", qpath)
    assert packed.returncode == 0, packed.stderr
    with ackqueue.AckQueue(qpath, serializer=serializer) as q, q.connect() as c:
        assert sorted([c.get_nowait(), c.get_nowait()]) == ["one", "two"]
        assert q.dead_count() == 0


def test_an_async_queue_takes_the_serializer_option(qpath) -> None:
    import asyncio

    async def main() -> Any:
        async with ackqueue.AsyncAckQueue(qpath, serializer="json") as q:
            await q.put({"a": (1, 2)})
            return await q.get()

    assert asyncio.run(main()) == {"a": [1, 2]}
    with pytest.raises(ackqueue.SerializerMismatchError):
        ackqueue.AckQueue(qpath)


def test_a_new_record_names_its_format_and_serializer(qpath) -> None:
    with ackqueue.AckQueue(qpath, serializer=Upper()) as q:
        stored = q._book.read(lambda record: (record.format_version, record.serializer))
    assert stored == (3, "upper-v1")


def test_a_record_of_a_newer_format_is_refused_not_misread(qpath) -> None:
    with ackqueue.AckQueue(qpath, serializer="json") as q:
        q.put("x")
    craft(qpath, lambda queues: setattr(queues["default"], "format_version", 99))
    with pytest.raises(ackqueue.NotAQueueFileError, match="format 99 by a newer ackqueue"):
        ackqueue.AckQueue(qpath, serializer="json")


def test_a_crafted_entry_of_a_grouped_queue_opens_and_is_consumed_past(tmp_path) -> None:
    """Opening a grouped queue reads every grouped entry: a crafted one is passed over there
    and dead-lettered by the get that reaches it."""
    path, marker = str(tmp_path / "crafted.fs"), str(tmp_path / "RAN")
    with ackqueue.AckQueue(path, serializer="json") as q:
        q.put("first", group="g")
        q.put("second", group="g")
    poison_first_entry(path, targets(marker)["os.system"])
    with ackqueue.AckQueue(path, serializer="json") as q, q.connect() as c:
        assert q.remove_where(lambda item: item == "nothing") == 0  # scans every entry
        with pytest.raises(ackqueue.ItemLoadError, match="record 0x"):
            c.get_nowait()
        assert c.get_nowait() == "second"
        assert q.dead_count() == 1
    assert not os.path.exists(marker)


def test_a_json_priority_queue_keys_by_the_decoded_item_and_reopens(qpath) -> None:
    """The tree of a PriorityAckQueue holds the items as keys: with JSON, the item as it
    decodes, so an int subclass (an IntEnum) does not put its class in the file."""
    level = enum.IntEnum("Level", {"LOW": 3, "HIGH": 1})
    with ackqueue.PriorityAckQueue(qpath, serializer="json") as q:
        q.put_many([level.LOW, 2, level.HIGH])
    with ackqueue.PriorityAckQueue(qpath, serializer="json") as q:
        got = [q.get_nowait() for _ in range(2)]
        assert got == [1, 2] and [type(g) for g in got] == [int, int]


def test_a_priority_item_a_serializer_decodes_to_an_object_is_refused_at_put(qpath) -> None:
    class Dated(Nameless):
        def loads(self, data: bytes) -> Any:
            return datetime.date(2026, 11, int(data))

        def dumps(self, obj: Any) -> bytes:
            return str(obj.day).encode()

    with ackqueue.PriorityAckQueue(qpath, serializer=Dated()) as q:
        with pytest.raises(TypeError, match="orders by the item as it decodes"):
            q.put(datetime.date(2026, 11, 5))
        assert q.qsize() == 0


class Widget:
    """A class of this module: items of it load wherever the tests' modules import."""


def test_an_error_at_put_names_the_items_type_and_the_serializers_words(qpath) -> None:
    """What a user needs to fix a bad put: which item, and why (mutation testing found no
    test that read these messages)."""

    class Stringly(Nameless):
        def dumps(self, obj: Any) -> Any:
            return repr(obj)

    encodes = r"of type Widget: serializer 'upper-v1' cannot encode it \(TypeError: only str"
    with ackqueue.AckQueue(qpath, serializer=Upper()) as q, pytest.raises(TypeError,
                                                                          match=encodes):
        q.put(Widget())
    returns = r"item of type Widget: serializer .*Stringly' returned str, not bytes"
    with ackqueue.AckQueue(qpath, name="text", serializer=Stringly()) as q, pytest.raises(
        TypeError, match=returns
    ):
        q.put(Widget())
    pickles = "an item of type function: it cannot be pickled"
    with ackqueue.AckQueue(qpath, name="pickled") as q, pytest.raises(TypeError, match=pickles):
        q.put(lambda: None)


def test_an_error_at_get_names_the_serializers_words(qpath) -> None:
    class Writes(Upper):
        def dumps(self, obj: Any) -> bytes:
            return obj.encode() if obj.startswith("!") else super().dumps(obj)

    with ackqueue.AckQueue(qpath, serializer=Writes()) as q:
        q.put("!garbled")
    decodes = r"cannot decode its 8 bytes \(ValueError: a record this"
    with ackqueue.AckQueue(qpath, serializer=Upper()) as q, q.connect() as c, pytest.raises(
        ackqueue.ItemLoadError, match=decodes
    ):
        c.get_nowait()
    with ackqueue.PriorityAckQueue(qpath, name="p", serializer=Writes()) as q, pytest.raises(
        ackqueue.ItemLoadError, match=r"^cannot load the item: serializer"
    ):
        q.put("!garbled")  # the item as the tree keys it: decoded from its bytes


@pytest.mark.parametrize("missing, found", [
    (("tests_gone_module", "Thing"), "ModuleNotFoundError"),
    ((__name__, "NoSuchClass"), "AttributeError"),
    (("__main__", "NoSuchClass"), "AttributeError"),
])
def test_an_item_whose_class_is_gone_names_that_class(qpath, missing, found) -> None:
    """A stored pickle naming a class that cannot be found: the message names it (not a class
    the same pickle found first) and the error Python gave."""
    module, name = missing
    # (Widget(), missing()) as protocol 2 writes it: this module's Widget, then the missing
    # class (a crafted record: no class of that name exists to pickle).
    crafted = (b"\x80\x02c" + Widget.__module__.encode() + b"\nWidget\n)\x81"
               + b"c" + module.encode() + b"\n" + name.encode() + b"\n)\x81\x86.")
    with pytest.raises(ackqueue.ItemLoadError) as raised:
        ackqueue.storage.items.unpickle_item(crafted, "the item")
    message = str(raised.value)
    if module == "__main__":  # with what to do about it
        assert f"class __main__.{name} cannot be found: it was defined in the script" in message
        assert f"which this program is not ({found}: " in message, message
    else:
        assert f"class {module}.{name} cannot be found ({found}: " in message, message


def test_damaged_pickle_bytes_are_named_damaged(qpath) -> None:
    import pickle

    data = pickle.dumps({"a": [1, 2, 3]}, protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(ackqueue.ItemLoadError, match="its stored bytes are damaged"):
        ackqueue.storage.items.unpickle_item(data[:-4], "the item")


def test_a_serializer_needs_both_dumps_and_loads(qpath) -> None:
    class OnlyDumps:
        def dumps(self, obj: Any) -> bytes:
            return b""

    class OnlyLoads:
        def loads(self, data: bytes) -> Any:
            return data

    for half in (OnlyDumps(), OnlyLoads()):
        with pytest.raises(TypeError, match="an object with dumps"):
            ackqueue.AckQueue(qpath, serializer=half)
    assert not os.path.exists(qpath)


def test_a_serializer_named_by_an_empty_or_non_str_name_is_named_by_its_class(qpath) -> None:
    for odd in ("", 42):
        class Odd(Nameless):
            name = odd

        with ackqueue.AckQueue(qpath, name=f"q{odd!r}", serializer=Odd()) as q:
            assert q._book.record.serializer.endswith("Odd"), q._book.record.serializer


def test_a_priority_item_that_decodes_to_a_list_holding_an_object_is_refused(qpath) -> None:
    class Listing(Nameless):
        def loads(self, data: bytes) -> Any:
            return [1, {2}]  # a set inside: names a class in the tree

        def dumps(self, obj: Any) -> bytes:
            return b"x"

    with ackqueue.PriorityAckQueue(qpath, serializer=Listing()) as q:
        with pytest.raises(TypeError, match=r"orders by the item as it decodes.*not list \[1"):
            q.put([1, {2}])
        assert q.qsize() == 0
