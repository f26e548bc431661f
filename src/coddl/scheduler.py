"""The one scheduling step both worlds share: context → policy → placer → plan.

No I/O and no clock: the caller (the simulator's engine or the real controller) passes ``now`` and
feeds events in — arrivals (``submit``), exits (``complete``), measured rates (``set_rate``) — and
hands the returned Plan to its executor. The scheduler keeps the active jobs in a column table so
one step costs a few numpy passes over the jobs plus work proportional to the jobs that changed.

Jobs that share GPUs (``JobSpec.gpu_fraction``, ``shareable``; ``placement/sharing.py``) are rigid
one-GPU jobs to every policy. Under a sharing rule, the GPUs that packing them saves are handed to
the policy as extra capacity and it decides again, until the packed plan uses every GPU or nobody
wants more (``_with_sharing``); whole-GPU workloads never take that path.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from coddl.core.allocation import Action, ActionKind, Allocation, Plan, classify
from coddl.core.cluster import Cluster
from coddl.core.job import JobId, JobSpec, JobStatus
from coddl.core.table import JobRecord, JobTable
from coddl.jit import njit
from coddl.perf.curves import CurveTable
from coddl.placement.placer import ConsolidatingPlacer, Placed, Request
from coddl.placement.sharing import Clash, Packing, Retained, SharedGpus, SharingRule, Tenant
from coddl.policies import restarts
from coddl.policies.base import Context, JobsView, Policy, Shares, ThroughputSample


_NONE = np.zeros(0, dtype=np.int64)
# policy calls per step when jobs share GPUs: each offer that fits hands out more, one that does not
# is cut to one GPU; what is left is offered again at the next event, so a few calls keep a step cheap
MAX_SHARING_DECISIONS = 3


@dataclass(frozen=True, slots=True)
class DecisionTally:
    """A policy's decision as packing reads it (``_tally``): one compiled pass over the jobs instead
    of a score of numpy calls, at every one of the up to three decisions of a step."""

    whole: int  # GPUs given to whole-GPU jobs
    whole_untyped: int  # of which to jobs of no GPU type
    whole_by_type: np.ndarray  # of which, per type, to typed jobs
    given: int  # GPUs given, every sharing job counted as one
    given_by_type: np.ndarray  # the same per type (typed jobs only)
    arriving: np.ndarray  # rows of sharing jobs admitted that hold no GPU now
    leaving: np.ndarray  # rows of sharing jobs that hold a GPU now and are not admitted
    left_out: int  # sharing jobs not admitted
    smallest_left_out: float  # the smallest fraction among them (1.0 if none)


@njit
def _tally_kernel(g, types, fraction, share, ntypes):  # pragma: no cover - compiled
    n = g.size
    whole_t = np.zeros(ntypes, np.int64)
    given_t = np.zeros(ntypes, np.int64)
    arriving = np.empty(n, np.int64)
    leaving = np.empty(n, np.int64)
    whole = whole_untyped = given = left_out = na = nl = 0
    smallest = 1.0
    for r in range(n):
        k = g[r]
        ty = types[r]
        given += k
        if k > 0 and ty >= 0:
            given_t[ty] += k
        if fraction[r] > 0.0:
            if k > 0:
                if share[r] == 0:
                    arriving[na] = r
                    na += 1
            else:
                if share[r] > 0:
                    leaving[nl] = r
                    nl += 1
                left_out += 1
                smallest = min(smallest, fraction[r])
        elif k > 0:
            whole += k
            if ty >= 0:
                whole_t[ty] += k
            else:
                whole_untyped += k
    return whole, whole_untyped, whole_t, given, given_t, arriving[:na], leaving[:nl], left_out, smallest


def _tally(g: np.ndarray, types: np.ndarray, fraction: np.ndarray, share: np.ndarray, ntypes: int) -> DecisionTally:
    return DecisionTally(*_tally_kernel(g, types, fraction, share, ntypes))


class InfeasibleShares(RuntimeError):
    """A policy returned shares that break capacity or a job's bounds: a bug in that policy."""


