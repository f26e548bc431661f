"""A policy over queues asked twice in one decision, before its first answer is carried out.

The scheduler does that when jobs share GPUs: it asks the policy again with the GPUs that packing
saves added to the capacity (``Scheduler._with_sharing``). A queue whose inputs did not change keeps
its policy's answer without running it again; that answer must be the one it gave, not the shares
the jobs held before it (which once made a second half-GPU job never start beside the first)."""

from __future__ import annotations

import numpy as np

from coddl.core import Cluster, JobSpec
from coddl.core.cluster import Node
from coddl.perf.curves import CurveTable
from coddl.placement.sharing import SharingRule
from coddl.policies import make_policy
from coddl.queues import QueueSet
from coddl.queues.policy import QueuedPolicy
from coddl.scheduler import Scheduler

LIN = CurveTable.from_points({"lin": {k: float(k) for k in range(1, 9)}})


def half(jid: str, at: float) -> JobSpec:
    return JobSpec(jid, at, 1, 1e6, "lin", max_gpus=1, gpu_fraction=0.5)


def test_a_queue_asked_again_before_its_answer_is_carried_out_gives_the_same_answer():
    s = Scheduler(Cluster.for_gpus(2, 2), QueuedPolicy(QueueSet(), lambda: make_policy("fifo")), LIN)
    s.submit(JobSpec("a", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
    s.submit(JobSpec("b", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
    ctx = s.context(0.0)
    first = np.asarray(s.policy.allocate(ctx).gpus).copy()
    assert first.tolist() == [1, 1]
    again = np.asarray(s.policy.allocate(ctx).gpus)  # nothing carried out: the shares are still 0
    assert again.tolist() == first.tolist()


def test_once_carried_out_the_shares_stand_as_before():
    s = Scheduler(Cluster.for_gpus(2, 2), QueuedPolicy(QueueSet(), lambda: make_policy("fifo")), LIN)
    s.submit(JobSpec("a", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
    assert [(a.kind.value, a.job_id) for a in s.step(0.0).plan] == [("start", "a")]
    assert s.step(1.0).plan.actions == []


def test_a_second_half_gpu_job_joins_the_first_on_a_real_servers_policy():
    # a host of two slots and two cores (as `coddl server start --gpus 2` on a two-core machine): the
    # queue's entitlement of cores stays 2 when the capacity it is offered grows to 3 GPUs
    host = Cluster(nodes=(Node(name="host", gpus=2, cpus=2),))
    for policy in ("fifo", "max-min", "afs-p"):
        s = Scheduler(host, QueuedPolicy(QueueSet(), lambda: make_policy(policy)), LIN,
                      sharing=SharingRule.parse("pack"))
        s.submit(half("a", 0.0), 0.0)
        assert [(a.kind.value, a.job_id, a.new) for a in s.step(0.0).plan] == [("start", "a", (0,))], policy
        s.submit(half("b", 1.0), 1.0)
        plan = [(a.kind.value, a.job_id, a.new) for a in s.step(1.0).plan]
        assert plan == [("start", "b", (0,)), ("cotenants", "a", (0,))], policy
