"""A queue.Queue program made durable by changing one line.

Run it twice: the second run finds what the first left behind.
    python examples/drop_in.py /tmp/drop_in.fs
"""

import sys
import threading

import ackqueue

path = sys.argv[1] if len(sys.argv) > 1 else "drop_in.fs"

# Was: q = queue.Queue(maxsize=10)
q = ackqueue.AckQueue(path, maxsize=10)

results = []


def consumer():
    while True:
        item = q.get()
        if item is None:
            q.task_done()
            break
        results.append(item * item)
        q.task_done()


left_over = q.qsize()
thread = threading.Thread(target=consumer)
thread.start()
for n in range(20):
    q.put(n)
q.put(None)
q.join()
thread.join()
q.close()
print(f"found {left_over} items left by an earlier run; squared {len(results)} numbers:")
print(sum(results))
