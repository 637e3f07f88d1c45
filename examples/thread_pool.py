"""A pool of worker threads with acknowledgements: a job survives its worker's crash.

    python examples/thread_pool.py /tmp/pool.fs

``WorkerPool`` runs the handler on 4 threads and acks each job once it returns (durably, in
batches). A handler that raises is retried with backoff; here one goes further and ends its
worker thread while it holds job 42: the job goes back to the queue and another worker does it.
"""

import argparse
import sys
import threading

import ackqueue

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("path", nargs="?", default="pool.fs", help="the queue file")
path = parser.parse_args().path
q = ackqueue.AckQueue(path)
for n in range(100):
    q.put({"job": n})

done = set()
lock = threading.Lock()
crashed_once = threading.Event()


def handle(job):
    if job["job"] == 42 and not crashed_once.is_set():
        crashed_once.set()
        print("worker died: this worker dies holding job 42", flush=True)
        raise SystemExit  # ends this worker thread, as an uncaught error ends a thread
    with lock:
        done.add(job["job"])


pool = ackqueue.WorkerPool(q, handle, threads=4, retry=ackqueue.Retry(base=0.01))
stats = pool.run_until_empty()
q.close()
print(f"{len(done)} of 100 jobs done; job 42 done: {42 in done}")
sys.exit(0 if len(done) == 100 and stats.done == 100 else 1)
