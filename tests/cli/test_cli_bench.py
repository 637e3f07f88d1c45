"""``ackqueue bench``: fills, drains and measures a queue of its own; never touches another."""

import os
import tempfile

import ackqueue
from ackqueue.cli.commands import main
from ackqueue.cli.common import Progress


def bench(capsys, *argv):
    code = main(["bench", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_bench_refuses_a_path_that_exists_and_leaves_it_alone(tmp_path, capsys):
    users = tmp_path / "jobs.fs"
    users.write_bytes(b"a user's queue")
    code, out, err = bench(capsys, users, "-n", 10)
    assert code == 1 and out == ""
    assert "jobs.fs exists" in err and "never touches a queue" in err
    assert users.read_bytes() == b"a user's queue"
    assert sorted(os.listdir(tmp_path)) == ["jobs.fs"]


def test_bench_reports_rates_latency_and_machine_and_removes_its_file(tmp_path, capsys):
    code, out, err = bench(capsys, tmp_path / "bench.fs", "-n", 300, "--threads", 4,
                           "--latency-n", 200)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("machine: ") and f"{os.cpu_count()} CPUs" in lines[0]
    assert lines[1].startswith("python: ") and f"ackqueue {ackqueue.__version__}" in lines[1]
    assert lines[2].startswith(f"queue file in: {tmp_path} (")
    assert "draining with 4 threads: 300/300" in out  # the final progress line
    assert any(line.startswith("fill (put_many") and "items/s" in line for line in lines)
    assert any(line.startswith("drain (WorkerPool, 4 threads") for line in lines)
    (latency,) = [line for line in lines if "put->get p50" in line]
    assert "get->durable ack p50" in latency and "p99" in latency
    assert os.listdir(tmp_path) == []  # what it made is gone


def test_bench_without_a_path_works_in_a_temporary_directory_it_removes(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code, out, err = bench(capsys, "-n", 50, "--threads", 2, "--latency-n", 20)
    assert code == 0, err
    assert f"queue file in: {tmp_path}{os.sep}ackqueue-bench-" in out
    assert os.listdir(tmp_path) == []


def test_bench_keep_leaves_the_drained_queue_file(tmp_path, capsys):
    path = tmp_path / "kept.fs"
    code, out, err = bench(capsys, path, "-n", 20, "--threads", 2, "--latency-n", 10, "--keep")
    assert code == 0, err
    assert f"kept: {path}" in out
    with ackqueue.AckQueue(str(path)) as q:
        assert q.qsize() == 0 and q.unacked_count() == 0  # every job was acked durably


def test_bench_rejects_a_count_below_one(capsys):
    try:
        main(["bench", "-n", "0"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("-n 0 was accepted")
    assert "must be at least 1" in capsys.readouterr().err


def test_bench_json_gives_the_figures_as_json_numbers_and_progress_on_stderr(tmp_path, capsys):
    import json

    code, out, err = bench(capsys, tmp_path / "bench.fs", "-n", 200, "--threads", 2,
                           "--latency-n", 100, "--json")
    assert code == 0, err
    figures = json.loads(out)
    assert (figures["items"], figures["threads"], figures["latency_items"]) == (200, 2, 100)
    for name in ("fill_items_per_s", "drain_jobs_per_s", "latency_items_per_s"):
        assert isinstance(figures[name], float) and figures[name] > 0, name
    assert set(figures["latency_ms"]) == {"put_to_get_p50", "put_to_get_p99",
                                          "get_to_ack_p50", "get_to_ack_p99"}
    assert figures["machine"][0].startswith("machine: ")
    assert "draining with 2 threads: 200/200" in err


def test_bench_says_what_it_will_run_and_its_progress_says_the_time_left(tmp_path, capsys):
    code, out, err = bench(capsys, tmp_path / "bench.fs", "-n", 300, "--threads", 2,
                           "--latency-n", 20)
    assert code == 0, err
    assert "runs: fill 300, drain 300, then latency on 20 items" in out and "-n for a" in out
    now = [0.0]
    lines: list[str] = []
    progress = Progress("filling", clock=lambda: now[0], out=lines.append, rate=True)
    now[0] = 2.0
    progress(250, 1000)  # 125/s: 750 more take 6 s
    now[0] = 10.0
    progress(1000, 1000, final=True)
    assert lines == ["  filling: 250/1,000 (125/s, about 6.0 s left)",
                     "  filling: 1,000/1,000 (100/s)"]
