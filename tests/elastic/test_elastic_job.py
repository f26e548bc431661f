"""End to end: real worker processes from the warm pool, real gloo, a real TCPStore.

The workers run ``elastic_trainer.py``, which logs every applied step's samples; the checks read
those logs from the outside.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from coddl.elastic import state
from coddl.elastic.data import Position, SampleOrder
from coddl.elastic.job import ElasticJob, JobConfig, JobPhase
from coddl.elastic.pool import ColdLauncher, WorkerPool
from coddl.elastic.protocol import Progress
from coddl.elastic.inspection import INSPECT_SPLITS, INSPECT_STEPS, INSPECT_WARMUP

pytestmark = pytest.mark.slow

TRAINER = str(Path(__file__).with_name("elastic_trainer.py"))
SAMPLES = 480
GLOBAL_BATCH = 48


@pytest.fixture(scope="module")
def pool() -> WorkerPool:
    pool = WorkerPool()
    pool.warm()
    return pool


def config(job_dir: Path, steps: int, **overrides) -> JobConfig:
    env = {"STEPS": str(steps), "GLOBAL_BATCH": str(GLOBAL_BATCH), "SAMPLES": str(SAMPLES), "STEP_SLEEP": "0.01"}
    defaults = dict(job_id=job_dir.name, entry=TRAINER, job_dir=job_dir, env=env, report_s=0.02, verify=True,
                    pg_timeout_s=20.0, checkpoint_s=0.0, start_timeout_s=60.0)
    return JobConfig(**{**defaults, **overrides})


def wait_for_step(job: ElasticJob, step: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (p := job.poll().progress) is None or p.step < step:
        assert time.monotonic() < deadline, f"job did not reach step {step}: {job.poll()}"
        time.sleep(0.01)


def wait_for_generation(job: ElasticJob, generation: int, timeout: float = 60.0) -> Progress:
    deadline = time.monotonic() + timeout
    while (p := job.poll().progress) is None or p.generation < generation:
        assert time.monotonic() < deadline, f"no progress report from generation {generation}: {job.poll()}"
        time.sleep(0.01)
    return p


def wait_for_running(job: ElasticJob, timeout: float = 60.0) -> None:
    """Until the job's resize is over (its new generation may report progress a little before)."""
    deadline = time.monotonic() + timeout
    while (phase := job.poll().phase) is not JobPhase.RUNNING:
        assert time.monotonic() < deadline and not phase.settled, f"the job did not settle into running: {job.poll()}"
        time.sleep(0.01)


def assert_replicas_identical(job: ElasticJob, generation: int, world: int) -> None:
    """Every rank of ``generation`` reported the same hash of its model and optimizer state."""
    hashes = job.coordinator.state_hashes(generation, world)
    assert len(set(hashes)) == 1, hashes


def step_logs(job_dir: Path) -> dict[int, list[list[tuple[int, int]]]]:
    """step → one list of (epoch, index) per rank that applied it."""
    steps: dict[int, list[list[tuple[int, int]]]] = defaultdict(list)
    for path in job_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            assert rec["global_batch"] == GLOBAL_BATCH
            steps[rec["step"]].append([tuple(s) for s in rec["samples"]])
    return steps


