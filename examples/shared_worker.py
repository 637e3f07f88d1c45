"""Several processes, one queue file: a worker (run as many as you like, see
``shared_producer.py``). Each job's result is put and the job acked in one transaction, so a
worker killed at any moment loses nothing and stores no result twice; what it held goes back
to the other workers once its session lease (5 s here) runs out.

    python3 examples/shared_worker.py jobs.fs [--until-empty]

With ``--until-empty`` it stops once no job came for 2 seconds; otherwise it waits for jobs
until Ctrl-C.
"""

import os
import sys

import ackqueue

path = sys.argv[1] if len(sys.argv) > 1 else "jobs.fs"
until_empty = "--until-empty" in sys.argv

jobs = ackqueue.AckQueue(path, name="jobs", shared=True, session_timeout=5)
results = ackqueue.AckQueue(path, name="results", shared=True, session_timeout=5)
done = 0
try:
    with jobs.connect() as c:
        while True:
            try:
                job = c.get(timeout=2 if until_empty else None)
            except ackqueue.Empty:
                break
            with c.transaction():  # both or neither
                results.put({"n": job["n"], "square": job["n"] ** 2, "by": os.getpid()})
                c.ack(job)
            done += 1
except KeyboardInterrupt:
    pass
finally:
    jobs.close()
    results.close()
print(f"worker {os.getpid()} did {done} jobs")
