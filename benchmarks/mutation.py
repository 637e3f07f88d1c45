"""How many deliberate bugs in the core the fast tests catch: mutmut over a copy of the tree.

    python3 benchmarks/mutation.py                       # the core modules, the fast tests
    python3 benchmarks/mutation.py --whole               # delivery/, queue/, storage/ (hours)
    python3 benchmarks/mutation.py ackqueue/storage/filestorage.py \
        --tests tests/storage/test_power_loss.py
    python3 benchmarks/mutation.py ackqueue/storage/filestorage.py \
        --only '*x_own_file__mutmut_*' --tests tests/queue/test_planted_links.py

mutmut (``pip install -e '.[dev]'``) changes the code one small edit at a time (a ``<`` for a
``<=``, a ``True`` for a ``False``, a call dropped...) and runs the tests that reach the edited
function; a mutant the tests pass is a "survivor": a change to the code nobody would notice.
Survivors are worth reading, not all worth a test: many are equivalent (the change makes no
observable difference) or touch only speed or a log message. Add a test for a survivor that
breaks a promise the docs make.

The run happens in a temporary copy of the git tree (mutmut writes a ``mutants/`` folder
beside the code), so the worktree stays clean; ``--keep`` leaves the copy to read the diffs
(``cd COPY && mutmut show NAME``). Prints mutmut's per-mutant results, then each module's score
(killed or timed out, over the mutants tested) and the totals.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The delivery rules, the consumer, and the durability layer: what the documented promises
# (order, acks, held items coming back, fsync before return) rest on.
CORE = [
    "ackqueue/queue/deliveries.py",
    "ackqueue/queue/claiming.py",
    "ackqueue/delivery/supply.py",
    "ackqueue/delivery/ready.py",
    "ackqueue/delivery/holds.py",
    "ackqueue/queue/consumer.py",
    "ackqueue/storage/filestorage.py",
]

# The layers whose score issue 21 asks for, with --whole.
WHOLE = ["delivery", "queue", "storage"]

# Tests that run in seconds, with no kill loops, servers or long hypothesis searches.
# (Adding test_queue_compat, test_recovery, test_leases or test_dead_letters made mutmut 3.8's
# stats run die with a segmentation fault while pytest formatted a failure under its
# trampolines; pass them with --tests to try again with a later mutmut.)
FAST_TESTS = [
    "tests/queue/test_smoke.py",
    "tests/queue/test_consumer.py",
    "tests/storage/test_power_loss.py",
    "tests/storage/test_durability.py",
    "tests/queue/test_shutdown.py",
    "tests/delivery/test_priority.py",
    "tests/queue/test_close_wakes.py",
    "tests/storage/test_group_commit.py",
    "tests/storage/test_dead_letter_store.py",
    "tests/storage/test_count_log.py",
    "tests/storage/test_book_edits.py",
    "tests/queue/test_handing_out.py",
    "tests/delivery/test_reopened_queue.py",
    "tests/queue/test_groups.py",
    "tests/queue/test_settling.py",
    "tests/delivery/test_holds.py",
    "tests/aio/test_async_give_back.py",
    "tests/delivery/test_local_mode.py",
    "tests/delivery/test_backlog.py",
    "tests/queue/test_batches.py",
    "tests/queue/test_putting.py",
    # Single tests of slower files, each the fast test of a rule no file above checks.
    "tests/queue/test_pause.py::test_a_paused_queue_hands_nothing_out_but_takes_puts",
    "tests/delivery/test_dead_letters.py::test_an_unloadable_item_is_named_by_its_key_and_queue",
]


def copy_tree(dest: str) -> None:
    """The files git knows (committed or not, ignored ones left out), copied to ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def mutmut_config(modules: list[str], tests: list[str], shared: bool = False) -> str:
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(f'"{x}"' for x in items) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["ackqueue"]\n'
        f"only_mutate = {toml_list(modules)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        # pytest-timeout's 300 s is for hangs of whole tests; mutmut times each mutant itself.
        # One process (-n 0 over the suite's two xdist workers): mutmut's trampolines record
        # which tests reach which function in the process that runs them. Shared mode's tests
        # (servers of their own, minutes) only with --shared.
        'pytest_add_cli_args = ["-p", "no:timeout", "-p", "no:cacheprovider", "-q", "-n", "0"'
        + ("" if shared else ', "-k", "not shared"')
        + "]\n"
        "mutate_only_covered_lines = true\n"
    )


