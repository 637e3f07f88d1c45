"""A pool of worker threads with acknowledgements: a job survives its worker's crash.

    python examples/thread_pool.py /tmp/pool.fs
"""

import sys
import threading

import ackqueue

path = sys.argv[1] if len(sys.argv) > 1 else "pool.fs"
q = ackqueue.AckQueue(path)
for n in range(100):
    q.put({"job": n})

done = set()
lock = threading.Lock()
crashed_once = threading.Event()


def worker():
    with q.connect() as c:
        while True:
            try:
                job = c.get(timeout=0.5)
            except ackqueue.Empty:
                return
            if job["job"] == 42 and not crashed_once.is_set():
                crashed_once.set()
                raise RuntimeError("this worker dies holding job 42")  # job 42 goes back
            with lock:
                done.add(job["job"])
            c.ack(job)


threading.excepthook = lambda args: print(f"worker died: {args.exc_value}")
workers = [threading.Thread(target=worker) for _ in range(4)]
for t in workers:
    t.start()
for t in workers:
    t.join()
q.close()
print(f"{len(done)} of 100 jobs done; job 42 done: {42 in done}")
sys.exit(0 if len(done) == 100 else 1)
