"""A job on a fast and a slow device: throughput with the batch split by measured speed (coddl's
dynamic load balancing, ``coddl.elastic.balance``) against the equal split. Prints JSON.

Two real workers (gloo) train the tests' MLP on a global batch of 48. The devices are emulated by the
training script (``tests/elastic/elastic_trainer.py``): slot 0 computes ``--fast-ms`` per sample of
its local batch and slot 1 ``--slow-ms`` (default 0.5 and 1.5 ms: a 3× slower GPU), on top of the MLP's
own forward and backward pass. With the slots labelled as two device types the job balances; labelled
as one type it splits 24 / 24 and waits for the slow device every step. An equal split's step takes
24 × slow; a balanced one about 48 / (1/fast + 1/slow) per sample — 2× faster at 3:1. Throughput is
measured over the steps after the balance settled (the second half), median of ``--runs``.

    python benchmarks/hetero_balance.py [--runs 3] [--steps 120]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from coddl.elastic.job import ElasticJob, JobConfig
from coddl.elastic.pool import WorkerPool

TRAINER = str(Path(__file__).resolve().parents[1] / "tests" / "elastic" / "elastic_trainer.py")


def run(pool: WorkerPool, job_dir: Path, steps: int, fast_ms: float, slow_ms: float, balanced: bool) -> dict:
    devices = {0: ("fast", 1.0), 1: ("slow", 1.0)} if balanced else {0: ("one", 1.0), 1: ("one", 1.0)}
    env = {"STEPS": str(steps), "GLOBAL_BATCH": "48", "SAMPLES": "480", "STEP_SLEEP": "0",
           "DEVICE_S_PER_SAMPLE": f"slot0={fast_ms / 1000},slot1={slow_ms / 1000}"}
    cfg = JobConfig(job_id=job_dir.name, entry=TRAINER, job_dir=job_dir, env=env, report_s=0.05, checkpoint_s=0.0,
                    device_of_slot=devices)
    half = steps // 2
    with ElasticJob(cfg, pool) as job:
        job.start([0, 1])
        while (p := job.poll().progress) is None or p.step < half:
            time.sleep(0.005)
        t0, s0 = time.perf_counter(), p.step
        report = job.wait(120)
        elapsed = time.perf_counter() - t0
    assert report.progress is not None and report.progress.step == steps, report
    sizes = [len(json.loads(line)["samples"]) for line in (job_dir / "steps-w0.jsonl").read_text().splitlines()]
    return {"steps_per_s": (steps - s0) / elapsed, "fast_local_batch_last": sizes[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--fast-ms", type=float, default=0.5)
    ap.add_argument("--slow-ms", type=float, default=1.5)
    a = ap.parse_args()
    pool = WorkerPool()
    pool.warm()
    out: dict[str, list[dict]] = {"equal": [], "balanced": []}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        for i in range(a.runs):  # alternate, so that the machine's load hits both alike
            for kind in ("equal", "balanced"):
                out[kind].append(run(pool, Path(tmp) / f"{kind}{i}", a.steps, a.fast_ms, a.slow_ms, kind == "balanced"))
    med = {k: statistics.median(r["steps_per_s"] for r in v) for k, v in out.items()}
    print(json.dumps({
        "fast_ms_per_sample": a.fast_ms, "slow_ms_per_sample": a.slow_ms, "global_batch": 48, "runs": a.runs,
        "steps_per_s_equal_median": round(med["equal"], 2), "steps_per_s_balanced_median": round(med["balanced"], 2),
        "speedup": round(med["balanced"] / med["equal"], 3),
        "ideal_speedup": round(24 * a.slow_ms / (48 / (1 / a.fast_ms + 1 / a.slow_ms)), 3),
        "fast_local_batch_at_end": [r["fast_local_batch_last"] for r in out["balanced"]],
        "load_average": os.getloadavg()[0],
    }, indent=1))


if __name__ == "__main__":
    main()
