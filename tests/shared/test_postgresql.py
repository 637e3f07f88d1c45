"""``AckQueue("postgresql://...")``: shared mode on RelStorage over a real PostgreSQL server on
127.0.0.1 (``postgres_server.py`` starts one for the session; each test has a database of its
own), with real processes and real SIGKILLs: a put in one process wakes a get blocked in
another, a killed holder's item comes back once its session lease lapses, a kill campaign loses
nothing confirmed, and an open that cannot reach the server says where it tried and what to do.
"""

from __future__ import annotations

import getpass
import os
import signal
import sys
import time

import pytest
import shared_campaign
from conftest import REPO_ROOT, spawn_child
from postgres_server import PostgresServer, free_port

import ackqueue

LEASE = 2.0
KILLS = int(os.environ.get("ACKQUEUE_POSTGRESQL_KILLS", "6"))

HOLDER = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
c = q.connect()
print(c.get(timeout=30), flush=True)
sys.stdin.readline()  # hold it until killed
"""

PUTTER = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
print("open", flush=True)
sys.stdin.readline()
q.put(sys.argv[3])
q.close()
"""


def test_a_postgresql_uri_opens_a_shared_queue_that_both_spellings_reach(
    postgres_uri: str,
) -> None:
    with ackqueue.AckQueue(postgres_uri) as q:
        assert q.shared
        q.put({"url": "http://example.org/"})
    other = postgres_uri.replace("postgresql://", "postgres://", 1)
    with ackqueue.AckQueue(other) as q, q.connect() as c:
        item = c.get(timeout=10)
        assert item == {"url": "http://example.org/"}
        c.ack(item)
        assert q.qsize() == 0


def test_a_put_in_another_process_wakes_a_blocked_get(postgres_uri: str) -> None:
    with ackqueue.AckQueue(postgres_uri, session_timeout=LEASE) as q:
        putter = spawn_child(PUTTER, postgres_uri, str(LEASE), "from the other process")
        try:
            assert putter.stdout is not None and putter.stdin is not None
            assert putter.stdout.readline().strip() == "open"
            with q.connect() as c:
                putter.stdin.write("go\n")
                putter.stdin.flush()
                item = c.get(timeout=30)
                assert item == "from the other process"
                c.ack(item)
            assert putter.wait(timeout=30) == 0
        finally:
            putter.kill()
            putter.wait()


def test_the_item_of_a_sigkilled_holder_comes_back_after_its_lease(postgres_uri: str) -> None:
    with ackqueue.AckQueue(postgres_uri, session_timeout=LEASE) as q:
        q.put("job")
        holder = spawn_child(HOLDER, postgres_uri, str(LEASE))
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "job"
            with q.connect() as c:
                with pytest.raises(ackqueue.Empty):
                    c.get(timeout=0.2)  # held by the live holder
                holder.send_signal(signal.SIGKILL)
                holder.wait(timeout=30)
                killed = time.monotonic()
                item = c.get(timeout=30)
                came_back = time.monotonic() - killed
                assert item == "job"
                assert c.delivery(item).attempts == 2
                c.ack(item)
        finally:
            holder.kill()
            holder.wait()
    assert came_back >= LEASE / 2, "given back before the lease of a silent session lapsed"


