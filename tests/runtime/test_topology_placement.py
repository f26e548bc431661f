"""Topology-aware planning of profiled real jobs: "2 GPUs in one node or 3 across two: which is faster?"

Two nodes of four GPUs, partly held by two rigid jobs so that 1 GPU is free in node A and 2 in
node B: a growing job can have 2 GPUs in node B or 3 across A and B (on consolidated placements,
what the scheduler priced every count at before, 3 GPUs would sit in one node). A communication-heavy job (hand-written inspection: 32 MB of gradients,
a step of 10 ms + 2.5 ms per sample at a global batch of 96) is planned the way the controller plans
it (``estimation.reprice`` before ``Scheduler.step``): the count it gets is whichever placement the
estimator prices faster on the cluster spec's links, and the choice flips with the inter-node link.
A job with no profile is planned on its model's curve, as before, whatever the links."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import Cluster, LinkSpec
from coddl.core.job import JobSpec
from coddl.elastic.protocol import Inspection
from coddl.policies.registry import make_policy
from coddl.runtime.estimation import Estimates, by_placement, planned_curve, reprice
from coddl.runtime.models import runtime_curves
from coddl.scheduler import Scheduler

GRADIENT_BYTES = 32_000_000
BATCH = 96
SLOW = LinkSpec(intra_node_gbps=5.0, inter_node_gbps=0.0125, intra_node_latency_us=20.0, inter_node_latency_us=200.0)
FAST = LinkSpec(intra_node_gbps=5.0, inter_node_gbps=2.5, intra_node_latency_us=20.0, inter_node_latency_us=200.0)


def comm_heavy() -> Inspection:
    """One-GPU steps of 10 ms + 2.5 ms per sample, timed at local batches 24, 48 and 96."""
    return Inspection(GRADIENT_BYTES, tuple((b, 0.010 + 0.0025 * b) for b in (24, 48, 96)), 0.0, BATCH, None)


def two_nodes(links: LinkSpec) -> Cluster:
    return Cluster.homogeneous(2, 4, gpu_type="cpu", cpus_per_node=4, links=links)


def with_blockers(links: LinkSpec) -> Scheduler:
    """Rigid jobs on 3 GPUs of node A and 2 of node B: free are GPU 3 (node A) and GPUs 6, 7 (node B)."""
    s = Scheduler(two_nodes(links), make_policy("afs-p"), runtime_curves())
    s.submit(JobSpec("three", 0.0, 3, 1e6, "default", min_gpus=3, max_gpus=3), 0.0)
    s.submit(JobSpec("two", 0.0, 2, 1e6, "default", min_gpus=2, max_gpus=2), 0.0)
    s.step(0.0)
    assert (s.allocation.gpus["three"], s.allocation.gpus["two"]) == ((0, 1, 2), (4, 5))
    return s


def plan_profiled(links: LinkSpec, job_max: int | None = None) -> tuple[Scheduler, Estimates, tuple[int, ...]]:
    s = with_blockers(links)
    est = Estimates(s.cluster)
    s.submit(JobSpec("heavy", 1.0, 1, 1e6, "default", max_gpus=job_max), 1.0)
    est.inspected("heavy", "comm-heavy", "cpu", comm_heavy())
    rate, useful = planned_curve(s, est, "heavy", by_placement=by_placement(s.cluster))
    s.set_curve("heavy", rate, useful)  # as the controller does when the inspection arrives
    reprice(s, est)  # and before every decision
    s.step(1.0)
    return s, est, s.allocation.gpus["heavy"]


@pytest.mark.parametrize("job_max", [None, 3])
def test_a_comm_heavy_job_stays_in_one_node_when_spreading_is_slower(job_max):
    s, est, gpus = plan_profiled(SLOW, job_max)
    one_node = est.shape_rate("heavy", (2,), ("cpu",))
    across = est.shape_rate("heavy", (2, 1), ("cpu", "cpu"))
    # 32 MB over 12.5 MB/s between nodes: seconds per step across, against ~0.13 s in one node
    assert across < one_node / 5
    assert gpus == (6, 7)  # both in node B: the faster option by the estimator's figures
    consolidated, _ = est.curve("heavy", 8)
    assert consolidated[3] > 1.2 * consolidated[2]  # where 3 would sit in one node: what it was planned on before
    r = s.table.row["heavy"]
    curve = s.curves.rate[s.table.model[r]]
    assert curve[2] == pytest.approx(one_node) and curve[3] == pytest.approx(across)  # what the policy saw
    assert s.table.max_gpus[r] == 2  # a third GPU would slow it down, even where the user allowed 3
    assert curve[4] > curve[2]  # 4 in one node (once the others leave) is faster, but only through 3


def test_the_choice_flips_when_the_link_between_nodes_is_fast():
    s, est, gpus = plan_profiled(FAST, 3)
    one_node = est.shape_rate("heavy", (2,), ("cpu",))
    across = est.shape_rate("heavy", (2, 1), ("cpu", "cpu"))
    assert across > 1.1 * one_node
    assert gpus == (3, 6, 7)  # 1 in A + 2 in B
    assert s.curves.rate[s.table.model[s.table.row["heavy"]], 3] == pytest.approx(across)


def test_the_reachable_shapes_follow_the_placer():
    s = with_blockers(SLOW)
    # best fit (the fullest node that holds it), then the emptiest node first; no further than what is free
    assert s.placer.reachable((), 8) == [[(0, 1)], [(1, 2)], [(0, 1), (1, 2)]]
    # a job holding 1 in A and 2 in B shrinks to its node B first and grows nowhere (nothing is free)
    s.placer.claim((3, 6, 7))
    assert s.placer.reachable((3, 6, 7), 8) == [[(1, 1)], [(1, 2)], [(0, 1), (1, 2)]]
    assert s.placer.free.sum() == 0  # nothing was taken to find them


def test_a_spread_job_is_shrunk_into_one_node_once_its_profile_says_so():
    """Placed on 3 GPUs across the slow link before its profile arrived, the job is shrunk to the 2 it
    holds in node B at the first decision after its inspection."""
    s = with_blockers(SLOW)
    s.submit(JobSpec("heavy", 1.0, 1, 1e6, "default", max_gpus=3), 1.0)
    s.step(1.0)
    assert s.allocation.gpus["heavy"] == (3, 6, 7)  # the default curve: 3 GPUs beat 2
    est = Estimates(s.cluster)
    est.inspected("heavy", "comm-heavy", "cpu", comm_heavy())
    rate, useful = planned_curve(s, est, "heavy", by_placement=True)
    s.set_curve("heavy", rate, useful)
    reprice(s, est)
    step = s.step(2.0)
    assert [(a.kind.value, a.new) for a in step.plan.actions] == [("shrink", (6, 7))]


@pytest.mark.parametrize("links", [SLOW, FAST])
def test_a_job_without_a_profile_gets_the_plan_it_got_before(links):
    s = with_blockers(links)
    est = Estimates(s.cluster)
    s.submit(JobSpec("plain", 1.0, 1, 1e6, "default", max_gpus=3), 1.0)
    before = s.curves.rate.copy()
    reprice(s, est)  # it has no profile: nothing to re-price
    s.step(1.0)
    assert np.array_equal(s.curves.rate, before)
    assert s.allocation.gpus["plain"] == (3, 6, 7)


def test_without_measured_links_or_with_one_node_counts_are_priced_consolidated():
    assert not by_placement(two_nodes(LinkSpec()))  # the defaults: nothing is known of this cluster's links
    assert not by_placement(Cluster.homogeneous(1, 4, gpu_type="cpu", links=SLOW))
    s = with_blockers(LinkSpec())
    est = Estimates(s.cluster)
    s.submit(JobSpec("heavy", 1.0, 1, 1e6, "default"), 1.0)
    est.inspected("heavy", "comm-heavy", "cpu", comm_heavy())
    rate, useful = planned_curve(s, est, "heavy", by_placement=False)
    assert np.array_equal(rate, est.curve("heavy", 8)[0]) and useful == est.curve("heavy", 8)[1]
