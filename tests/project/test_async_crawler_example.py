"""examples/async_crawler.py: stopped by Ctrl-C or SIGKILL and rerun, it ends with every page
once, and never fetches again a page an earlier run had finished."""

import os
import signal
import subprocess
import sys
import threading

from conftest import REPO_ROOT, child_env
from test_crawler_example import wait_for_pages

CRAWLER = os.path.join(REPO_ROOT, "examples", "async_crawler.py")


def start(state_dir, pages):
    child = subprocess.Popen(
        [sys.executable, CRAWLER, str(state_dir), "--pages", str(pages), "--tasks", "8",
         "--delay", "0.005", "-v"],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    watchdog = threading.Timer(120, child.kill)  # a wait for output that never comes ends
    watchdog.daemon = True
    watchdog.start()
    return child


def finish(state_dir, pages):
    child = start(state_dir, pages)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, out + err
    return out


def test_the_async_crawler_stores_every_page_once(tmp_path):
    out = finish(tmp_path, 60)
    assert "crawl complete: 60 of 60 pages, each stored once; 60 fetched in this run" in out


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


def test_sigkill_mid_crawl_then_rerun_ends_with_every_page_once(tmp_path):
    for kill_after in (15, 30, 10):
        child = start(tmp_path, 150)
        wait_for_pages(child, kill_after)
        child.kill()  # SIGKILL, mid-transaction for some of the tasks
        child.communicate(timeout=60)
    out = finish(tmp_path, 150)
    assert "150 of 150 pages, each stored once" in out
    assert "0 finished pages fetched again" in out