def test_grow_and_shrink_in_place_lose_and_repeat_no_sample(tmp_path: Path, pool: WorkerPool) -> None:
    steps = 100
    with ElasticJob(config(tmp_path / "resize", steps), pool) as job:
        job.start([0, 1])
        wait_for_step(job, 15)
        assert job.resize([0, 1, 2]) < 10
        assert job.poll().slots == (0, 1, 2)
        assert_replicas_identical(job, generation=2, world=3)
        grown = wait_for_generation(job, 2)
        assert grown.world_size == 3 and grown.global_batch == GLOBAL_BATCH and 0 < grown.regroup_s < 10
        wait_for_step(job, 40)
        assert job.resize([0]) < 10
        assert job.poll().slots == (0,)
        assert_replicas_identical(job, generation=3, world=1)
        report = job.wait(60)
    assert report.phase is JobPhase.FINISHED and report.failures == 0
    assert report.progress.step == steps

    logs = step_logs(tmp_path / "resize")
    assert sorted(logs) == list(range(1, steps + 1))
    assert {len(ranks) for ranks in logs.values()} == {1, 2, 3}, "the job never ran at some size"
    order = SampleOrder(SAMPLES, seed=0)
    for step, ranks in logs.items():
        trained = [s for rank_samples in ranks for s in rank_samples]
        # The global batch stays 48 whatever the world size, and it is exactly the next 48 samples of
        # the seeded per-epoch permutations: nothing lost, nothing repeated.
        expected = order.take(Position().advanced((step - 1) * GLOBAL_BATCH, SAMPLES), GLOBAL_BATCH)
        assert sorted(trained) == sorted(zip(expected.epochs, expected.indices)), f"step {step}"
    per_epoch: dict[int, list[int]] = defaultdict(list)
    for ranks in logs.values():
        for rank_samples in ranks:
            for epoch, index in rank_samples:
                per_epoch[epoch].append(index)
    for epoch in range(steps * GLOBAL_BATCH // SAMPLES):
        assert sorted(per_epoch[epoch]) == list(range(SAMPLES)), f"epoch {epoch}"


def test_killed_worker_leaves_survivors_training(tmp_path: Path, pool: WorkerPool) -> None:
    with ElasticJob(config(tmp_path / "kill-one", 120), pool) as job:
        job.start([0, 1, 2])
        wait_for_step(job, 20)
        os.kill(job.worker_pids()[1], signal.SIGKILL)
        report = job.wait(60)
        assert report.phase is JobPhase.FINISHED
        assert (report.failures, report.restarts) == (1, 0)
        assert report.slots == () and report.progress.step == 120
        assert job.coordinator.membership.generation == 2  # start, then the survivors' membership
        assert_replicas_identical(job, generation=2, world=2)


def test_survivor_killed_while_a_grow_starts_up(tmp_path: Path, pool: WorkerPool) -> None:
    """The grow is not announced yet when a survivor dies: the failure membership supersedes it, the new
    worker joins that instead, and nobody waits out the process-group timeout."""
    cfg = config(tmp_path / "kill-in-grow", 150)
    cfg = JobConfig(**{**cfg.__dict__, "env": {**cfg.env, "START_SLEEP": "1.5"}})
    with ElasticJob(cfg, pool) as job:
        job.start([0, 1])
        wait_for_step(job, 10)
        with ThreadPoolExecutor(1) as grow:
            resized = grow.submit(job.resize, [0, 1, 2])
            time.sleep(0.5)
            assert job.poll().phase is JobPhase.RESIZING and job.poll().generation == 2
            os.kill(job.worker_pids()[1], signal.SIGKILL)
            assert resized.result(timeout=60) < cfg.pg_timeout_s / 2
        assert job.poll().slots == (0, 2) and job.poll().generation == 3
        assert_replicas_identical(job, generation=3, world=2)
        report = job.wait(60)
    assert report.phase is JobPhase.FINISHED and report.failures == 1 and report.progress.step == 150


def test_grow_requested_as_training_ends(tmp_path: Path, pool: WorkerPool) -> None:
    """Training ends while the new worker starts up: it must leave cleanly, not wait for the others."""
    cfg = config(tmp_path / "late-grow", 40)
    cfg = JobConfig(**{**cfg.__dict__, "env": {**cfg.env, "START_SLEEP": "1.0"}})
    with ElasticJob(cfg, pool) as job:
        job.start([0, 1])
        wait_for_step(job, 30)
        assert job.resize([0, 1, 2]) < cfg.pg_timeout_s / 2
        report = job.wait(30)
    assert report.phase is JobPhase.FINISHED and report.failures == 0 and report.progress.step == 40


def test_all_workers_killed_restart_from_checkpoint(tmp_path: Path, pool: WorkerPool) -> None:
    job_dir = tmp_path / "kill-all"
    with ElasticJob(config(job_dir, 120, checkpoint_s=0.1), pool) as job:
        job.start([0, 1])
        wait_for_step(job, 30)
        first = set(job_dir.glob("start-*.json"))
        for pid in job.worker_pids().values():
            os.kill(pid, signal.SIGKILL)
        report = job.wait(60)
    assert report.phase is JobPhase.FINISHED and report.restarts == 1
    assert report.progress.step == 120
    resumed = [json.loads(p.read_text())["step"] for p in set(job_dir.glob("start-*.json")) - first]
    assert len(resumed) == 2 and min(resumed) >= 20, resumed  # from the checkpoint, not from step 0


def test_stop_then_start_resumes(tmp_path: Path, pool: WorkerPool) -> None:
    job_dir = tmp_path / "suspend"
    with ElasticJob(config(job_dir, 80), pool) as job:
        job.start([0, 1])
        wait_for_step(job, 20)
        job.stop()
        stopped_at = job.poll().progress.step
        assert job.poll().phase is JobPhase.STOPPED and (job_dir / "checkpoint.pt").exists()
        job.start([3])
        report = job.wait(60)
    assert report.phase is JobPhase.FINISHED and report.progress.step == 80
    resumed = sorted(json.loads(p.read_text())["step"] for p in job_dir.glob("start-*.json"))
    assert resumed == [0, 0, stopped_at]


def test_cold_launched_workers_train_and_stop_cleanly(tmp_path: Path) -> None:
    """Fresh interpreters (``python -m coddl.elastic``), as the checkpoint-restart baseline uses."""
    job_dir = tmp_path / "cold"
    with ElasticJob(config(job_dir, 30), ColdLauncher()) as job:
        job.start([0, 1])
        report = job.wait(120)
    assert report.phase is JobPhase.FINISHED and report.failures == 0 and report.progress.step == 30
    assert not any("Traceback" in p.read_text() for p in (job_dir / "logs").iterdir())


INSPECTED_STEPS = 24


def run_inspected(job_dir: Path, pool: WorkerPool, inspect: bool) -> tuple[dict, dict, object]:
    """Train on 2 workers, growing to 3 after step 13 (usually inside the inspected steps); the final
    checkpoint, each applied step's samples per rank, and rank 0's inspection report."""
    cfg = config(job_dir, INSPECTED_STEPS, verify=False)
    if inspect:  # what the controller sets for a job it has no profile of
        cfg = dataclasses.replace(cfg, env={**cfg.env, "CODDL_INSPECT": "1"})
    with ElasticJob(cfg, pool) as job:
        job.start([0, 1])
        wait_for_step(job, 13)  # steps 10-12 timed on 2 workers: 24 samples whole, halved, quartered
        job.resize([0, 1, 2])
        report = job.wait(60)
    assert report.phase is JobPhase.FINISHED and report.progress.step == INSPECTED_STEPS
    logs: dict[int, list[list[tuple[int, int]]]] = defaultdict(list)
    for path in job_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            logs[rec["step"]].append(sorted(tuple(s) for s in rec["samples"]))
    return state.load_checkpoint(job_dir), logs, report.inspection


def test_inspection_keeps_every_sample_once_and_the_same_updates(tmp_path: Path, pool: WorkerPool) -> None:
    plain, plain_logs, none = run_inspected(tmp_path / "plain", pool, inspect=False)
    timed, timed_logs, inspection = run_inspected(tmp_path / "timed", pool, inspect=True)
    assert none is None

    # every applied step is logged once per rank with this rank's whole slice, micro-batches or not:
    # each global batch is exactly the next 48 samples, as without inspection
    assert sorted(timed_logs) == sorted(plain_logs) == list(range(1, INSPECTED_STEPS + 1))
    order = SampleOrder(SAMPLES, seed=0)
    for logs in (plain_logs, timed_logs):
        for step, ranks in logs.items():
            expected = order.take(Position().advanced((step - 1) * GLOBAL_BATCH, SAMPLES), GLOBAL_BATCH)
            assert sorted(s for r in ranks for s in r) == sorted(zip(expected.epochs, expected.indices)), step

    # the same updates: parameters and Adam's moments agree to float rounding of the summed gradient
    assert timed["step"] == plain["step"] == INSPECTED_STEPS and timed["samples"] == plain["samples"]
    for name, p in plain["model"].items():
        assert torch.allclose(timed["model"][name], p, rtol=1e-5, atol=1e-6), name
    for k, s in plain["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(timed["optimizer"]["state"][k][key], s[key], rtol=1e-4, atol=1e-9), (k, key)

    # rank 0 timed its local batch (24 on 2 workers, 16 on 3) whole and as halves, quarters and
    # sixteenths, in the inspected steps after the warm-up
    assert inspection is not None and inspection.global_batch == GLOBAL_BATCH and inspection.local_batch is None
    params = 16 * 32 + 32 + 32 + 1
    assert inspection.param_bytes == 4 * params
    sizes = {b for b, _ in inspection.timings}
    assert {24, 12, 6} <= sizes <= {24, 12, 6, 16, 8, 4, 2, 1} and sizes & {2, 1}
    # a local batch of 16 or more splits into as many micro-batches as asked: 1 + 2 + 4 + 16 per round
    assert len(inspection.timings) == sum(INSPECT_SPLITS[s % len(INSPECT_SPLITS)]
                                          for s in range(INSPECT_STEPS - INSPECT_WARMUP))
    # each timed batch slept STEP_SLEEP (10 ms) inside its forward and backward pass
    assert all(0.01 <= s < 5 for _, s in inspection.timings) and inspection.step_overhead_s >= 0


BALANCED_STEPS = 300  # the grow after step 30 must land well before the end on a loaded machine


def run_on_devices(job_dir: Path, pool: WorkerPool, devices: dict[int, tuple[str, float]]) -> tuple[dict, dict]:
    """BALANCED_STEPS steps on slots 0 and 1, grown onto slot 2 after step 30; devices emulated by the
    trainer (``fast`` computes 0.5 ms per sample, ``slow`` 1.5 ms). The final checkpoint, and per
    worker the local batch of every step it applied."""
    cfg = config(job_dir, BALANCED_STEPS, verify=False, device_of_slot=devices)
    cfg = dataclasses.replace(cfg, env={**cfg.env, "STEP_SLEEP": "0", "DEVICE_S_PER_SAMPLE": "fast=0.0005,slow=0.0015"})
    with ElasticJob(cfg, pool) as job:
        job.start([0, 1])
        wait_for_step(job, 30)
        job.resize([0, 1, 2])
        report = job.wait(120)
    assert report.phase is JobPhase.FINISHED and report.progress.step == BALANCED_STEPS
    sizes: dict[str, dict[int, int]] = defaultdict(dict)
    for path in job_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            sizes[path.stem.removeprefix("steps-")][rec["step"]] = len(rec["samples"])
    return state.load_checkpoint(job_dir), sizes


def test_ranks_of_two_device_types_split_the_batch_by_speed(tmp_path: Path, pool: WorkerPool) -> None:
    """CoDDL's dynamic load balancing: a job on a fast and a slow device gives the fast one about three
    times the samples (it computes three times faster), re-balanced when a second slow device joins —
    with the global batch, every sample once and the updates of an equal split."""
    mixed, sizes = run_on_devices(tmp_path / "mixed", pool, {0: ("fast", 1.0), 1: ("slow", 1.0), 2: ("slow", 1.0)})
    equal, equal_sizes = run_on_devices(tmp_path / "equal", pool, {0: ("fast", 1.0), 1: ("fast", 1.0), 2: ("fast", 1.0)})

    # every step is the next 48 samples of the stream, whatever the split (checked per rank below)
    logs = step_logs(tmp_path / "mixed")
    order = SampleOrder(SAMPLES, seed=0)
    assert sorted(logs) == list(range(1, BALANCED_STEPS + 1))
    for step, ranks in logs.items():
        expected = order.take(Position().advanced((step - 1) * GLOBAL_BATCH, SAMPLES), GLOBAL_BATCH)
        assert sorted(s for r in ranks for s in r) == sorted(zip(expected.epochs, expected.indices)), step

    # one type: the equal split, 24 / 24 then 16 / 16 / 16, at every step
    assert set(equal_sizes["w0"].values()) == {24, 16} and set(equal_sizes["w2"].values()) == {16}
    # two types: the prior (equal speeds) starts at 24 / 24, then measured ~3 : 1 → about 36 / 12
    fast, slow, joined = sizes["w0"], sizes["w1"], sizes["w2"]
    assert fast[1] == slow[1] == 24
    settled = [fast[s] for s in range(15, 31) if s in fast and s not in joined]
    assert settled and min(settled) >= 30, fast
    # after the grow the newcomer is of a measured type: balanced from its first step (an equal split
    # would be 16 each), about 28 / 10 / 10
    first = min(joined)
    assert fast[first] >= 22 and joined[first] <= 13 and fast[first] + slow[first] + joined[first] == GLOBAL_BATCH
    assert all(fast[s] > joined[s] for s in joined)

    # the updates are those of the equal split, up to the rounding of differently summed gradients
    assert mixed["step"] == equal["step"] == BALANCED_STEPS and mixed["samples"] == equal["samples"]
    for name, p in equal["model"].items():
        assert torch.allclose(mixed["model"][name], p, rtol=1e-4, atol=1e-5), name


def test_ranks_follow_the_slots_not_the_order_workers_joined(tmp_path: Path, pool: WorkerPool) -> None:
    """A ring all-reduce follows the ranks: grown from slots 0 and 2 onto 0-3, the job must run its
    ring 0, 1, 2, 3 (one node's GPUs next to each other), not 0, 2, 1, 3 in the order workers came."""
    # long enough that the two survivors cannot finish the job before the joiners start (on a loaded
    # machine 35 steps of 10 ms went by first, and the job ended on slots ())
    with ElasticJob(config(tmp_path / "order", 400, verify=False), pool) as job:
        job.start([0, 2])
        wait_for_step(job, 5)
        job.resize([0, 1, 2, 3])
        assert job.poll().slots == (0, 1, 2, 3)
        wait_for_generation(job, 2)
        wait_for_running(job)
        job.resize([3, 0])  # the caller's order is the rank order
        assert job.poll().slots == (3, 0)
        assert job.wait(60).phase is JobPhase.FINISHED
