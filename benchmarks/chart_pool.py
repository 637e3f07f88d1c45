"""A chart of worker-pool jobs/s against threads (1, 2, 4, 8, 16): ackqueue's WorkerPool, a
hand-written pool over persist-queue's SQLiteAckQueue and one over ``queue.Queue``, with a
handler that does nothing and one that sleeps 1 ms. Medians of ``--runs`` runs per point
(pools rotated within each run, see ``bench_pool.py``).

Run: ``python3 benchmarks/chart_pool.py [--n 10000] [--pq-n 1000] [--runs 1]
[--out benchmarks/pool_threads.png]`` (needs ``[bench]``: persist-queue, matplotlib).
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone

import _common as c
import bench_pool
import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

THREADS = (1, 2, 4, 8, 16)
STYLE = {
    "ackqueue": {"color": "#1f77b4", "marker": "o"},
    "persist-queue": {"color": "#d62728", "marker": "s"},
    "queue.Queue": {"color": "#7f7f7f", "marker": "^", "linestyle": "--"},
    "ideal": {"color": "#2ca02c", "marker": "", "linestyle": ":"},
}
LABEL = {
    "ackqueue": "ackqueue WorkerPool (durable acks)",
    "persist-queue": "persist-queue SQLiteAckQueue, hand-written pool",
    "queue.Queue": "queue.Queue, hand-written pool (in memory)",
    "ideal": "threads / 1 ms (sleep only)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="backlog for ackqueue, queue.Queue")
    ap.add_argument("--pq-n", type=int, default=1_000, help="backlog for persist-queue")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__),
                                                  "pool_threads.png"))
    args = ap.parse_args()
    c.header(f"pool jobs/s by threads (median of {args.runs} runs)")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for ax, handler in zip(axes, ("noop", "sleep1ms"), strict=True):
        n = args.n if handler == "noop" else min(args.n, 8_000)
        figures: dict[str, list[float]] = {}
        for threads in THREADS:
            samples = bench_pool.measure(handler, n, min(args.pq_n, n), threads, args.runs)
            for name, values in samples.items():
                figures.setdefault(name, []).append(c.median(values))
            print(f"  {handler} {threads:>2} threads: " + ", ".join(
                f"{name} {c.median(v):,.0f}" for name, v in samples.items()), flush=True)
        for name, values in figures.items():
            ax.plot(THREADS, values, label=LABEL[name], **STYLE[name])  # type: ignore[arg-type]
        ax.set_xscale("log", base=2)
        ax.set_xticks(THREADS, [str(t) for t in THREADS])
        ax.set_xlabel("worker threads")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        title = "handler does nothing" if handler == "noop" else "handler sleeps 1 ms"
        ax.set_title(title)
    axes[0].set_ylabel("jobs per second (log scale)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, fontsize=9)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    fig.suptitle(f"Worker pools draining a backlog: {c.machine()}\n{when}, median of "
                 f"{args.runs} run(s) a point; a shared machine: read the gaps, not the wiggles",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(args.out, dpi=90)
    print(f"  wrote {args.out}")


if __name__ == "__main__":
    main()
