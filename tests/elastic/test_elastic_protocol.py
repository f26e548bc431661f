"""The coordinator/worker protocol: env vars, records, and the store they meet in."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from coddl.elastic.coordinator import Coordinator
from coddl.elastic.kvstore import KVClient
from coddl.elastic.protocol import GENERATION_KEY, Membership, Progress, WorkerEnv, membership_key, split_addr


def test_worker_env_round_trips_through_the_environment() -> None:
    env = WorkerEnv(store_addr="10.0.0.5:2900", store_key=b"\x01" * 32, job_id="j", worker_id="w3", generation=4, job_dir=Path("/tmp/j"),
                    pg_timeout_s=12.0, checkpoint_s=5.0, report_s=0.1, seed=3, verify=True)
    assert WorkerEnv.from_environ(env.to_environ()) == env
    standalone = WorkerEnv.from_environ({})
    assert standalone.store_addr is None and standalone.store_key is None and standalone.job_dir is None
    assert standalone.generation == 1


def test_split_addr() -> None:
    assert split_addr("10.0.0.5:2900") == ("10.0.0.5", 2900)
    assert split_addr("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError, match="host:port"):
        split_addr("nohost")


def test_records_round_trip() -> None:
    m = Membership(3, ("w0", "w4"), "resize")
    assert Membership.loads(m.dumps()) == m
    p = Progress(generation=3, world_size=2, step=10, epoch=1, samples=640, samples_per_s=100.0,
                 steps_per_s=1.5, loss=None, global_batch=64, regroup_s=0.2, time=1.0)
    assert Progress.loads(p.dumps()) == p


def test_coordinator_posts_memberships_a_worker_can_read() -> None:
    coordinator = Coordinator()
    host, port = split_addr(coordinator.address)
    worker = KVClient(host, port, coordinator.secret, datetime.timedelta(seconds=5))
    assert worker.add(GENERATION_KEY, 0) == 0
    coordinator.post(["w0", "w1"], "start")
    second = coordinator.post(["w0"], "failure")
    assert worker.add(GENERATION_KEY, 0) == 2 == second.generation
    assert Membership.loads(worker.get(membership_key(2))) == second == coordinator.membership
    assert coordinator.progress() is None and not coordinator.finished()
    assert not coordinator.wait_complete(2, timeout_s=0.01)