@dataclass(frozen=True, slots=True)
class StepResult:
    plan: Plan
    changed: np.ndarray  # table rows whose share changed


class Scheduler:
    def __init__(self, cluster: Cluster, policy: Policy, curves: CurveTable, *, seed: int = 0,
                 type_speed: np.ndarray | None = None, validate: bool = True,
                 sharing: SharingRule | None = None, retained: Retained | None = None,
                 clash: Clash | None = None) -> None:
        if sharing is not None:
            sharing.check_policy(policy)
        self.cluster = cluster
        self.policy = policy
        self.curves = curves.extended(cluster.total_gpus)
        self.table = JobTable()
        self.allocation = Allocation()
        self.placer = ConsolidatingPlacer(cluster)
        self.rng = np.random.default_rng(seed)
        self.records: list[JobRecord] = []
        self.validate = validate
        ntypes = len(cluster.type_names)
        self.type_speed = type_speed if type_speed is not None else np.ones((ntypes, len(curves.names)))
        self._capacity_by_type = np.array([cluster.capacity_by_type[t] for t in cluster.type_names])
        self._type_index = {t: i for i, t in enumerate(cluster.type_names)}
        self.samples: dict[JobId, list[ThroughputSample]] = {}
        # attained service (GPU-s) of every finished job, for policies that learn its distribution
        self._finished_service = np.zeros(64)
        self._n_finished = 0
        self._uid = 0
        self._ever_ran: set[JobId] = set()
        self._gpus_used = 0  # GPUs and CPU cores held by jobs, kept up to date by step/complete
        self._cores_used = 0
        self.dirty = False
        self.steps = 0
        self._costly = 0  # active jobs whose resize costs a restart (set_resize_cost): 0 is the plain path
        self._own_curve: dict[JobId, int] = {}  # jobs planned on a curve of their own → its row
        self._free_curves: list[int] = []  # rows of such curves whose job left
        # jobs sharing GPUs; None: every job holds whole GPUs (sharing jobs too, one each)
        self.sharing = (SharedGpus(cluster, sharing, retained, clash)
                        if sharing is not None and sharing.shares else None)
        self._packing: Packing | None = None  # the decision's packing, carried out by ``step``
        self._virtual: tuple[int, np.ndarray] | None = None  # capacity the policy sees while packing
        # the jobs as the policy sees them, shared by the decisions of one step (the table does not
        # change between them): remaining work and attained service are computed once, not per call
        self._jobs: JobsView | None = None

    # ------------------------------------------------------------------ events in
    def submit(self, spec: JobSpec, now: float, *, attained_service: float = 0.0,
               first_start: float | None = None) -> None:
        """A job arrives. A job taken over after a controller restart brings the GPU-seconds it had
        received and when it first started, so least-attained-service policies rank it as before
        and its next placement is a resume, not a start."""
        m = self.curves.model_index(spec.model)
        model_max = int(self.curves.max_gpus[m])
        cap = self.cluster.total_gpus
        max_gpus = min(spec.max_gpus if spec.max_gpus is not None else model_max, cap)
        max_gpus = max(max_gpus, min(spec.min_gpus, cap))
        gpu_type = self._type_index.get(spec.gpu_type, -1) if spec.gpu_type else -1
        if spec.shares_gpu:
            max_gpus = 1
        r = self.table.add(spec, self._uid, m, max_gpus, now, gpu_type,
                           spec.min_cpus or 0, spec.max_cpus or 0)
        if self.sharing is not None and spec.shares_gpu:
            self.sharing.register(Tenant.of(spec, m, gpu_type))
            self.table.shared_fraction[r] = spec.packing_fraction  # > 0 marks the sharing jobs' rows
        self.table.service0[r] = attained_service
        if first_start is not None:
            self.table.first_start[r] = first_start
            self._ever_ran.add(spec.job_id)
        self._uid += 1
        # a newcomer to a full cluster under a policy that never takes GPUs from running jobs
        # cannot change the decision: no step for it (half of FIFO's steps on a busy trace)
        if not (self.policy.holds_running and self.sharing is None and self._gpus_used >= self.cluster.total_gpus):
            self.dirty = True

    def complete(self, job_id: JobId, now: float, status: JobStatus = JobStatus.FINISHED) -> JobRecord:
        t = self.table
        r = t.row[job_id]
        t.advance(r, now)
        if status is JobStatus.FINISHED:
            t.work0[r] = t.total_work[r]
        if t.resize_cost[r] != 0:
            self._costly -= 1
        held = int(t.share[r])
        if self.sharing is not None and job_id in self.sharing.tenants:
            emptied = self.sharing.forget(job_id)  # its co-tenants speed up: see _cotenant_actions
            self.allocation.gpus.pop(job_id, None)
            self.allocation.cores.pop(job_id, None)
            if emptied is not None:
                self.placer.release((emptied,))
                self._gpus_used -= 1
                self._cores_used -= len(self.placer.gpu_cores(emptied))
        elif held:
            self.placer.release(self.allocation.gpus.pop(job_id, ()), self.allocation.cores.pop(job_id, ()))
            self._gpus_used -= held
            self._cores_used -= int(t.cpus[r])
        self._ever_ran.discard(job_id)
        self.samples.pop(job_id, None)
        own = self._own_curve.pop(job_id, None)
        if own is not None:
            self._free_curves.append(own)
        spec, first_start, service, resizes, _ = t.remove(job_id)
        rec = JobRecord(spec, status.value, now, first_start, service, resizes)
        self.records.append(rec)
        if status is JobStatus.FINISHED:
            if self._n_finished == self._finished_service.size:
                self._finished_service = np.resize(self._finished_service, 2 * self._n_finished)
            self._finished_service[self._n_finished] = service
            self._n_finished += 1
        self.dirty = True
        return rec

    def set_rate(self, job_id: JobId, rate: float, now: float, paused_until: float | None = None) -> None:
        """The executor's measured (real) or modelled (simulated) steps/s for a job."""
        r = self.table.row[job_id]
        if self.table.t0[r] != now:  # the step that produced this rate already advanced the row
            self.table.advance(r, now)
        self.table.rate[r] = rate
        if paused_until is not None:
            self.table.paused_until[r] = paused_until

    def observe(self, job_id: JobId, sample: ThroughputSample, keep: int = 64) -> None:
        """Record a measured throughput sample (the last ``keep`` per job are kept for predictors)."""
        buf = self.samples.setdefault(job_id, [])
        buf.append(sample)
        if len(buf) > keep:
            del buf[0]

    def set_speed(self, job_id: JobId, factor: float) -> None:
        """Online correction: the job runs ``factor`` × its curve (policies see the corrected curve)."""
        self.table.speed[self.table.row[job_id]] = factor
        self.dirty = True

    def set_resize_cost(self, job_id: JobId, seconds: float) -> None:
        """A resize of the job stands it still for ``seconds`` (a restart: stop, cold start,
        reload); it is then grown only when that saves more time (``coddl.policies.restarts``).
        0, the default, is an in-place resize, which every decision takes as free."""
        if not seconds >= 0:
            raise ValueError(f"resize cost must be a non-negative number of seconds, got {seconds}")
        r = self.table.row[job_id]
        if self.table.resize_cost[r] != seconds:
            self._costly += int(seconds != 0) - int(self.table.resize_cost[r] != 0)
            self.table.resize_cost[r] = seconds
            self.dirty = True

    def set_curve(self, job_id: JobId, rate: np.ndarray, max_gpus: int | None = None) -> None:
        """Plan the job on a curve of its own (steps/s on k = 0, 1, … GPUs; the real system's
        estimate from the job's profile) instead of its model's: it becomes a row of ``curves``
        that the policies read like any model's, at speed 1 (the curve is already corrected).
        ``max_gpus`` is where more GPUs stop helping; the job's own limit still applies (the
        smaller wins, never below its minimum)."""
        t, curves = self.table, self.curves
        r = t.row[job_id]
        width = curves.kmax + 1
        row = np.asarray(rate, dtype=float)[:width]
        row = np.r_[row, np.full(width - row.size, row[-1])]
        m = self._own_curve.get(job_id)
        if m is None and self._free_curves:
            m = self._free_curves.pop()
        if m is None:  # a new row, copying the job's model's per-type speeds
            m = len(curves.names)
            names = [*curves.names, f"job:{job_id}"]
            top = np.r_[curves.max_gpus, width - 1].astype(np.int64)
            rates = np.vstack([curves.rate, row])
            self.type_speed = np.hstack([self.type_speed, self.type_speed[:, t.model[r]: t.model[r] + 1]])
        else:
            names = list(curves.names)
            names[m] = f"job:{job_id}"
            top = curves.max_gpus.copy()
            rates = curves.rate.copy()  # a new array: policies may cache what they derive from the old one
            rates[m] = row
        self.curves = CurveTable(names, rates, top)
        self._own_curve[job_id] = m
        t.model[r] = m
        t.speed[r] = 1.0
        if max_gpus is not None:
            spec = t.specs[r]
            limit = min(spec.max_gpus, max_gpus) if spec.max_gpus is not None else max_gpus
            t.max_gpus[r] = max(min(limit, self.cluster.total_gpus), min(spec.min_gpus, self.cluster.total_gpus))
        self.dirty = True

    # ------------------------------------------------------------------ the step
    def context(self, now: float) -> Context:
        jobs = self._jobs if self._jobs is not None else JobsView(self.table, now)
        capacity, by_type = self._virtual or (self.cluster.total_gpus, self._capacity_by_type)
        return Context(
            now=now, capacity=capacity, capacity_by_type=by_type,
            type_names=self.cluster.type_names, cpu_capacity=self.cluster.total_cpus, jobs=jobs,
            curves=self.curves.rate, type_speed=self.type_speed, rng=self.rng, samples=self.samples,
            finished_service=self._finished_service[: self._n_finished],
        )

    def _check(self, ctx: Context, s: Shares) -> None:
        g = s.gpus
        j = ctx.jobs
        if g.shape != (len(j),):
            raise InfeasibleShares(f"{self.policy.name}: shares shape {g.shape}, expected ({len(j)},)")
        if int(g.sum()) > ctx.capacity:
            raise InfeasibleShares(f"{self.policy.name}: {int(g.sum())} GPUs given, capacity {ctx.capacity}")
        if s.gpu_type is not None:
            typed = (g > 0) & (s.gpu_type >= 0)  # -1: any type (counted in the total above)
            used = np.bincount(s.gpu_type[typed], weights=g[typed], minlength=len(ctx.type_names))
            if (used > ctx.capacity_by_type).any():
                raise InfeasibleShares(f"{self.policy.name}: per-type capacity exceeded: {used}")
        bad = (g < np.where(g != 0, j.min_gpus, 0)) | (g > np.maximum(j.max_gpus, j.requested))
        if bad.any():  # also catches negative shares
            r = int(np.flatnonzero(bad)[0])
            raise InfeasibleShares(f"{self.policy.name}: job {j.ids[r]} given {g[r]} GPUs outside "
                                   f"[{j.min_gpus[r]}, {max(j.max_gpus[r], j.requested[r])}]")

    def _decide(self, now: float) -> tuple[Context, Shares | np.ndarray]:
        if self.sharing is None or not self.sharing.tenants:
            return self._decide_once(now)
        return self._with_sharing(now)

    def _with_sharing(self, now: float) -> tuple[Context, Shares | np.ndarray]:
        """Let the policy hand out the GPUs that packing the sharing jobs saves.

        The policy counts each sharing job it admits as one GPU; packed, they hold fewer. It first
        decides with the GPUs the current packing saves added to its capacity (a policy that keeps
        running jobs running must see room for them), else with the real capacity, which always
        fits (every sharing job counted as a whole GPU). Each decision is packed; if it fits the
        real GPUs, the policy is offered more: first one GPU, then, if that fitted, all that is left
        — the GPUs still free plus the sharing jobs that might still fit on the shared GPUs. One at
        first, because an offer the policy gives to a job that cannot be packed (a pair that clashes,
        a whole job where only shared room is left) does not fit, and that is the common case on a
        busy cluster. It ends when nothing is left to offer, the policy leaves capacity unused
        (nobody wants more), an offer does not fit, or after ``MAX_SHARING_DECISIONS`` policy calls:
        the last decision that fitted stands."""
        t, n = self.table, self.table.n
        sharing = self.sharing
        assert sharing is not None
        fraction, share, job_types, ids = t.shared_fraction[:n], t.share[:n], t.gpu_type[:n], t.ids
        cap, cap_t = self.cluster.total_gpus, self._capacity_by_type
        ntypes = len(cap_t)
        saved_t = sharing.saved_by_type()
        held_rows, held_t = self._whole_holdings() if ntypes > 1 else (None, None)
        best = None
        offered = False  # an offer was made (the first is of one GPU)
        self._jobs = JobsView(t, now)
        try:
            if saved_t.any():
                self._virtual = (cap + int(saved_t.sum()), cap_t + saved_t)
            for _ in range(MAX_SHARING_DECISIONS):
                ctx, out = self._decide_once(now)
                g = np.asarray(out.gpus if isinstance(out, Shares) else out, dtype=np.int64)
                typed_by_policy = isinstance(out, Shares) and out.gpu_type is not None
                types = np.asarray(out.gpu_type, dtype=np.int64) if typed_by_policy else job_types
                d = _tally(g, types, fraction, share, ntypes)
                # a type the policy chose pins a newcomer to it (the table's type of a sharing job that
                # ran before is only where it ran: it does not bind)
                chosen = {ids[r]: int(types[r]) for r in d.arriving.tolist() if types[r] >= 0} if typed_by_policy else {}
                packing = sharing.pack_changes([ids[r] for r in d.arriving.tolist()],
                                               [ids[r] for r in d.leaving.tolist()], cap - d.whole, chosen)
                shared_t, anywhere = sharing.used_by_type(packing)
                used = shared_t + d.whole_by_type
                untyped = d.whole_untyped + anywhere
                if held_rows is not None and held_rows.size:
                    # whole jobs of no type stay on the types they hold (at most their new share there):
                    # typed newcomers cannot have those GPUs
                    keep = g[held_rows]
                    stays = np.minimum(held_t, keep[:, None]) * (types[held_rows] < 0)[:, None]
                    used = used + stays.sum(axis=0)
                    untyped -= int(stays.sum())
                if d.whole + packing.gpus > cap or (used > cap_t).any():  # did not fit
                    if best is None and self._virtual is not None:
                        self._virtual = None  # the current packing's room did not hold: the real capacity
                        continue
                    break
                # policies may reuse their output arrays from one call to the next: keep a copy
                kept = (Shares(g.copy(), None if out.gpu_type is None else np.array(out.gpu_type), out.cpus)
                        if isinstance(out, Shares) else g.copy())
                # it fits the real GPUs once packed: that is the capacity it is checked against (a
                # policy that keeps running jobs may count more sharing jobs than it was offered)
                ctx.capacity = max(ctx.capacity, d.given)
                ctx.capacity_by_type = np.maximum(ctx.capacity_by_type, d.given_by_type)
                best = (ctx, kept, packing)
                if d.given < ctx.capacity:
                    break
                if not offered and ntypes == 1:  # one GPU, if there is any: no need to count them
                    if int(cap - used[0]) <= untyped and not sharing.has_room(packing, d.left_out, d.smallest_left_out):
                        break
                    offer, offered = np.ones(1, dtype=np.int64), True
                else:
                    offer = self._offer(packing, used, untyped, d.left_out, d.smallest_left_out)
                    if not offer.any():
                        break
                    if not offered:
                        one = np.zeros_like(offer)
                        one[int(np.argmax(offer))] = 1
                        offer, offered = one, True
                self._virtual = (ctx.capacity + int(offer.sum()), ctx.capacity_by_type + offer)
        finally:
            self._virtual = self._jobs = None
        if best is None:  # no decision fitted (a policy that keeps its jobs while it counts them whole): stand still
            ctx = self.context(now)
            ctx.capacity = max(ctx.capacity, int(t.share[:n].sum()))
            on = (t.share[:n] > 0) & (t.gpu_type[:n] >= 0)
            ctx.capacity_by_type = np.maximum(ctx.capacity_by_type, np.bincount(
                t.gpu_type[:n][on], weights=t.share[:n][on], minlength=ntypes))
            best = (ctx, t.share[:n].copy(), sharing.pack(list(sharing.gpu_of)))
        ctx, out, self._packing = best
        return ctx, out

    def _whole_holdings(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows of whole-GPU jobs that hold GPUs now, and how many of each type each holds."""
        t, n = self.table, self.table.n
        rows = np.flatnonzero((t.share[:n] > 0) & (t.shared_fraction[:n] == 0))
        ntypes = len(self._capacity_by_type)
        gpus = [self.allocation.gpus[t.ids[r]] for r in rows.tolist()]
        counts = np.fromiter(map(len, gpus), dtype=np.int64, count=len(gpus))
        flat = np.fromiter(itertools.chain.from_iterable(gpus), dtype=np.int64, count=int(counts.sum()))
        owner = np.repeat(np.arange(rows.size), counts)
        type_of_gpu = self.cluster.node_type_index[self.cluster.node_of_gpu]
        held = np.bincount(owner * ntypes + type_of_gpu[flat], minlength=rows.size * ntypes)
        return rows, held.reshape(rows.size, ntypes).astype(np.int64)

    def _offer(self, packing: Packing, used: np.ndarray, untyped: int, waiting: int, smallest: float) -> np.ndarray:
        """What more a packed decision leaves, per type: the GPUs still free and the sharing jobs
        that might still fit on its shared GPUs. ``untyped`` GPUs of no type yet (any-type jobs, new
        shared GPUs) are taken from the roomiest types first."""
        assert self.sharing is not None
        ntypes = len(used)
        free_t = self._capacity_by_type - used
        for ti in np.argsort(-free_t, kind="stable"):  # one type or several: every GPU held is counted
            take = min(untyped, int(free_t[ti]))
            free_t[ti] -= take
            untyped -= take
        room_t, room_any = self.sharing.room(packing, ntypes, waiting, smallest)
        offer = np.maximum(free_t, 0) + room_t
        offer[int(np.argmax(offer)) if offer.any() else 0] += room_any
        return offer

    def _decide_once(self, now: float) -> tuple[Context, Shares | np.ndarray]:
        """The policy's shares, under the rule that a job whose resize costs a restart grows only
        when the growth saves more than that cost (``coddl.policies.restarts``). A job held back
        has its maximum set to its share and the policy decides again, so the GPUs it does not
        take go to the others in this same decision. Without resize costs: one plain call."""
        t, n = self.table, self.table.n
        ctx = self.context(now)
        if not self._costly:
            return ctx, self.policy.allocate(ctx)
        limit = t.max_gpus[:n]
        kept = limit.copy()
        try:
            held = restarts.hopeless(ctx)
            for _ in range(n + 1):  # each round holds at least one more job back
                if held.size:
                    limit[held] = t.share[held]
                    ctx = self.context(now)
                out = self.policy.allocate(ctx)
                held = restarts.unprofitable(ctx, np.asarray(out.gpus if isinstance(out, Shares) else out))
                if held.size == 0:
                    break
            return ctx, out
        finally:
            limit[:] = kept

    def step(self, now: float) -> StepResult:
        """Run the policy and turn its shares into a plan for the jobs whose GPUs change."""
        self.steps += 1
        self.dirty = False
        t = self.table
        n = t.n
        if n == 0:
            return StepResult(Plan(), _NONE)
        ctx, out = self._decide(now)
        if isinstance(out, Shares):
            gpus, new_type, cpus = np.asarray(out.gpus, dtype=np.int64), out.gpu_type, out.cpus
        else:
            gpus, new_type, cpus = np.asarray(out, dtype=np.int64), None, None
        if self.validate:
            self._check(ctx, Shares(gpus, new_type, cpus))
        if new_type is None and cpus is None:  # the common case: only GPU counts can differ
            changed = np.flatnonzero(gpus != t.share[:n])
        else:
            if new_type is None:
                new_type = t.gpu_type[:n]
            moved = (gpus != t.share[:n]) | ((gpus > 0) & (new_type != t.gpu_type[:n]))
            if cpus is not None:
                cpus = np.asarray(cpus, dtype=np.int64)
                moved |= (gpus > 0) & (cpus != t.cpus[:n])
            changed = np.flatnonzero(moved)
        sharing, packing, self._packing = self.sharing, self._packing, None
        if changed.size == 0 and not (sharing is not None and sharing.touched):
            return StepResult(Plan(), changed)
        t.advance(changed, now)
        rows = changed.tolist()
        ids = t.ids
        want = gpus[changed].tolist()
        types = t.gpu_type[changed].tolist() if new_type is None else np.asarray(new_type)[changed].tolist()
        cores_wanted = [None] * len(rows) if cpus is None else cpus[changed].tolist()
        requests = [Request(ids[r], k, ty, c) for r, k, ty, c in zip(rows, want, types, cores_wanted)]
        alloc_gpus, alloc_cores = self.allocation.gpus, self.allocation.cores
        if sharing is None or packing is None:  # no sharing job decided on: the whole-GPU path
            placed = self.placer.place(alloc_gpus, requests, alloc_cores)
        else:
            if cpus is not None:
                raise InfeasibleShares(f"{self.policy.name}: a policy that assigns CPU cores cannot run with "
                                       f"GPU sharing (sharing jobs use their GPU's cores)")
            placed = self._place_sharing(requests, packing)
        actions: list[Action] = []
        share, cpus_col, gpu_type, rate = t.share, t.cpus, t.gpu_type, t.rate
        shared = sharing.tenants if sharing is not None else {}
        for r, ty in zip(rows, types):
            jid = ids[r]
            old = alloc_gpus.get(jid, ())
            p = placed[jid]
            new, k = p.gpus, len(p.gpus)
            kind = classify(old, new, jid in self._ever_ran)
            cores_changed = p.cores != alloc_cores.get(jid, ())
            if jid not in shared:  # a shared GPU is counted once, by _place_sharing
                self._gpus_used += k - len(old)
                self._cores_used += len(p.cores) - int(cpus_col[r])
            share[r] = k
            if k:  # a sharing job is on its GPU's type, whatever the policy thought
                gpu_type[r] = ty if jid not in shared else self.cluster.node_type_index[self.cluster.node_of_gpu[new[0]]]
            cpus_col[r] = len(p.cores)
            if k:
                alloc_gpus[jid] = new
                alloc_cores[jid] = p.cores
            else:
                alloc_gpus.pop(jid, None)
                alloc_cores.pop(jid, None)
                rate[r] = 0.0
            if kind is None:
                if not cores_changed:
                    continue
                kind = ActionKind.RECORE
            if kind is ActionKind.START or kind is ActionKind.RESUME:
                if kind is ActionKind.START:
                    t.first_start[r] = now
                t.last_start[r] = now
                t.service_at_last_start[r] = t.service0[r]  # advanced above: exact
                self._ever_ran.add(jid)
            elif kind is not ActionKind.SUSPEND:
                t.resizes[r] += 1
            actions.append(Action(kind, jid, old, new, len(p.cores), p.cores))
        if sharing is not None:
            actions += self._cotenant_actions(sharing, {a.job_id for a in actions}, now)
        return StepResult(Plan(actions), changed)

    def _place_sharing(self, requests: list[Request], packing: Packing) -> dict[JobId, Placed]:
        """``placer.place`` with sharing jobs: whole jobs shrink first (one moved to another GPU type
        needs new GPUs: it counts as growing) and sharing jobs leave, newcomers
        join their shared GPUs, then whole jobs grow and new shared GPUs are taken (best fit), typed
        requests before those of any type."""
        sharing = self.sharing
        assert sharing is not None
        alloc_gpus = self.allocation.gpus
        cores = self.allocation.cores  # read by the placer only when it pools cores: then the whole jobs' alone
        whole_cores = {j: c for j, c in cores.items() if j not in sharing.tenants} if self.placer.pools_cores else cores
        mine = [r for r in requests if r.job_id in sharing.tenants]
        type_of_gpu = self.cluster.node_type_index[self.cluster.node_of_gpu]

        def shrinks_in_place(r: Request) -> bool:  # a job moved to another type needs new GPUs: it grows
            old = alloc_gpus.get(r.job_id, ())
            return r.gpus <= len(old) and not (old and r.gpu_type >= 0 and int(type_of_gpu[old[0]]) != r.gpu_type)

        whole = [r for r in requests if r.job_id not in sharing.tenants]
        shrinks = [r for r in whole if shrinks_in_place(r)]
        grows = [r for r in whole if not shrinks_in_place(r)]
        placed = self.placer.place(alloc_gpus, shrinks, whole_cores) if shrinks else {}
        block = self.placer.gpu_cores
        before = sharing.gpus_used
        freed_cores = taken_cores = 0

        def give_back(g: int) -> None:
            nonlocal freed_cores
            self.placer.release((g,))
            freed_cores += len(block(g))

        def take(gpu_type: int) -> int:
            nonlocal taken_cores
            g = self.placer.take_one(gpu_type)
            taken_cores += len(block(g))
            return g

        # emptied GPUs back first; then typed requests before those of any type, whole jobs before
        # new shared GPUs of the same kind (as the placer orders its own requests)
        sharing.release(packing, give_back)
        where = sharing.join(packing)
        typed = [r for r in grows if r.gpu_type >= 0]
        if typed:
            placed.update(self.placer.place(alloc_gpus, typed, whole_cores))
        where.update(sharing.open([b for b in packing.opened if b.gpu_type >= 0], take))
        untyped = [r for r in grows if r.gpu_type < 0]
        if untyped:
            placed.update(self.placer.place(alloc_gpus, untyped, whole_cores))
        where.update(sharing.open([b for b in packing.opened if b.gpu_type < 0], take))
        self._gpus_used += sharing.gpus_used - before
        self._cores_used += taken_cores - freed_cores
        for r in mine:  # a job that stays (its type changed in the policy's eyes) keeps its GPU
            g = where.get(r.job_id, sharing.gpu_of.get(r.job_id)) if r.gpus else None
            placed[r.job_id] = Placed((g,), block(g)) if g is not None else Placed((), ())
        return placed

    def _cotenant_actions(self, sharing: SharedGpus, acted: set[JobId], now: float) -> list[Action]:
        """A job whose GPU got or lost a co-tenant runs at a new speed: a COTENANTS action tells the
        executor (the simulator re-times the job; a real one has nothing to do)."""
        out = []
        t = self.table
        for g in sorted(sharing.take_touched()):
            for tenant in sharing.on.get(g, ()):
                jid = tenant.job_id
                if jid not in acted:
                    r = t.row[jid]
                    t.advance(r, now)
                    out.append(Action(ActionKind.COTENANTS, jid, (g,), (g,), int(t.cpus[r]),
                                      self.allocation.cores.get(jid, ())))
        return out

    @property
    def cores_in_use(self) -> int:
        return self._cores_used

    @property
    def gpus_in_use(self) -> int:
        return self._gpus_used

    def next_wakeup(self, now: float) -> float | None:
        if self.table.n == 0:
            return None
        return self.policy.wakeup(self.context(now))
