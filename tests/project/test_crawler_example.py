"""examples/crawler.py: stopped by Ctrl-C or SIGKILL and rerun, it ends with every page once,
and it never sends one host more requests at once than allowed (the process fails if so)."""

import os
import signal
import subprocess
import sys
import threading

from conftest import REPO_ROOT, child_env

CRAWLER = os.path.join(REPO_ROOT, "examples", "crawler.py")


def start(state_dir, pages):
    child = subprocess.Popen(
        [sys.executable, CRAWLER, str(state_dir), "--pages", str(pages), "--threads", "4",
         "--delay", "0.005", "-v"],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # A watchdog: a wait for output that never comes ends when the child is killed.
    watchdog = threading.Timer(120, child.kill)
    watchdog.daemon = True
    watchdog.start()
    return child


def wait_for_pages(child, count):
    """Read the child's output until it has fetched ``count`` pages in this run."""
    fetched = 0
    while fetched < count:
        line = child.stdout.readline()
        assert line, f"crawler ended early: {child.stderr.read()}"
        fetched += line.startswith("fetched ")


def finish(state_dir, pages):
    child = start(state_dir, pages)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, out + err
    return out


def test_the_crawler_stores_every_page_once(tmp_path):
    out = finish(tmp_path, 60)
    assert "crawl complete: 60 of 60 pages, each stored once; 60 fetched in this run" in out
    # pages 3, 10, 17, ... answer 429 once: each came back by snooze, and was then fetched
    assert "9 snoozed after a 429" in out
    assert "at most 2 request(s) at once to one host" in out  # --per-host 2, 4 threads


def test_ctrl_c_then_rerun_resumes_without_fetching_finished_pages(tmp_path):
    child = start(tmp_path, 120)
    wait_for_pages(child, 25)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130 and "run again to resume" in out, err
    out = finish(tmp_path, 120)
    assert out.startswith("resuming")
    assert "120 of 120 pages, each stored once" in out
    assert "0 finished pages fetched again" in out
    fetched_now = int(out.split("; ")[1].split()[0])
    assert fetched_now < 120 - 25, "the rerun fetched pages the first run had finished"


def test_sigkill_at_random_moments_then_rerun_ends_with_every_page_once(tmp_path):
    for kill_after in (15, 30, 10):
        child = start(tmp_path, 150)
        wait_for_pages(child, kill_after)
        child.kill()  # SIGKILL, mid-step for some of the four threads
        child.communicate(timeout=60)
    out = finish(tmp_path, 150)
    assert "150 of 150 pages, each stored once" in out
    assert "0 finished pages fetched again" in out


def test_the_readme_crawl_runs_long_enough_to_interrupt_and_then_resumes(tmp_path):
    """The docs' own command, default settings: a Ctrl-C after the first progress report
    stops it midway (it used to finish in under a second), and the rerun resumes."""
    argv = [sys.executable, CRAWLER, str(tmp_path / "crawl-state"), "--pages", "50"]
    child = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().startswith("starting a crawl")
    progress = child.stdout.readline()
    assert "pages so far; Ctrl-C stops, a rerun resumes" in progress
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 130 and "run again to resume" in out
    rerun = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert rerun.stdout.startswith("resuming")
    assert "50 of 50 pages, each stored once" in rerun.stdout
