"""Estimator query speed: 10,000 (job, placement) pairs in one vectorised ``Estimator.predict``.

The placer and the policies ask the estimator on hot paths; the goal is ≤ 10 ms for 10,000 pairs
with the uncertainty interval (the full query). 200 jobs (bundled Pollux and Gavel apps with
priors, each under several corrections) are queried on random placements of 1–64 GPUs over nodes
of 8 on the ring, hierarchical and auto fabrics. Prints JSON: median and p90 wall-clock and CPU
milliseconds over the repetitions, for the query with and without the interval; the baseline in
the same run is the per-pair scalar path (``Estimator.throughput``) on a sample, scaled to 10,000.

    python benchmarks/estimator_speed.py [--pairs 10000] [--repeat 25]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def jobs(n: int, seed: int):
    from coddl.perf.calibrate import default_prior, one_gpu_model
    from coddl.perf.curves import data_path
    from coddl.perf.table import read_many

    table = read_many([data_path("profiles/pollux-t4.csv"), data_path("profiles/gavel.csv")])
    rng = np.random.default_rng(seed)
    base = [one_gpu_model(table.where(cluster=c, model=m), default_prior())
            for c in table.clusters for m in table.models(c)]
    out = []
    for i in range(n):
        j = base[i % len(base)]
        theta = np.clip(j.theta + rng.normal(0, 0.1, 3), [0, -3, 0], [0.99, 3, 0.99])
        out.append(type(j)(j.name, j.param_bytes, j.t_ref, j.b_ref, theta, j.cov, j.prior, j.gpu_type))
    return out


def timed(fn, repeat: int) -> dict:
    wall, cpu = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(1e3 * (time.perf_counter() - w0))
        cpu.append(1e3 * (time.process_time() - c0))
    return {"wall_ms_median": round(float(np.median(wall)), 3), "wall_ms_p90": round(float(np.percentile(wall, 90)), 3),
            "cpu_ms_median": round(float(np.median(cpu)), 3)}


def main() -> None:
    from coddl.perf.estimator import Estimator, JobBatch, Placement
    from coddl.perf.fabric import Fabric

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    js = jobs(200, args.seed)
    batch = JobBatch.of(js)
    idx = rng.integers(0, len(js), args.pairs)
    k = rng.integers(1, 65, args.pairs)
    per_node = np.minimum(k, rng.integers(1, 9, args.pairs))
    nodes = -(-k // per_node)
    local = batch.b_ref[idx] * rng.choice([0.5, 1.0, 2.0], args.pairs)
    out = {"pairs": args.pairs, "repeat": args.repeat, "load_avg_1min": round(os.getloadavg()[0], 2),
           "goal_ms": 10.0, "fabrics": {}}
    for algorithm in ("ring", "hierarchical", "auto"):
        est = Estimator(Fabric(100.0, 12.5, 5.0, 20.0, algorithm, two_node_factor=1.3))
        est.predict(batch, idx, k, nodes, per_node, local)  # warm-up
        full = timed(lambda: est.predict(batch, idx, k, nodes, per_node, local), args.repeat)
        mean = timed(lambda: est.predict(batch, idx, k, nodes, per_node, local, uncertainty=False), args.repeat)
        sample = 200
        shapes = [Placement.consolidated(int(k[i]), int(per_node[i])) for i in range(sample)]

        def scalar() -> None:
            for i in range(sample):
                est.throughput(js[idx[i]], shapes[i], float(local[i] * k[i]))

        per_pair = timed(scalar, 5)
        out["fabrics"][algorithm] = {
            "with_interval": full, "mean_only": mean,
            "scalar_path_ms_for_all_pairs": round(per_pair["wall_ms_median"] * args.pairs / sample, 1),
            "speedup_vs_scalar": round(per_pair["wall_ms_median"] * args.pairs / sample / full["wall_ms_median"], 1),
            "meets_goal": full["wall_ms_median"] <= 10.0,
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
