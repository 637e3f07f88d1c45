"""Several processes, one queue file: the producer. Run it, and two workers, in three terminals:

    python3 examples/shared_producer.py jobs.fs 100     # terminal 1
    python3 examples/shared_worker.py jobs.fs           # terminal 2
    python3 examples/shared_worker.py jobs.fs           # terminal 3

``shared=True`` in every process is all it takes: the first process to open the file starts a
small server for it (a process of its own, reachable only by you), the others find it, and it
stops by itself once nobody uses the file.
"""

import sys

import ackqueue

path = sys.argv[1] if len(sys.argv) > 1 else "jobs.fs"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 100

with ackqueue.AckQueue(path, name="jobs", shared=True) as jobs:
    jobs.put_many([{"n": n} for n in range(count)])
    print(f"put {count} jobs")
