"""The estimator in the real system: each inspected job's profile, belief and curve on this cluster.

A job that reports its inspection (``coddl.elastic.protocol.Inspection``) gets a profile — its
one-GPU rows in the profile format (``coddl.perf.inspection``) — and from it the estimator's job
model (``calibrate.one_gpu_model`` with the bundled prior). From then on the scheduler plans it
on the estimator's curve for this cluster's fabric (the links ``coddl cluster inspect`` measured,
or the defaults) and its batch rule: a fixed global batch is split over the GPUs, a fixed local
batch is not. The placer's scorer asks the same model about any shape of GPUs per node.

Measured throughput folds in with the estimator's own correction (``correction.correct``): each
report becomes a row of the same format at the placement it ran on; once per period the reports of
each placement since the last correction are reduced to their median, one row. The belief is
always the posterior given all of the job's rows — its one-GPU rows (the inspection's, and the
whole-batch steps it later ran on one GPU, which measure the one-GPU step in steady state rather
than during its first steps) fix its compute (``one_gpu_model``), its multi-GPU rows correct the
rest (regularised least squares from the prior, so rows move it only as far as their noise
allows). The newest ``MAX_MEASURED`` measured rows are kept. The rows are what the store keeps, so
a restarted controller rebuilds the same belief and plans the job exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from coddl.core.cluster import Cluster, LinkSpec
from coddl.core.job import JobId
from coddl.elastic.protocol import Inspection
from coddl.perf.calibrate import default_prior, one_gpu_model
from coddl.perf.correction import correct
from coddl.perf.estimator import Estimator, Placement
from coddl.perf.inspection import Timings, measured_row, profile_rows, table_records
from coddl.perf.jobmodel import JobModel, Prior
from coddl.perf.table import ProfileTable

if TYPE_CHECKING:
    from coddl.scheduler import Scheduler

PROFILE_VERSION = 1
# Spread (log) of a job's communication efficiency η when the cluster's links were not measured
# (no ``--cluster`` spec: the estimator's default links, an NVLink/InfiniBand-class cluster). The
# bundled prior's spread (~0.24) says how far jobs stray from links calibrated on their cluster;
# links nobody measured can be off by orders of magnitude (gloo over a loopback or a slow network),
# so there the measured steps must be able to move η that far: a factor of 12 per standard deviation.
UNMEASURED_LINKS_LOG_SD = 2.5
MAX_MEASURED = 64  # measured rows a job keeps (one per placement and period; the newest)


@dataclass
class JobEstimate:
    """One inspected job: its profile (the inspection's one-GPU rows), the measured rows since, and
    its belief given all of them."""

    profile: list[dict[str, Any]]
    global_batch: int | None
    local_batch: int | None
    model: JobModel
    measured: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[tuple[int, ...], list[float]] = field(default_factory=dict)  # placement → rates

    def local_batch_on(self, gpus: int | np.ndarray) -> np.ndarray:
        k = np.asarray(gpus, dtype=float)
        return np.full(k.shape, float(self.local_batch)) if self.local_batch is not None else self.global_batch / k

    def record(self, curve: np.ndarray, useful: int) -> dict[str, Any]:
        """What the store keeps (plain JSON), with the curve the job is planned on (k = 1, 2, …)."""
        m = self.model
        return {"version": PROFILE_VERSION, "profile": self.profile, "measured": self.measured,
                "curve": [float(r) for r in curve[1:]], "useful_gpus": int(useful),
                "global_batch": self.global_batch, "local_batch": self.local_batch,
                "belief": {"fixed_share": m.fixed_share, "comm_efficiency": m.comm_efficiency,
                           "overlap_gamma": m.overlap, "t_ref_s": m.t_ref, "b_ref": m.b_ref,
                           "t_floor_s": m.t_floor, "measured_steps": m.measured}}


class Estimates:
    """The inspected jobs of one controller, planned on ``cluster``."""

    def __init__(self, cluster: Cluster, prior: Prior | None = None) -> None:
        self.cluster = cluster
        self.estimator = Estimator.for_cluster(cluster)
        prior = prior or default_prior()
        if cluster.links == LinkSpec():  # the defaults, not this cluster's measured links
            sd = list(prior.sd)
            sd[1] = max(sd[1], UNMEASURED_LINKS_LOG_SD)
            prior = replace(prior, sd=tuple(sd))
        self.prior = prior
        self.node_size = max(n.gpus for n in cluster.nodes)
        self.jobs: dict[JobId, JobEstimate] = {}

    def __contains__(self, job_id: JobId) -> bool:
        return job_id in self.jobs

    def inspected(self, job_id: JobId, label: str, gpu_type: str, report: Inspection) -> JobEstimate:
        """The job's profile from its inspection report (``label`` names it in the rows)."""
        rows = profile_rows(Timings(float(report.param_bytes), report.timings, report.step_overhead_s), label,
                            gpu_type)
        est = JobEstimate(table_records(rows), report.global_batch, report.local_batch,
                          one_gpu_model(rows, self.prior))
        self.jobs[job_id] = est
        return est

    def restore(self, job_id: JobId, record: dict[str, Any]) -> JobEstimate:
        """A stored profile taken back after a restart: the same rows, so the same belief."""
        profile, measured = list(record["profile"]), list(record["measured"])
        est = JobEstimate(profile, record["global_batch"], record["local_batch"], self._fit(profile, measured),
                          measured)
        self.jobs[job_id] = est
        return est

    def _fit(self, profile: list[dict[str, Any]], measured: list[dict[str, Any]]) -> JobModel:
        """The belief given every row: one-GPU rows fix the compute, multi-GPU rows correct the rest."""
        many = [r for r in measured if r["gpus"] > 1]
        model = one_gpu_model(ProfileTable.build([*profile, *(r for r in measured if r["gpus"] == 1)]), self.prior)
        return correct(model, self.estimator, ProfileTable.build(many)) if many else model

    def forget(self, job_id: JobId) -> None:
        self.jobs.pop(job_id, None)

    # ---- what the scheduler sees ----
    def curve(self, job_id: JobId, kmax: int) -> tuple[np.ndarray, int]:
        """Steps/s on consolidated placements of k = 0…kmax GPUs, and the GPU count past which
        more GPUs no longer help (a fixed global batch cannot be split over more GPUs than samples)."""
        est = self.jobs[job_id]
        usable = kmax if est.global_batch is None else min(kmax, est.global_batch)
        rate = np.zeros(kmax + 1)
        kwargs = {"global_batch": est.global_batch} if est.global_batch is not None else {"local_batch": est.local_batch}
        rate[: usable + 1] = self.estimator.curve(est.model, usable, self.node_size, **kwargs)
        rate[usable + 1:] = rate[usable]
        return rate, int(np.argmax(rate[: usable + 1]))

    def placed_curve(self, job_id: JobId, shapes: list[tuple[tuple[int, ...], tuple[str, ...]]],
                     kmax: int) -> tuple[np.ndarray, int]:
        """``curve`` priced where the GPUs are: k = 1 … len(shapes) on ``shapes[k - 1]`` (GPUs per
        node and their types: the placement the job would get now, ``ConsolidatingPlacer.reachable``),
        larger k consolidated as in ``curve``. A communication-heavy job whose third GPU would sit
        across a slow link is slower on 3 than on 2, so its useful count stops at 2 and the policy
        sees the rate it will get. Useful is the first count whose next GPU would not make the job
        faster: GPUs are handed out one at a time, so a faster count beyond a dip (4 GPUs in one
        node, once other jobs leave) is only reached through the dip, and is priced again then."""
        est = self.jobs[job_id]
        rate, _ = self.curve(job_id, kmax)
        usable = kmax if est.global_batch is None else min(kmax, est.global_batch)
        for k, (per_node, types) in enumerate(shapes[:usable], 1):
            rate[k] = self.shape_rate(job_id, per_node, types)
        rate[usable + 1:] = rate[usable]
        drops = np.flatnonzero(np.diff(rate[1: usable + 1]) <= 0)
        return rate, int(drops[0]) + 1 if drops.size else usable

    def shape_rate(self, job_id: JobId, gpus_per_node: tuple[int, ...], gpu_types: tuple[str, ...]) -> float:
        """The placer's scorer: steps/s of the job on this shape."""
        est = self.jobs[job_id]
        placement = Placement(tuple(gpus_per_node), tuple(gpu_types))
        k = placement.num_gpus
        return self.estimator.throughput(est.model, placement, float(est.local_batch_on(k)) * k)

    # ---- online correction ----
    def observe(self, job_id: JobId, placement: tuple[int, ...], rate: float) -> None:
        """A measured report at ``placement`` (GPUs per node), folded in at the next ``correct``."""
        if rate > 0 and np.isfinite(rate):
            self.jobs[job_id].pending.setdefault(tuple(sorted(placement, reverse=True)), []).append(float(rate))

    def correct(self, job_id: JobId) -> bool:
        """Fold the reports since the last correction into the job's belief; False if there were none."""
        est = self.jobs[job_id]
        if not est.pending:
            return False
        m = est.model
        rows = [measured_row(m.name, m.param_bytes, m.gpu_type, p, float(est.local_batch_on(sum(p))),
                             float(np.median(rates))) for p, rates in est.pending.items()]
        est.pending = {}
        est.measured = [*est.measured, *rows][-MAX_MEASURED:]
        est.model = self._fit(est.profile, est.measured)
        return True


# ---- the curve the scheduler plans a profiled job on ----
def by_placement(cluster: Cluster) -> bool:
    """Whether counts are priced at the placement they would get: only where the links were
    measured (a ``--cluster`` spec; the defaults say nothing about this cluster) and a job can span nodes."""
    return len(cluster.nodes) > 1 and cluster.links != LinkSpec()


def planned_curve(scheduler: Scheduler, estimates: Estimates, job_id: JobId, *,
                  by_placement: bool) -> tuple[np.ndarray, int]:
    """The profiled job's curve on the scheduler's cluster, and its useful GPUs. ``by_placement``:
    each count is priced at the placement the placer would give the job now
    (``ConsolidatingPlacer.reachable``), so whichever of "2 GPUs in one node" and "3 across two"
    the estimator finds faster is what the policy sees. Otherwise — and for an any-type job on a
    mixed cluster, which the placer may move between types — on consolidated placements."""
    s = scheduler
    kmax = s.cluster.total_gpus
    spec = s.table.specs[s.table.row[job_id]]
    types = s.cluster.type_names
    gpu_type = types.index(spec.gpu_type) if spec.gpu_type in types else -1
    if not by_placement or (gpu_type < 0 and len(types) > 1):
        return estimates.curve(job_id, kmax)
    node_type = [n.gpu_type for n in s.cluster.nodes]
    shapes = s.placer.reachable(s.allocation.gpus.get(job_id, ()), kmax, gpu_type)
    return estimates.placed_curve(job_id, [(tuple(c for _, c in sh), tuple(node_type[n] for n, _ in sh))
                                           for sh in shapes], kmax)


def reprice(scheduler: Scheduler, estimates: Estimates) -> None:
    """Before a decision: what is free decides where each count of GPUs would land, so every
    profiled job's curve is priced again on the placements it would get now (set only if it moved)."""
    s = scheduler
    for job_id in estimates.jobs:
        if job_id not in s.table.row:
            continue
        rate, useful = planned_curve(s, estimates, job_id, by_placement=True)
        m = int(s.table.model[s.table.row[job_id]])
        if not np.array_equal(s.curves.rate[m, : rate.size], rate):
            s.set_curve(job_id, rate, useful)
