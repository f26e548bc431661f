"""The controller: the real world's driver of the same ``Scheduler`` the simulator drives.

Events come from the store (submissions, cancel requests) and from the executor (progress,
throughput, applied actions, exits, lost workers). The scheduler's clock is wall-clock seconds since
the state was created (``Store.epoch``), so it survives restarts. The policy runs when something
changed — an arrival, an exit, a cancel — when the policy asked to be woken, and at most once per
period to fold in corrected throughput estimates. Every plan is persisted before the executor gets
it; every state change is persisted before the scheduler forgets the job.

Estimation: an elastic job the store holds no profile of is launched with inspection on
(``CODDL_INSPECT``): its first steps time its compute at several local batches, and its report
becomes the job's profile (``coddl.runtime.estimation``), stored, after which the job is planned on
the estimator's curve for this cluster (``Scheduler.set_curve``) and placed with the estimator as the
placer's scorer. With a cluster spec's measured links on more than one node, each count of GPUs
is priced at the placement the placer would give it at that decision (``estimation.planned_curve``):
a communication-heavy job that would run slower on 3 GPUs across two nodes than on 2 in one sees
that in its curve, and its useful GPUs stop at 2. Until then a known model name plans it on that model's measured curve, any other
on the conservative default (``coddl.runtime.models``).

Online correction: each progress report is one throughput sample. For a profiled job it is a row at
the placement it ran on, folded into the job's belief by the estimator's own correction once per
period; the corrected curve replaces the job's when it moved by more than ``speed_tolerance``
anywhere. For any other job measured ÷ predicted (the curve at the job's world size) feeds a
per-job ``OnlineCorrection``; the factor reaches the scheduler (``set_speed``) at the next period,
and only when it moved by more than ``speed_tolerance`` — a policy re-run on every noisy sample
would resize jobs back and forth for nothing.

Sharing a GPU (``--sharing``; ``coddl.placement.sharing``): a job that asked for part of a GPU gets
its share in its workers' environment (``coddl.elastic.gpu_share`` limits it there) and is not
inspected. While it has co-tenants its reports correct the co-location model instead of its own
speed: measured ÷ its solo prediction is the share of its speed it keeps beside them
(``_observe_colocation``); alone, its reports are its own as above.

Restart costs: a restartable command job is resized by restart; the scheduler grows it only when
that saves more than the restart costs, which is measured from the job's own restarts
(``coddl.runtime.restart_cost``; the stored ones count after a controller restart).

Recovery: on start, the store hands back every unfinished job; they are submitted again with the
work they have left, the GPU-seconds they had received and their first start time (persisted each
period and at each plan), and the first plan resumes the ones that were running from their
checkpoints.
Finished, failed and cancelled jobs stay as they are.

A job that can never fit this cluster (``coddl.runtime.limits.fit_problem``) is held: it stays queued
with the reason as its message and never reaches the policy, where a job no allocation can satisfy
could stall a strict-order policy's queue. A job whose stored spec this version no longer accepts
fails with that reason instead of stopping the controller.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from coddl.core.job import JobId, JobStatus
from coddl.elastic.gpu_share import GpuShare
from coddl.perf.correction import OnlineCorrection
from coddl.policies.base import ThroughputSample
from coddl.runtime.executors.base import (
    AppliedEvent,
    Executor,
    ExitEvent,
    InspectionEvent,
    LaunchSpec,
    ProgressEvent,
    NoticeEvent,
    WorkerLostEvent,
    WorkersEvent,
)
from coddl.runtime.estimation import Estimates, by_placement, planned_curve, reprice
from coddl.runtime.lease import LeaseLost
from coddl.runtime.limits import fit_problem, held_message
from coddl.runtime.models import curve_for
from coddl.runtime.restart_cost import RESTARTS, RestartCost
from coddl.runtime.spec import DEFAULT_MODEL, STORED, JobFile, SpecError, validate
from coddl.runtime.store import JobView, ProgressUpdate, Store
from coddl.scheduler import Scheduler

log = logging.getLogger("coddl.controller")

SOLO_SAMPLES = 3  # reports alone after which a sharing job's solo speed is its own, not the prior's


@dataclass(frozen=True)
class ControllerSettings:
    period_s: float = 5.0  # the policy re-runs at most this often for corrected throughputs
    min_tick_s: float = 0.2  # events closer together than this are handled in one tick
    speed_tolerance: float = 0.10  # push a new speed factor only when it moved by more than this
    sample_s: float = 2.0  # keep at most one progress report per job this often in its history
    job_inspection: bool = True  # profile elastic jobs from their first steps and plan them with the estimator


class Controller:
    def __init__(self, store: Store, scheduler: Scheduler, executor: Executor, jobs_dir: Path,
                 settings: ControllerSettings = ControllerSettings()) -> None:
        self.store = store
        self.scheduler = scheduler
        self.executor = executor
        self.jobs_dir = Path(jobs_dir)
        self.settings = settings
        self.epoch = store.epoch()
        self._corrections: dict[JobId, OnlineCorrection] = {}
        self._pushed: dict[JobId, float] = {}  # the speed factor the scheduler has now
        self._sampled: dict[JobId, float] = {}  # when a job's history last kept a report
        self._unsampled: dict[JobId, ProgressUpdate] = {}  # the newest report it did not keep
        self._held: set[JobId] = set()  # jobs that can never fit this cluster: queued, never planned
        self.estimates = Estimates(scheduler.cluster)  # inspected jobs: profiles, beliefs, curves
        self._labels: dict[JobId, str] = {}  # the model name each job's profile rows carry
        self._by_placement = by_placement(scheduler.cluster)
        self._restart_costs: dict[JobId, RestartCost] = {}  # restartable command jobs: resize = restart
        scheduler.placer.scorer = self._score
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._soon: list[Callable[[], None]] = []  # changes to the scheduler from other threads
        self._soon_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="coddl-controller", daemon=True)
        self._next_period = 0.0
        executor.notify = self.wake
        # seconds and actions of each scheduling decision, for /metrics (a no-op unless the server sets it)
        self.observe_decision: Callable[[float, int], None] = lambda seconds, actions: None

    # ------------------------------------------------------------------ lifecycle
    def now(self) -> float:
        return time.time() - self.epoch

    def start(self) -> tuple[int, int]:
        """Take over every unfinished job from the store, then run; returns how many jobs were
        recovered and how many workers of a previous server were killed."""
        now = self.now()
        recovered, orphans = self.store.recover(time.time())
        reaped = self.executor.reap(orphans)
        for job in recovered:
            self._take(job, now)
        if recovered:
            log.info("recovered %d unfinished jobs (%d leftover workers killed)", len(recovered), reaped)
        self._next_period = time.monotonic() + self.settings.period_s
        self._thread.start()
        self.wake()  # recovered jobs are planned at once, not at the first period
        return len(recovered), reaped

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()
        self._thread.join(timeout=30)

    def abandon(self) -> None:
        """Stop at once, without waiting for a tick in progress (its writes are fenced anyway)."""
        self._stopping.set()
        self._wakeup.set()
        self._thread.join(timeout=1)

    def wake(self) -> None:
        self._wakeup.set()

    def call_soon(self, change: Callable[[], None]) -> None:
        """Run ``change`` on the controller's thread before its next decision (which it forces):
        how another thread (an admin's request) changes what the scheduler works with."""
        with self._soon_lock:
            self._soon.append(change)
        self.wake()

    def _run(self) -> None:
        last = 0.0
        while not self._stopping.is_set():
            self._wakeup.wait(timeout=max(0.0, self._timeout()))
            if self._stopping.is_set():
                return
            gap = self.settings.min_tick_s - (time.monotonic() - last)
            if gap > 0:
                time.sleep(gap)
            self._wakeup.clear()
            last = time.monotonic()
            try:
                self.tick()
            except LeaseLost:
                return  # another server drives the jobs now: act on nothing more
            except Exception:  # noqa: BLE001 - the loop must outlive a bad tick; the store keeps the truth
                log.exception("controller tick failed")

    def _timeout(self) -> float:
        t = self._next_period - time.monotonic()
        w = self.scheduler.next_wakeup(self.now()) if self.scheduler.table.n else None
        if w is not None:
            t = min(t, w - self.now())
        return t

    # ------------------------------------------------------------------ one round
    def tick(self) -> None:
        with self._soon_lock:
            changes, self._soon = self._soon, []
        for change in changes:
            change()
            self.scheduler.dirty = True
        now = self.now()
        self._ingest(now)
        self._cancel(now)
        self._drain(now)
        if time.monotonic() >= self._next_period:
            self._next_period = time.monotonic() + self.settings.period_s
            self._push_speeds()
            self._persist_service(now)
        w = self.scheduler.next_wakeup(now) if self.scheduler.table.n else None
        if w is not None and w <= now:
            self.scheduler.dirty = True
        if self.scheduler.dirty:
            self._plan(now)

    def _admit(self, job: JobView, spec: JobFile, now: float) -> None:
        jid = str(job.id)
        curve = curve_for(self.scheduler.curves, spec.model)
        arrival = min(max(0.0, job.submitted_at - self.epoch), now)
        first_start = None if job.started_at is None else min(max(arrival, job.started_at - self.epoch), now)
        self.scheduler.submit(spec.to_core(jid, arrival, job.owner, curve, job.steps_done), now,
                              attained_service=job.attained_service, first_start=first_start)
        self._labels[jid] = spec.model if spec.model != DEFAULT_MODEL else f"job-{jid}"
        env = spec.environment()
        # A job that may share a GPU is not inspected: it never resizes (what a profile plans), and its
        # first steps may run beside co-tenants, which would make the profile measure them too.
        sharing = self.scheduler.sharing is not None and spec.shares_gpu
        if sharing:
            env |= GpuShare(spec.gpu_fraction, spec.shareable, spec.gpu_memory_gb).to_environ()
        inspect = spec.kind == "elastic" and self.settings.job_inspection and not sharing
        stored = self.store.profile(job.id) if inspect else None
        if stored is not None:
            try:
                self.estimates.restore(jid, stored)
                self._plan_on_estimate(jid)
            except (KeyError, TypeError, ValueError) as e:  # a profile this version cannot read: inspect again
                log.warning("job %s: stored profile unusable (%s); inspecting it again", jid, e)
                self.estimates.forget(jid)
                stored = None
        if stored is None and inspect:
            env["CODDL_INSPECT"] = "1"
        if spec.kind == "command" and spec.restartable:
            cost = RestartCost(spec.grace_s, [e.latency_s for e in self.store.events(job.id)
                                              if e.kind == "applied" and e.action in RESTARTS and e.latency_s])
            self._restart_costs[jid] = cost
            self.scheduler.set_resize_cost(jid, cost.seconds())
        entry, args = spec.entry_and_args()
        self.executor.register(LaunchSpec(jid, entry, args, env, self.jobs_dir / jid, job.owner,
                                          spec.kind, spec.restartable, spec.grace_s))
        self._corrections[jid] = OnlineCorrection()
        self._pushed[jid] = 1.0

    def _ingest(self, now: float) -> None:
        fresh = self.store.unadmitted()
        admitted = []
        for job in fresh:
            if job.cancel_requested:
                self.store.finish(job.id, JobStatus.CANCELLED, time.time(), "cancelled before it was scheduled")
                continue
            if self._take(job, now):
                admitted.append(job.id)
        self.store.mark_admitted(admitted)

    def _take(self, job: JobView, now: float) -> bool:
        """Admit a job, or hold it (it can never fit this cluster), or fail it (its stored spec is not
        a job this version can run: a row from an earlier version); False if it failed."""
        try:
            spec = validate(JobFile, job.spec, "stored job", context=STORED)
        except SpecError as e:  # accepted by an earlier version, refused by this one
            self.store.finish(job.id, JobStatus.FAILED, time.time(), f"not schedulable: {e}")
            return False
        problem = fit_problem(self.scheduler.cluster, spec.min_gpus)
        if problem is not None:
            self._held.add(str(job.id))
            self.store.set_message(job.id, held_message(problem))
            return True
        if job.message and job.message.startswith("held: "):
            self.store.set_message(job.id, None)  # a larger cluster took it over
        try:
            self._admit(job, spec, now)
        except Exception as e:  # noqa: BLE001 - a job the API accepted but the scheduler refuses
            self.store.finish(job.id, JobStatus.FAILED, time.time(), f"not schedulable: {e}")
            return False
        return True

    def _cancel(self, now: float) -> None:
        for job_id in self.store.cancel_requests():
            jid = str(job_id)
            if jid in self._held:
                self._held.discard(jid)
                self.store.finish(job_id, JobStatus.CANCELLED, time.time(), "cancelled")
                continue
            if jid not in self.scheduler.table.row:
                continue
            self.store.finish(job_id, JobStatus.CANCELLED, time.time(), "cancelled")
            self.scheduler.complete(jid, now, JobStatus.CANCELLED)
            self.executor.cancel(jid)
            self._forget(jid)

    def _drain(self, now: float) -> None:
        progress: list[ProgressUpdate] = []
        for ev in self.executor.events():
            jid = ev.job_id
            if jid not in self.scheduler.table.row:
                continue  # a late report about a job that already left
            if isinstance(ev, ProgressEvent):
                keep = ev.at - self._sampled.get(jid, -np.inf) >= self.settings.sample_s
                u = ProgressUpdate(int(jid), ev.at, ev.step, ev.world_size, ev.steps_per_s, ev.loss, keep)
                if keep:
                    self._sampled[jid] = ev.at
                    self._unsampled.pop(jid, None)
                else:
                    self._unsampled[jid] = u
                progress.append(u)
                self._observe(jid, ev, now)
            elif isinstance(ev, InspectionEvent):
                self._inspected(jid, ev)
            elif isinstance(ev, AppliedEvent):
                self.store.record_applied(int(jid), ev.action, ev.gpus, ev.seconds, ev.at)
                cost = self._restart_costs.get(jid)
                if cost is not None and ev.action in RESTARTS:
                    cost.measured.append(ev.seconds)
                    self.scheduler.set_resize_cost(jid, cost.seconds())
                    self.store.record_event(int(jid), "restart-cost", ev.at, cost.describe())
            elif isinstance(ev, WorkersEvent):
                self.store.record_workers(int(jid), ev.workers)
            elif isinstance(ev, NoticeEvent):
                self.store.record_event(int(jid), ev.kind, ev.at, ev.detail)
            elif isinstance(ev, WorkerLostEvent):
                self.store.record_event(int(jid), "worker-lost", ev.at,
                                        (f"{ev.cause}; " if ev.cause else "")
                                        + f"{ev.failures} worker failures, {ev.restarts} restarts from checkpoint")
            elif isinstance(ev, ExitEvent):
                last = self._unsampled.pop(jid, None)  # the final report belongs in the history
                self.store.record_progress(progress + ([replace(last, sample=True)] if last else []))
                progress = []
                status = JobStatus.FINISHED if ev.finished else JobStatus.FAILED
                self.store.finish(int(jid), status, ev.at, ev.message)
                self.scheduler.complete(jid, now, status)
                self._forget(jid)
        self.store.record_progress(progress)

    def _observe(self, jid: JobId, ev: ProgressEvent, now: float) -> None:
        s = self.scheduler
        gpus = s.allocation.gpus.get(jid, ())
        if not gpus or ev.world_size < 1 or ev.steps_per_s <= 0:
            return
        s.set_rate(jid, ev.steps_per_s, now)
        per_node = np.bincount(s.cluster.node_of_gpu[np.asarray(gpus, dtype=np.int64)])
        per_node = per_node[per_node > 0]
        s.observe(jid, ThroughputSample(time=now, gpus=ev.world_size, nodes=len(per_node),
                                        cpus=len(s.allocation.cores.get(jid, ())), rate=ev.steps_per_s,
                                        progress=float(ev.step), loss=ev.loss))
        if jid in self.estimates:
            if ev.world_size == len(gpus):  # a report from before a resize belongs to no placement held now
                self.estimates.observe(jid, tuple(int(c) for c in per_node), ev.steps_per_s)
            return
        m = int(s.table.model[s.table.row[jid]])
        if self._colocated(jid):
            self._observe_colocation(jid, m, ev.steps_per_s)
            return
        predicted = float(s.curves.rate[m, min(ev.world_size, s.curves.kmax)])
        self._corrections[jid].observe(predicted, ev.steps_per_s)

    def _colocated(self, jid: JobId) -> bool:
        """The job shares its GPU with another job now."""
        sharing = self.scheduler.sharing
        g = sharing.gpu_of.get(jid) if sharing is not None else None
        return g is not None and len(sharing.on.get(g, ())) > 1

    def _observe_colocation(self, jid: JobId, m: int, measured: float) -> None:
        """A progress report of a job beside co-tenants corrects the co-location model, not the job:
        measured ÷ its solo prediction (its curve on one GPU × its speed factor) is the share of its
        speed it keeps beside them (``SharedGpus.observe``, which learns only from a pair). Feeding it
        to the job's own correction would take the co-tenant's toll for the job's own slowness.

        The solo prediction is trusted only once the job has reported alone ``SOLO_SAMPLES`` times:
        before that its speed factor is the prior's guess (a job with no measured curve is planned on
        an assumed one), and the ratio would say more about that guess than about its co-tenant."""
        corr = self._corrections.get(jid)
        if corr is None or corr.samples < SOLO_SAMPLES:
            return
        solo = float(self.scheduler.curves.rate[m, 1]) * corr.factor
        if solo > 0:
            self.scheduler.sharing.observe(jid, measured / solo)

    def _inspected(self, jid: JobId, ev: InspectionEvent) -> None:
        """The job timed its first steps: build, store and plan on its profile."""
        s = self.scheduler
        gpus = s.allocation.gpus.get(jid, ())
        node = s.cluster.nodes[int(s.cluster.node_of_gpu[gpus[0]])] if gpus else s.cluster.nodes[0]
        try:
            est = self.estimates.inspected(jid, self._labels[jid], node.gpu_type, ev.inspection)
        except ValueError as e:  # timings no model fits (say, all zero): keep planning it as before
            self.store.record_event(int(jid), "inspected", ev.at, f"no profile: {e}")
            return
        rate, useful = self._plan_on_estimate(jid)
        self.store.save_profile(int(jid), est.record(rate, useful), ev.at)
        m = est.model
        self.store.record_event(int(jid), "inspected", ev.at,
                                f"{m.param_bytes / 1e6:.3g} MB of gradients, one-GPU step {m.t_ref * 1e3:.3g} ms "
                                f"at local batch {m.b_ref:.3g}, fixed share {m.fixed_share:.2f}"
                                + (f", compute floor {m.t_floor * 1e3:.3g} ms" if m.t_floor > 0 else ""))

    def _plan_on_estimate(self, jid: JobId) -> tuple[np.ndarray, int]:
        rate, useful = self._estimated_curve(jid)
        self.scheduler.set_curve(jid, rate, useful)
        self._corrections.pop(jid, None)
        self._pushed.pop(jid, None)
        return rate, useful

    def _correct_estimates(self) -> None:
        """Fold each profiled job's reports of the last period into its belief; re-plan on the new
        curve when it moved by more than the tolerance anywhere."""
        s = self.scheduler
        for jid in list(self.estimates.jobs):
            if jid not in s.table.row or not self.estimates.correct(jid):
                continue
            rate, useful = self._estimated_curve(jid)
            old = s.curves.rate[int(s.table.model[s.table.row[jid]]), : rate.size]
            moved = np.abs(rate[1:] / np.maximum(old[1:], 1e-300) - 1.0).max()
            self.store.save_profile(int(jid), self.estimates.jobs[jid].record(rate, useful), time.time())
            if moved > self.settings.speed_tolerance:
                s.set_curve(jid, rate, useful)

    def _estimated_curve(self, jid: JobId) -> tuple[np.ndarray, int]:
        return planned_curve(self.scheduler, self.estimates, jid, by_placement=self._by_placement)

    def _score(self, jid: JobId, gpus_per_node: tuple[int, ...], gpu_types: tuple[str, ...]) -> float:
        """The placer's scorer: the estimator for a profiled job; otherwise its GPUs at the slowest one's pace."""
        if jid in self.estimates:
            return self.estimates.shape_rate(jid, gpus_per_node, gpu_types)
        cluster = self.scheduler.cluster
        return sum(gpus_per_node) * min(cluster.gpu_type_of(t).speed for t in gpu_types)

    def _push_speeds(self) -> None:
        self._correct_estimates()
        tol = self.settings.speed_tolerance
        for jid, corr in self._corrections.items():
            if corr.samples and abs(corr.factor / self._pushed[jid] - 1.0) > tol:
                self.scheduler.set_speed(jid, corr.factor)
                self._pushed[jid] = corr.factor

    def _plan(self, now: float) -> None:
        t0 = time.perf_counter()
        if self._by_placement:  # what is free decides where each count of GPUs would land
            reprice(self.scheduler, self.estimates)
        step = self.scheduler.step(now)
        self.observe_decision(time.perf_counter() - t0, len(step.plan.actions))
        if step.plan.actions:
            self.store.record_plan(step.plan.actions, time.time())  # written before it is acted on
            self._persist_service(now)
            self.executor.apply(step.plan)

    def _persist_service(self, now: float) -> None:
        """Every active job's attained service, each period and at each plan, so a restart loses
        at most one period of it."""
        t = self.scheduler.table
        if t.n:
            self.store.record_service({int(j): float(s) for j, s in zip(t.ids, t.attained_service(now))})

    def _forget(self, jid: JobId) -> None:
        self.estimates.forget(jid)
        self._restart_costs.pop(jid, None)
        self._labels.pop(jid, None)
        self._corrections.pop(jid, None)
        self._pushed.pop(jid, None)
        self._sampled.pop(jid, None)
        self._unsampled.pop(jid, None)
