"""Elastic data-parallel training that resizes in place.

A training script (any rank, any world size, also standalone)::

    import coddl.elastic as elastic

    with elastic.session() as s:
        model, opt = s.wrap(model, opt)
        for x, y in s.batches(dataset, global_batch=256, steps=10_000):
            loss = loss_fn(model(x), y)
            loss.backward()
            s.step(loss)            # all-reduce, optimizer step, zero_grad, progress; resizes happen here

An executor, for one job on this host::

    job = ElasticJob(JobConfig("j1", "examples/train_mlp.py", Path("runs/j1")), WorkerPool())
    job.start([0, 1]); job.resize([0, 1, 2, 3]); job.poll(); job.stop()

The protocol between the two (env vars, store keys) is documented in ``coddl.elastic.protocol``.
"""

from coddl.elastic.coordinator import Coordinator
from coddl.elastic.job import ElasticJob, JobConfig, JobPhase, JobReport
from coddl.elastic.pool import ColdLauncher, WorkerPool
from coddl.elastic.protocol import Membership, Progress, WorkerEnv
from coddl.elastic.session import Departed, Session, session
from coddl.elastic.worker import WorkerSpec, run_worker

__all__ = [
    "ColdLauncher", "Coordinator", "Departed", "ElasticJob", "JobConfig", "JobPhase", "JobReport",
    "Membership", "Progress", "Session", "WorkerEnv", "WorkerPool", "WorkerSpec", "run_worker", "session",
]
