"""Several processes, one queue file: collect the workers' results (see
``shared_producer.py``) and say which worker did how many.

    python3 examples/shared_results.py jobs.fs
"""

import argparse
import collections

import ackqueue

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("path", nargs="?", default="jobs.fs", help="the queue file")
path = parser.parse_args().path

by_worker: collections.Counter[int] = collections.Counter()
squares = 0
with ackqueue.AckQueue(path, name="results", shared=True) as results:
    while True:
        try:
            result = results.get(timeout=0.5)
        except ackqueue.Empty:
            break
        by_worker[result["by"]] += 1
        squares += result["square"]
print(f"{sum(by_worker.values())} results, sum of squares {squares}; by worker: "
      + ", ".join(f"{pid}: {n}" for pid, n in sorted(by_worker.items())))
