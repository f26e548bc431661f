"""What /metrics costs: the controller's per-decision report, and a scrape of a busy cluster's store.

A SQLite store in a temporary directory is filled as a controller would fill it: ``--jobs`` jobs, each
started, resized twice, given progress and (all but ``--running``) finished, about seven events per job.
Then, in this process (no HTTP, so the figures are the metrics' own):

1. ``observe_decision`` — what the controller adds to every scheduling decision — median CPU time
   per call over 100,000 calls, next to ``time.perf_counter()`` pairs (the timing it needs anyway);
2. the first scrape after the server "starts" with the whole history unread: how long folding
   ``--events`` new events takes (counters count from a server's start, so this happens only when
   events arrive faster than scrapes; here all of them at once);
3. steady scrapes with nothing new (the gauges' queries alone, ``--running`` jobs holding GPUs):
   median and p99 of ``--scrapes`` scrapes.

CPU seconds (``time.process_time``), so the figures hold on a shared machine. Prints JSON.

    python benchmarks/metrics_scrape.py [--jobs 5000] [--running 500] [--scrapes 50]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from coddl.core.allocation import Action, ActionKind
from coddl.core.cluster import Cluster
from coddl.core.job import JobStatus
from coddl.runtime.metrics import ClusterMetrics
from coddl.runtime.store import ProgressUpdate, Store


def fill(store: Store, jobs: int, running: int, gpus: int) -> None:
    t = time.time()
    for i in range(jobs):
        j = store.add_job(f"job-{i}", f"user{i % 20}", {"name": f"job-{i}"}, total_steps=1000)
        g = (2 * i) % gpus
        store.record_plan([Action(ActionKind.START, str(j.id), (), (g,))], at=t + 10)
        store.record_applied(j.id, "start", (g,), 1.0, t + 11)
        store.record_plan([Action(ActionKind.GROW, str(j.id), (g,), (g, g + 1))], at=t + 20)
        store.record_applied(j.id, "grow", (g, g + 1), 0.3, t + 21)
        store.record_progress([ProgressUpdate(j.id, t + 30, 500, 2, 20.0, 0.5)])
        if i >= running:
            store.finish(j.id, JobStatus.FINISHED, t + 40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--running", type=int, default=500)
    ap.add_argument("--scrapes", type=int, default=50)
    args = ap.parse_args()
    gpus = 2 * args.running
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.for_state_dir(Path(tmp))
        metrics = ClusterMetrics(store, Cluster.for_gpus(gpus, 8), "afs-p()", "local")
        fill(store, args.jobs, args.running, gpus)
        events = store.last_event_id()

        n = 100_000
        c0 = time.process_time()
        for _ in range(n):
            metrics.observe_decision(0.001, 2)
        per_call = (time.process_time() - c0) / n
        c0 = time.process_time()
        for _ in range(n):
            a = time.perf_counter()
            _ = time.perf_counter() - a
        timing = (time.process_time() - c0) / n

        c0 = time.process_time()
        first = metrics.scrape()
        fold_s = time.process_time() - c0
        steady = []
        for _ in range(args.scrapes):
            c0 = time.process_time()
            body = metrics.scrape()
            steady.append(time.process_time() - c0)
        store.close()
    print(json.dumps({
        "jobs": args.jobs, "running_jobs": args.running, "gpus": gpus, "events": events,
        "observe_decision_us": round(per_call * 1e6, 2), "perf_counter_pair_us": round(timing * 1e6, 2),
        "first_scrape_folding_all_events_s": round(fold_s, 3),
        "fold_us_per_event": round(fold_s / events * 1e6, 1),
        "steady_scrape_p50_ms": round(float(np.median(steady)) * 1e3, 1),
        "steady_scrape_p99_ms": round(float(np.percentile(steady, 99)) * 1e3, 1),
        "scrape_bytes": len(body), "first_scrape_bytes": len(first),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }, indent=2))


if __name__ == "__main__":
    main()
