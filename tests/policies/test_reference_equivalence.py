"""Every policy decides exactly what its plain transcription of ALGORITHMS.md (``reference.py``)
decides, at every decision of whole random simulations: jobs arrive mid-run, make partial
progress, are preempted, starve, and slices end — the states a decision at t = 0 never shows.

The reference runs in lockstep: a wrapper policy asks both at each step, keeps the real policy's
answer (so the run is the real one) and records every disagreement.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pytest

from cases import random_curves, random_specs
from naive import naive_afs_l, naive_afs_p_light
import reference as ref
from coddl.core import Cluster
from coddl.policies import make_policy
from coddl.policies.base import Context, Policy
from coddl.policies.afs_p import AfsP
from coddl.policies.tiresias import TiresiasL
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate


class Lockstep(Policy):
    """Runs ``policy``; compares each decision (and the wake-up it asks for) with ``reference``."""

    def __init__(self, policy: Policy, reference: Callable[[Context], list[int]],
                 wake: Callable[[], float | None] | None = None) -> None:
        super().__init__()
        self.policy, self.reference, self.ref_wake = policy, reference, wake
        self.name = policy.name
        self.elastic = policy.elastic
        self.decisions = 0
        self.mismatches: list[str] = []

    def allocate(self, ctx: Context):
        got = self.policy.allocate(ctx)
        gpus = np.asarray(getattr(got, "gpus", got)).tolist()
        want = self.reference(ctx)
        self.decisions += 1
        if gpus != want:
            self.mismatches.append(f"t={ctx.now:.3f} ids={ctx.jobs.ids}: policy {gpus}, reference {want}")
        if self.ref_wake is not None:
            w, rw = self.policy.wakeup(ctx), self.ref_wake()
            rw = rw if rw is not None and rw > ctx.now else None
            if w != rw:
                self.mismatches.append(f"t={ctx.now:.3f}: wake-up policy {w}, reference {rw}")
        return got

    def wakeup(self, ctx: Context) -> float | None:
        return self.policy.wakeup(ctx)


def workload(seed: int, gpus: int, rigid: bool):
    """Random jobs arriving over [0, 300) s at distinct times, with random curves and lengths."""
    rng = np.random.default_rng(seed)
    curves = random_curves(rng)
    specs = random_specs(rng, curves, int(rng.integers(4, 16)))
    arrivals = np.sort(rng.uniform(0, 300, len(specs)))
    out = []
    for s, t in zip(specs, arrivals):
        req = min(s.requested_gpus, gpus)
        lo = min(s.min_gpus, gpus) if not rigid else 1
        out.append(dataclasses.replace(s, arrival=float(t), requested_gpus=req, min_gpus=min(lo, req) if rigid else lo,
                                       max_gpus=max(s.max_gpus, lo)))
    return curves, out


def run_lockstep(make: Callable[[], tuple[Policy, Callable, Callable | None]], seeds: range, rigid: bool) -> int:
    decisions = 0
    for seed in seeds:
        gpus = int(np.random.default_rng(seed + 7).integers(2, 13))
        curves, specs = workload(seed, gpus, rigid)
        policy, reference, wake = make()
        lock = Lockstep(policy, reference, wake)
        simulate(specs, Scheduler(Cluster.for_gpus(gpus, 4), lock, curves, seed=seed), check=True)
        assert not lock.mismatches, f"seed {seed}: " + "\n".join(lock.mismatches[:3])
        decisions += lock.decisions
    return decisions


@pytest.mark.parametrize("backfill", [True, False])
@pytest.mark.parametrize("name", ["fifo", "srtf", "srsf"])
def test_rigid_baselines_match_the_reference(name: str, backfill: bool) -> None:
    fn = {"fifo": ref.fifo, "srtf": ref.srtf, "srsf": ref.srsf}[name]
    spec = f"{name}:backfill={'true' if backfill else 'false'}"
    assert run_lockstep(lambda: (make_policy(spec), lambda c: fn(c, backfill), None), range(30), rigid=True) > 200


@pytest.mark.parametrize("name", ["max-min", "optimus", "optimus:preset=request"])
def test_elastic_baselines_match_the_reference(name: str) -> None:
    fn = {"max-min": ref.max_min, "optimus": ref.optimus,
          "optimus:preset=request": lambda c: ref.optimus(c, start="request")}[name]
    assert run_lockstep(lambda: (make_policy(name), fn, None), range(30), rigid=False) > 200


def test_afs_l_matches_the_naive_tournament_with_partial_progress() -> None:
    """§2 on remaining work: every decision after t = 0 ranks jobs by what they have LEFT."""
    assert run_lockstep(lambda: (make_policy("afs-l"), naive_afs_l, None), range(40), rigid=False) > 300


@pytest.mark.parametrize("reshuffle", [False, True])
def test_afs_p_matches_the_reference_in_light_and_heavy_load(reshuffle: bool) -> None:
    """§3: the dominance tournament under light load (with the policy's coin-flip priorities) and
    least-often-scheduled time slices under heavy load, waking at the first slice end."""

    def make():
        pol = AfsP(AfsP.Params(slice_s=50.0, coin="per-decision" if reshuffle else "per-job"))
        slices = ref.AfsPSlices(50.0)
        state = {"light": False}

        def reference(ctx: Context) -> list[int]:
            if int(ctx.jobs.min_gpus.sum()) >= ctx.capacity:
                state["light"] = False
                return slices.decide(ctx)
            state["light"] = True
            prio = -pol._priorities_last  # what the policy drew for this decision (see below)
            return naive_afs_p_light(ctx, prio)

        orig = pol._priorities

        def recording(ctx, book):
            out = orig(ctx, book)
            pol._priorities_last = out
            return out

        pol._priorities = recording
        return pol, reference, lambda: None if state["light"] else slices.wake

    assert run_lockstep(make, range(40), rigid=False) > 300


TIRESIAS = {
    "attained, arrival order, 2 thresholds, no knob": dict(thresholds=(60.0, 200.0), knob=None),
    "attained, first-start order": dict(thresholds=(100.0,), knob=None, queue_order="first-start"),
    "attained, knob 2": dict(thresholds=(50.0,), knob=2.0),
    "attained, knob 2, current wait": dict(thresholds=(50.0,), knob=2.0, starvation_wait="current"),
}


@pytest.mark.parametrize("case", sorted(TIRESIAS))
def test_tiresias_l_matches_the_reference(case: str) -> None:
    kw = TIRESIAS[case]

    def make():
        r = ref.TiresiasL(kw["thresholds"], kw["knob"], kw.get("service", "attained"), kw.get("queue_order", "arrival"),
                          kw.get("starvation_wait", "accumulated"))
        return TiresiasL(TiresiasL.Params(**kw)), r.decide, None

    assert run_lockstep(make, range(30), rigid=True) > 200


def test_tiresias_l_coddl_rule_matches_the_reference() -> None:
    """ALGORITHMS.md §4 coddl preset: a demotion is cleared when the job is given GPUs again."""
    kw = dict(thresholds=(60.0,), knob=None, service="since-start", queue_order="first-start", keep_demotion=False)

    def make():
        r = ref.TiresiasL(kw["thresholds"], kw["knob"], kw["service"], kw["queue_order"], clear=True)
        return TiresiasL(TiresiasL.Params(**kw)), r.decide, None

    assert run_lockstep(make, range(30), rigid=True) > 200
