"""ALGORITHMS.md §2's brute-force check of AFS-L on closed two-job systems.

Two jobs start together on G GPUs with concave curves P(k) = k / (1 + a(k − 1)), a ∈ [0, 0.5];
after the first finishes the survivor gets all G GPUs. Over every split (k, G − k) the best sum of
JCTs is the optimum; AFS-L's split should average within 5% of it (about 1.02 in a 20,000-case
check) and beat giving all GPUs to the shorter job (about 1.08).
"""

from __future__ import annotations

import numpy as np

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.scheduler import Scheduler


def speed(a: float, k: int) -> float:
    return k / (1 + a * (k - 1)) if k else 0.0


def sum_of_jcts(w: tuple[float, float], a: tuple[float, float], k: tuple[int, int], g: int) -> float:
    t = [w[i] / speed(a[i], k[i]) if k[i] else np.inf for i in (0, 1)]
    first = int(np.argmin(t))
    other = 1 - first
    done = t[first]
    left = w[other] - speed(a[other], k[other]) * done
    return done + done + left / speed(a[other], g)


def afs_l_split(w: tuple[float, float], a: tuple[float, float], g: int) -> tuple[int, int]:
    curves = CurveTable.from_points({m: {k: speed(a[i], k) for k in range(1, g + 1)} for i, m in enumerate("ab")})
    sched = Scheduler(Cluster.for_gpus(g, g), make_policy("afs-l"), curves)
    for i, m in enumerate("ab"):
        sched.submit(JobSpec(m, 0.0, 1, w[i], m, max_gpus=g), 0.0)
    ka, kb = sched.policy.allocate(sched.context(0.0)).tolist()
    return ka, kb


def test_afs_l_close_to_optimal_and_better_than_shortest_first() -> None:
    rng = np.random.default_rng(2021)
    afs, shortest = [], []
    for _ in range(1000):
        g = int(rng.choice([2, 4, 8, 16]))
        a = tuple(rng.uniform(0.0, 0.5, 2))
        w = tuple(rng.uniform(1.0, 100.0, 2))
        split = afs_l_split(w, a, g)
        assert sum(split) == g and min(split) >= 1  # each job one GPU first, and every GPU used
        best = min(sum_of_jcts(w, a, (k, g - k), g) for k in range(g + 1))
        short = 0 if w[0] / speed(a[0], g) <= w[1] / speed(a[1], g) else 1
        afs.append(sum_of_jcts(w, a, split, g) / best)
        shortest.append(sum_of_jcts(w, a, (g, 0) if short == 0 else (0, g), g) / best)
    assert np.mean(afs) <= 1.05
    assert np.mean(afs) < np.mean(shortest)
