"""Several processes, one queue file: the producer. Run it, and two workers, in three terminals:

    python3 examples/shared_producer.py jobs.fs 100     # terminal 1
    python3 examples/shared_worker.py jobs.fs           # terminal 2
    python3 examples/shared_worker.py jobs.fs           # terminal 3

``shared=True`` in every process is all it takes: the first process to open the file starts a
small server for it (a process of its own, reachable only by you), the others find it, and it
stops by itself once nobody uses the file.
"""

import argparse

import ackqueue

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("path", nargs="?", default="jobs.fs", help="the queue file")
parser.add_argument("count", nargs="?", type=int, default=100, help="how many jobs (100)")
args = parser.parse_args()
path, count = args.path, args.count

with ackqueue.AckQueue(path, name="jobs", shared=True) as jobs:
    jobs.put_many([{"n": n} for n in range(count)])
    print(f"put {count} jobs")
