"""Resize latency of a running 1.6 M-parameter MLP job: in place vs checkpoint-restart. Prints JSON.

In place: workers forked from the warm pool; grow 2→4 and shrink 4→2 re-form the process group on the
job's long-lived store and broadcast the state to the joiners. Checkpoint-restart: every worker stops
(rank 0 writes a checkpoint) and fresh, cold processes start at the new size and load it. A resize's
time runs from the request until every rank of the new group has finished regrouping and syncing.
For in place, ``pause`` is how long the surviving rank 0 stood still (a grow is announced only once
the new workers are up, so the survivors train through their start-up); a restart pauses throughout.
After every resize each rank reports a sha256 of its model and optimizer state; they must all agree.
The machine's load average is printed too: other work on the host inflates every figure.

    python benchmarks/resize_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from coddl.elastic.job import ElasticJob, JobConfig
from coddl.elastic.pool import ColdLauncher, Launcher, WorkerPool
from coddl.elastic.protocol import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import train_mlp  # noqa: E402  (the model the jobs train, to report its size)

SMALL, LARGE = [0, 1], [0, 1, 2, 3]


def wait_for_training(job: ElasticJob, generation: int, timeout: float = 60.0) -> Progress:
    """Block until rank 0 reports steps taken in ``generation``."""
    deadline = time.monotonic() + timeout
    while (p := job.poll().progress) is None or p.generation < generation:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no progress in generation {generation}: {job.poll()}")
        time.sleep(0.01)
    return p


def median_ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 1)


def measure(launcher: Launcher, job_dir: Path, runs: int, in_place: bool) -> dict:
    config = JobConfig(job_id=job_dir.name, entry=str(ROOT / "examples" / "train_mlp.py"), job_dir=job_dir,
                       args=("--steps", "100000000"), verify=True, report_s=0.05, checkpoint_s=0.0)
    kinds = {"grow_2_to_4": LARGE, "shrink_4_to_2": SMALL}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    pauses: dict[str, list[float]] = {kind: [] for kind in kinds}
    identical: list[bool] = []
    steps_kept = True
    with ElasticJob(config, launcher) as job:
        job.start(SMALL)
        wait_for_training(job, 1)
        for _ in range(runs):
            for kind, slots in kinds.items():
                before = job.poll().progress.step
                times[kind].append(job.resize(slots) if in_place else job.restart(slots))
                generation = job.poll().generation
                identical.append(len(set(job.coordinator.state_hashes(generation, len(slots)))) == 1)
                after = wait_for_training(job, generation)
                steps_kept &= after.step >= before
                if in_place:
                    pauses[kind].append(after.regroup_s)
                time.sleep(0.3)  # let it train a while at this size
        job.stop()
    result = {f"{kind}_median_s": round(statistics.median(ts), 4) for kind, ts in times.items()}
    if in_place:
        result |= {f"{kind}_pause_median_ms": median_ms(ps) for kind, ps in pauses.items()}
    return result | {
        **{f"{kind}_runs_s": [round(t, 4) for t in ts] for kind, ts in times.items()},
        "replicas_bit_identical_after_every_resize": all(identical),
        "resizes_checked": len(identical),
        "progress_kept_across_resizes": steps_kept,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="resizes of each kind per method (>= 5 for medians)")
    args = parser.parse_args()

    model = train_mlp.mlp()
    params = sum(p.numel() for p in model.parameters())
    load_before = os.getloadavg()[0]
    pool = WorkerPool()
    warm_s = pool.warm()
    with tempfile.TemporaryDirectory(prefix="coddl-resize-") as tmp:
        in_place = measure(pool, Path(tmp) / "in-place", args.runs, in_place=True)
        restart = measure(ColdLauncher(), Path(tmp) / "restart", args.runs, in_place=False)
    speedup = {kind: round(restart[f"{kind}_median_s"] / in_place[f"{kind}_median_s"], 1)
               for kind in ("grow_2_to_4", "shrink_4_to_2")}
    print(json.dumps({
        "benchmark": "resize_latency",
        "model": {"name": "mlp 512-1024-1024-10", "parameters": params,
                  "state_mb": round(3 * params * 4 / 1e6, 1)},  # params + Adam's two moments, fp32
        "backend": "gloo", "cpu_count": os.cpu_count(), "torch": torch.__version__,
        "platform": platform.platform(), "runs": args.runs, "pool_warm_s": round(warm_s, 3),
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "in_place": in_place,
        "checkpoint_restart_cold": restart,
        "speedup_in_place_vs_restart": speedup,
        "goal_met": {
            "in_place_median_le_0_5_s": max(in_place["grow_2_to_4_median_s"], in_place["shrink_4_to_2_median_s"]) <= 0.5,
            "at_least_10x_faster": min(speedup.values()) >= 10,
        },
    }, indent=2))


if __name__ == "__main__":
    main()
