"""Several processes, one queue file: a worker (run as many as you like, see
``shared_producer.py``). Each job's result is put and the job acked in one transaction, so a
worker killed at any moment loses nothing and stores no result twice; what it held goes back
to the other workers once its session lease (5 s here) runs out.

    python3 examples/shared_worker.py jobs.fs [--until-empty]

With ``--until-empty`` it stops once no job came for 2 seconds; otherwise it waits for jobs
until Ctrl-C. Its exit status says which: 0 when it ran out of jobs, 130 after Ctrl-C (as a
shell reports it), so a script can tell a finished run from a stopped one.
"""

import argparse
import os
import signal
import sys

import ackqueue

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("path", nargs="?", default="jobs.fs", help="the queue file")
parser.add_argument("--until-empty", action="store_true",
                    help="stop once no job came for 2 seconds (else wait until Ctrl-C)")
args = parser.parse_args()
path, until_empty = args.path, args.until_empty

jobs = ackqueue.AckQueue(path, name="jobs", shared=True, session_timeout=5)
results = ackqueue.AckQueue(path, name="results", shared=True, session_timeout=5)
done = 0
interrupted = False
try:
    with jobs.connect() as c:
        print("waiting for jobs (Ctrl-C to stop)", file=sys.stderr, flush=True)
        while True:
            try:
                job = c.get(timeout=2 if until_empty else None)
            except ackqueue.Empty:
                break
            # A Ctrl-C waits until the job is settled and counted (it comes right after): else
            # one landing between the commit and the count leaves the count one short.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                with c.transaction():  # both or neither
                    results.put({"n": job["n"], "square": job["n"] ** 2, "by": os.getpid()})
                    c.ack(job)
                done += 1
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
except KeyboardInterrupt:  # what this worker held goes back to the queue on close
    interrupted = True
finally:
    jobs.close()
    results.close()
print(f"worker {os.getpid()} did {done} jobs" + ("; interrupted" if interrupted else ""))
sys.exit(130 if interrupted else 0)
