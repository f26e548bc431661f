"""Random contexts for policy tests: curves with ties, flat, falling and super-linear steps."""

from __future__ import annotations

import numpy as np

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies.base import Context, Policy
from coddl.scheduler import Scheduler


def random_curves(rng: np.random.Generator, models: int = 4, kmax: int = 10) -> CurveTable:
    points: dict[str, dict[int, float]] = {}
    for m in range(models):
        kind = rng.integers(4)
        k = np.arange(1, kmax + 1)
        if kind == 0:  # concave k / (1 + a(k-1)), a on a coarse grid so that values repeat
            a = rng.integers(0, 6) / 10
            p = k / (1 + a * (k - 1))
        elif kind == 1:  # linear up to a cap, then flat: exact ties between gains and losses
            p = np.minimum(k, rng.integers(2, kmax + 1)).astype(float)
        elif kind == 2:  # random steps, sometimes falling or more than doubling
            p = np.cumsum(np.r_[1.0, rng.choice([-0.25, 0.0, 0.25, 0.5, 1.0, 1.5], kmax - 1)])
            p = np.maximum(p, 0.25)
        else:  # quarters: many equal ratios
            p = np.round(4 * np.sqrt(k) * rng.uniform(0.5, 2)) / 4
            p = np.maximum(p, 0.25)
        points[f"m{m}"] = {int(i): float(v) for i, v in zip(k, p)}
    return CurveTable.from_points(points)


def random_specs(rng: np.random.Generator, curves: CurveTable, n: int, *, min_choices=(1, 1, 1, 2, 3),
                 max_extra: int = 4) -> list[JobSpec]:
    specs = []
    for i in range(n):
        model = curves.names[rng.integers(len(curves.names))]
        lo = int(rng.choice(min_choices))
        hi = lo + int(rng.integers(0, curves.kmax + max_extra - lo + 1))
        work = float(rng.choice([1.0, 2.0, 4.0, 8.0])) if rng.random() < 0.5 else float(rng.uniform(0.5, 50))
        req = int(rng.integers(lo, hi + 1))
        specs.append(JobSpec(f"j{i}", float(rng.integers(0, 3)), req, work * 100, model, min_gpus=lo, max_gpus=hi))
    return specs


def random_context(seed: int, policy: Policy, *, jobs: tuple[int, int] = (1, 12),
                   gpus: tuple[int, int] = (1, 40), **kw) -> Context:
    rng = np.random.default_rng(seed)
    curves = random_curves(rng)
    specs = random_specs(rng, curves, int(rng.integers(*jobs, endpoint=True)), **kw)
    sched = Scheduler(Cluster.for_gpus(int(rng.integers(*gpus, endpoint=True)), 8), policy, curves, seed=seed)
    for sp in specs:
        sched.submit(sp, 0.0)
    return sched.context(0.0)