@pytest.mark.campaign
def test_random_kills_of_clients_lose_nothing_confirmed(postgres_uri: str, tmp_path) -> None:
    """The campaign of ``shared_campaign.py`` on PostgreSQL: clients SIGKILLed in puts, gets,
    acks and transactions (the server is PostgreSQL's to keep; it is not killed here)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    result = shared_campaign.run(postgres_uri, str(logs), KILLS, REPO_ROOT, seed=13,
                                 server_share=0.0)
    assert result.problems == []
    assert result.kills == KILLS and result.starter_killed
    assert result.confirmed_puts > 0 and result.confirmed_acks > 0


def test_no_server_at_the_address_says_where_it_tried_and_what_to_do() -> None:
    port = free_port()  # nothing listens there
    uri = f"postgresql://queue:s3cret@127.0.0.1:{port}/jobs"
    with pytest.raises(ackqueue.StorageError) as caught:
        ackqueue.AckQueue(uri)
    message = str(caught.value)
    assert message.startswith(
        f"cannot open the queue database postgresql://queue:***@127.0.0.1:{port}/jobs: tried "
        f"the PostgreSQL server 127.0.0.1 port {port}, database 'jobs', user 'queue': "
    ), message
    assert message.endswith(
        "; start the server, or fix the host and port in the URI; a server on another host "
        "must listen on that address (listen_addresses) and let this host in (pg_hba.conf)"
    ), message
    assert "s3cret" not in message


def test_a_missing_database_says_to_create_it(postgres_server: PostgresServer) -> None:
    with pytest.raises(ackqueue.StorageError, match="createdb") as caught:
        ackqueue.AckQueue(postgres_server.uri("no_such_database"))
    assert "'no_such_database'" in str(caught.value)
    assert str(caught.value).endswith(
        "; create the database first (createdb NAME, or CREATE DATABASE as its owner)"
    )


def test_an_unknown_user_is_told_to_check_the_user_and_password(postgres_uri: str) -> None:
    uri = postgres_uri.replace("://postgres@", "://nobody@")
    with pytest.raises(ackqueue.StorageError) as caught:
        ackqueue.AckQueue(uri)
    message = str(caught.value)
    assert "user 'nobody'" in message and 'role "nobody" does not exist' in message, message
    # It mentions the connection too: the user is the first thing to check, not the server.
    assert message.endswith(
        "; check the user and password in the URI, and the server's pg_hba.conf"
    ), message


def test_a_database_made_with_other_options_says_to_open_it_with_them(postgres_uri: str) -> None:
    with ackqueue.AckQueue(postgres_uri) as q:  # keep_history=false, the queue's default
        q.put("kept")
    with pytest.raises(ackqueue.StorageError) as caught:
        ackqueue.AckQueue(postgres_uri + "?keep_history=true")
    assert str(caught.value).endswith(
        "; the database holds RelStorage tables made with other options: open it with the "
        "keep_history= it was created with (the queue's default is false), or give the queue "
        "a database of its own"
    ), caught.value
    with ackqueue.AckQueue(postgres_uri) as q:
        assert q.get_nowait() == "kept"


def test_an_unknown_option_is_named_and_nothing_is_created(postgres_uri: str) -> None:
    with pytest.raises(ackqueue.StorageError, match="unknown option") as caught:
        ackqueue.AckQueue(postgres_uri + "?no_such_option=1")
    assert str(caught.value).endswith(
        "; fix or remove the unknown option in the URI's query (after the ?)"
    ), caught.value
    import psycopg2

    dbname = postgres_uri.rsplit("/", 1)[1]
    port = int(postgres_uri.rsplit(":", 1)[1].split("/")[0])
    conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname=dbname)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            assert cur.fetchone() == (0,)
    finally:
        conn.close()


def test_a_port_that_is_not_a_number_is_a_clear_error() -> None:
    with pytest.raises(ackqueue.StorageError, match="the port is not a number") as caught:
        ackqueue.AckQueue("postgresql://queue:s3cret@127.0.0.1:x/jobs")
    assert str(caught.value) == (
        "postgresql://queue:***@127.0.0.1:x/jobs: the port is not a number; write "
        "postgresql://USER@HOST:PORT/DBNAME"
    )


def test_the_queue_defaults_apply_only_where_the_uri_sets_nothing() -> None:
    from urllib.parse import parse_qs, urlsplit

    from ackqueue.storage import postgresql as postgres

    plain = urlsplit(postgres.for_zodburi("postgresql://queue:p%40ss@db.example.org/jobs"))
    assert (plain.scheme, plain.hostname, plain.port, plain.path) == (
        "postgres", "db.example.org", 5432, "/jobs")
    assert (plain.username, plain.password) == ("queue", "p%40ss")
    assert parse_qs(plain.query) == {"keep_history": ["false"], "connect_timeout": ["10"]}
    given = urlsplit(postgres.for_zodburi(
        "postgres://queue@db:6543/jobs?keep_history=true&connect_timeout=3"))
    assert parse_qs(given.query) == {"keep_history": ["true"], "connect_timeout": ["3"]}
    assert postgres.shown("postgresql://queue:s3cret@db/jobs") == "postgresql://queue:***@db/jobs"
    # An option given empty is given: passed on as it is, no default in its place.
    blank = urlsplit(postgres.for_zodburi("postgresql://queue@db/jobs?connect_timeout="))
    assert parse_qs(blank.query, keep_blank_values=True) == {
        "connect_timeout": [""], "keep_history": ["false"]}
    # A user or password holding a "/" stays escaped (else the rest reads as the path), and
    # what zodburi reads has no fragment.
    slashed = urlsplit(postgres.for_zodburi("postgresql://qu%2Feue:p%2Fss@db/jobs"))
    assert (slashed.username, slashed.password, slashed.hostname, slashed.path) == (
        "qu%2Feue", "p%2Fss", "db", "/jobs")
    assert slashed.fragment == ""
    # Neither user nor host: libpq's defaults, this process's user on localhost.
    bare = urlsplit(postgres.for_zodburi("postgresql:///jobs"))
    assert (bare.username, bare.hostname, bare.port) == (getpass.getuser(), "localhost", 5432)


def test_the_command_line_never_prints_the_uris_password(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str],
) -> None:
    from ackqueue.cli.commands import main

    uri = postgres_server.new_database().replace("postgres@", "postgres:s3cret@", 1)
    with ackqueue.AckQueue(uri) as q:
        q.put("job", key="k", group="g")
    for argv in (["stats"], ["stats", "--json"], ["top", "--once"], ["top", "--once", "--json"],
                 ["peek"], ["groups"], ["pack"], ["stats", "--name", "nope"]):
        main([argv[0], uri, *argv[1:]])
        out, err = capsys.readouterr()
        assert out + err and "s3cret" not in out + err, argv
    main(["stats", uri])
    assert "postgres:***@127.0.0.1" in capsys.readouterr().out


def test_no_message_or_repr_of_an_open_queue_shows_the_uris_password(
    postgres_server: PostgresServer,
) -> None:
    # The test server trusts 127.0.0.1, so it accepts any password: the queue opens.
    uri = postgres_server.new_database().replace("postgres@", "postgres:s3cret@", 1)
    with ackqueue.AckQueue(uri, name="jobs") as q:
        assert "postgres:***@" in repr(q) and "s3cret" not in repr(q)
        with pytest.raises(ackqueue.StorageError, match="already open") as caught:
            ackqueue.AckQueue(uri, name="jobs")
        assert "postgres:***@" in str(caught.value) and "s3cret" not in str(caught.value)


def test_without_zodburi_a_postgresql_uri_names_the_postgresql_extra() -> None:
    # A plain `pip install .` has no zodburi; the import is made to fail as it would there.
    code = ("import sys; sys.modules['zodburi'] = None\n"
            "import ackqueue\n"
            "try:\n"
            "    ackqueue.AckQueue('postgresql://queue:s3cret@127.0.0.1:1/jobs')\n"
            "except ackqueue.StorageError as exc:\n"
            "    print(exc)\n")
    child = spawn_child(code)
    out, _ = child.communicate(timeout=60)
    assert "pip install '.[postgresql]'" in out and "s3cret" not in out, out


def test_without_zodburi_the_message_names_the_uri_and_the_postgresql_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "zodburi", None)  # as a plain `pip install .` has it
    with pytest.raises(ackqueue.StorageError) as caught:
        ackqueue.AckQueue("postgresql://queue:s3cret@127.0.0.1:1/jobs")
    assert str(caught.value) == (
        "opening postgresql://queue:***@127.0.0.1:1/jobs needs the zodburi package, which "
        "ackqueue requires: this environment lacks it (pip install zodburi relstorage "
        "psycopg2-binary, or pip install '.[postgresql]' in a checkout of ackqueue)"
    )


def test_a_drivers_message_quoting_the_password_is_scrubbed() -> None:
    from ackqueue.storage import postgresql as postgres

    uri = "postgresql://queue:p%40ss@127.0.0.1:1/jobs"
    error = postgres.open_error(uri, RuntimeError("bad dsn 'password=p@ss host=127.0.0.1'"))
    assert "p@ss" not in str(error) and "p%40ss" not in str(error)
    assert "password=***" in str(error)


def test_a_database_that_refuses_connections_raises_storage_error_and_the_queue_recovers(
    postgres_server: PostgresServer, postgres_uri: str
) -> None:
    # RelStorage lets its driver's errors through (psycopg2's OperationalError): the queue
    # says StorageError naming the database, its background threads ride the outage out (a
    # thread's death fails the test), and it works again afterwards.
    q = ackqueue.AckQueue(postgres_uri, session_timeout=LEASE)
    try:
        q.put("before")
        postgres_server.stop()
        try:
            with pytest.raises(ackqueue.StorageError, match="127.0.0.1"):
                q.put("during")  # a commit needs the server
            # A get needs a commit to take an item away; reads may be answered from the
            # snapshot and cache a client has. Else: StorageError, naming the database.
            try:
                q.get(timeout=1)
                pytest.fail("an item was taken away while the database was down")
            except ackqueue.Empty:
                pass  # its snapshot showed nothing ready
            except ackqueue.StorageError as exc:
                assert "127.0.0.1" in str(exc)
            for read in (q.qsize, q.dead_letters):
                try:
                    read()
                except ackqueue.StorageError as exc:
                    assert "127.0.0.1" in str(exc)
            time.sleep(LEASE)  # the session, sweeper and watcher threads meet the outage
        finally:
            postgres_server.start()
        q.put("after")
        with q.connect() as c:
            got = c.get_many(10, timeout=10)
            c.ack_many(got)
        assert sorted(got) == ["after", "before"]  # "during" raised: never stored
    finally:
        q.close()


INSTALL = ("install RelStorage and the driver: pip install relstorage psycopg2-binary (from a "
           "checkout of ackqueue: pip install '.[postgresql]')")
UNREACHABLE = "start the server, or fix the host and port in the URI"


@pytest.mark.parametrize(("error", "advice"), [
    (ImportError("No module named 'psycopg2'"), INSTALL),
    (RuntimeError("Driver 'psycopg2' is not available. Reason=No module named 'psycopg2'"),
     INSTALL),
    (RuntimeError('FATAL:  password authentication failed for user "queue"'),
     "check the user and password in the URI"),
    (RuntimeError('invalid dsn: invalid connection option "no_such_option"'),
     "fix or remove the unknown option"),
    (RuntimeError('relation "object_state" does not exist'),
     "the database holds RelStorage tables made with other options"),
    (RuntimeError("timeout expired"), UNREACHABLE),
    (RuntimeError('could not translate host name "db.example.org" to address: Name or service '
                  "not known"), UNREACHABLE),
    (RuntimeError("server closed the connection unexpectedly"), UNREACHABLE),
    # "unavailable" is no missing driver.
    (RuntimeError('connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed: '
                  "Resource temporarily unavailable"), UNREACHABLE),
    (RuntimeError("out of shared memory"),
     "see the server's log for why, or give the queue a database of its own"),
])
def test_each_kind_of_failure_gets_its_own_advice(error: BaseException, advice: str) -> None:
    """The drivers' and RelStorage's messages, as each kind of failure words them (the kinds
    a real server cannot be made to give here: no driver, a wrong password under ``trust``, a
    host that does not resolve, a timeout, the server's own trouble)."""
    from ackqueue.storage import postgresql as postgres

    uri = "postgresql://queue:s3cret@db.example.org/jobs"
    message = str(postgres.open_error(uri, error))
    detail = " ".join(str(error).split())  # on one line
    said = (
        "cannot open the queue database postgresql://queue:***@db.example.org/jobs: tried the "
        f"PostgreSQL server db.example.org port 5432, database 'jobs', user 'queue': {detail}; "
    )
    assert message.startswith(said), message
    assert message[len(said):].startswith(advice), message


def test_an_error_without_words_is_shown_by_its_repr() -> None:
    from ackqueue.storage import postgresql as postgres

    message = str(postgres.open_error("postgresql://queue@db.example.org:6543/", OSError()))
    assert message == (
        "cannot open the queue database postgresql://queue@db.example.org:6543/: tried the "
        "PostgreSQL server db.example.org port 6543, database '(none given)', user 'queue': "
        "OSError(); see the server's log for why, or give the queue a database of its own"
    )
