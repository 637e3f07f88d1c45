"""A queue.Queue program made durable by changing one line.

Its numbers survive a crash. Run it once with ``--crash-after 5``: it dies after squaring five
numbers (``os._exit``, as abruptly as kill -9). Run it again: it finds the other fifteen on disk
and squares them, and none of the first five again.

    python examples/drop_in.py /tmp/drop_in.fs --crash-after 5
    python examples/drop_in.py /tmp/drop_in.fs
"""

import argparse
import os
import sys
import threading

import ackqueue

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("path", nargs="?", default="drop_in.fs")
parser.add_argument("--crash-after", type=int, default=0, metavar="N",
                    help="die after squaring N numbers, as kill -9 would")
args = parser.parse_args()

# Was: q = queue.Queue()
q = ackqueue.AckQueue(args.path)

results = []


def consumer():
    while True:
        item = q.get()
        if item is None:
            q.task_done()
            break
        results.append(item * item)
        q.task_done()
        if len(results) == args.crash_after:
            print(f"crashing on purpose after squaring {len(results)} numbers (--crash-after), "
                  "as kill -9 would: run again without it to finish the rest", file=sys.stderr,
                  flush=True)
            os._exit(1)  # no cleanup at all: what is on disk is all the next run gets


left_over = q.qsize()
if not left_over:  # a fresh start; otherwise finish what an earlier run left
    for n in range(20):
        q.put(n)
    q.put(None)
thread = threading.Thread(target=consumer)
thread.start()
q.join()
thread.join()
q.close()
print(f"found {left_over} items left by an earlier run; squared {len(results)} numbers:")
print(sum(results))