# mutmut 3.8's runner reaps its workers with os.wait() and fails (KeyError) on a child it did
# not start: a process a test started in mutmut's own process (its stats and clean runs) and
# did not wait for, such as a private ZEO server going away by itself after the test. This
# launcher runs mutmut with a runner that passes over such children. It also ends a mutant
# that runs for HUNG_SECONDS (a worker gets SIGXCPU, which mutmut counts as a timeout, as it
# does when its own limit ends one): that limit is on CPU time, and a mutant that deadlocks
# a test waits without using any (queues.py's run of 2026-11-28 stopped on four such).
HUNG_SECONDS = 300
LAUNCHER = """
import os, signal, sys, threading, time
from mutmut.workers import isolation
wait = isolation.ForkRunner.wait_for_result
HUNG = HUNG_SECONDS_HERE
def watch(runner):
    first_seen = {}
    while True:
        time.sleep(10)
        now = time.monotonic()
        for pid in list(runner._running):
            if now - first_seen.setdefault(pid, now) > HUNG:
                try:
                    os.kill(pid, signal.SIGXCPU)
                except OSError:
                    pass
def wait_for_own(self, timeout=None):
    if not getattr(self, "_watched", False):
        self._watched = True
        threading.Thread(target=watch, args=(self,), daemon=True).start()
    if self._no_tests_results:
        return wait(self, timeout)
    real_wait = os.wait
    def own():
        while True:
            pid, status = real_wait()
            if pid in self._running:
                return pid, status
    os.wait = own
    try:
        return wait(self, timeout)
    finally:
        os.wait = real_wait
isolation.ForkRunner.wait_for_result = wait_for_own
from mutmut.__main__ import cli
sys.argv[0] = "mutmut"
cli()
""".replace("HUNG_SECONDS_HERE", str(HUNG_SECONDS))


# mutmut names a mutant after its function: ``package.module.x_function__mutmut_N`` or
# ``package.module.xǁClassǁmethod__mutmut_N``.
MUTANT = re.compile(r"^\s*(?P<module>[\w.]+?)\.x[_ǁ]\S*:\s*(?P<state>.+?)\s*$")
CAUGHT = ("killed", "timeout")  # a mutant that made a test fail, or hang until mutmut's limit


def score_report(results: str) -> str:
    """Each module's outcomes and score (mutants caught / mutants tested), then the totals."""
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for line in results.splitlines():
        match = MUTANT.match(line)
        if match:
            by_module[match["module"]][match["state"]] += 1
    lines = []
    total: Counter[str] = Counter()
    for module, states in sorted(by_module.items()):
        total.update(states)
        lines.append(f"{module}: {_score(states)}")
    lines.append(f"totals: {_score(total)}")
    return "\n".join(lines)


def _score(states: Counter[str]) -> str:
    tested = sum(n for state, n in states.items() if state not in ("not checked", "skipped"))
    caught = sum(states[state] for state in CAUGHT)
    outcomes = ", ".join(f"{state} {n}" for state, n in states.most_common())
    share = f"{100 * caught / tested:.0f} % caught" if tested else "none tested"
    return f"{share} ({outcomes})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", default=CORE, help="files to mutate")
    parser.add_argument("--tests", nargs="+", default=FAST_TESTS, help="test files to run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--keep", action="store_true", help="keep the copy and its mutants/")
    parser.add_argument("--shared", action="store_true",
                        help="run the given tests' shared-mode cases too (slower)")
    parser.add_argument("--whole", action="store_true",
                        help="every module of ackqueue/delivery, queue and storage (hours)")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="only the mutants whose names match (fnmatch, repeatable), e.g. "
                        "'*x_own_file__mutmut_*': a module's slow functions run apart with the "
                        "few tests that matter to them")
    args = parser.parse_args()
    if args.whole:
        args.modules = sorted(
            os.path.relpath(path, ROOT)
            for package in WHOLE
            for path in glob.glob(os.path.join(ROOT, "ackqueue", package, "*.py"))
            if not path.endswith("__init__.py")
        )

    work = tempfile.mkdtemp(prefix="ackqueue-mutation-")
    try:
        copy_tree(work)
        with open(os.path.join(work, "pyproject.toml"), "a") as f:
            f.write(mutmut_config(args.modules, args.tests, args.shared))
        env = dict(os.environ, PYTHONPATH=work, CI=os.environ.get("CI", "1"))
        subprocess.run(
            [sys.executable, "-c", LAUNCHER, "run", "--max-children", str(args.max_children),
             *args.only],
            cwd=work, env=env, check=False,
        )
        results = subprocess.run(
            [sys.executable, "-m", "mutmut", "results", "--all", "true"],
            cwd=work, env=env, capture_output=True, text=True, check=False,
        ).stdout
        print(results)
        print(score_report(results))
        if args.keep:
            print(f"kept in {work}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
