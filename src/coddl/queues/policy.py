"""A policy over queues: quotas and fair share divide the cluster between teams, and the configured
job policy divides each team's part between its jobs — composition, not a new engine.

At each decision ``QueuedPolicy.allocate``:

1. puts every job in its queue (its user's, else its account's, else ``default``);
2. adds up, per queue, the GPUs (and cores) its jobs could use — their maximum under an elastic job
   policy, their request under a rigid one — and the floor its running jobs need at their minimum;
3. turns quotas, cohorts, limits, weights, demand and floors into each queue's entitlement
   (``coddl.queues.share``);
4. runs the queue's own instance of the job policy on a context that is that queue's jobs on a
   cluster of that entitlement, and keeps its answer.

The engine, the placer and the job policies do not know about queues. A job policy may hand out
less than its entitlement (gangs that do not pack), never more: a policy that keeps what it gave
before (time slices that have not expired) while its queue's entitlement shrinks is cut back here
— elastic jobs to their minimum first, then whole jobs, the most recently started first — so no job
is ever below its minimum and no gang is ever split: a job has all of its GPUs or none.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from coddl.policies.base import Context, Policy, Shares
from coddl.queues.model import QueueSet, Quotas
from coddl.queues.share import entitlements
from coddl.queues.view import RowsView


class QueuedPolicy(Policy):
    """``make()`` builds one job policy; each queue gets its own instance (its own bookkeeping)."""

    def __init__(self, queues: QueueSet, make: Callable[[], Policy]) -> None:
        proto = make()
        super().__init__(proto.params)
        self._make = make
        self.inner = proto
        self.name = proto.name  # type: ignore[misc] - the job policy's name: results are labelled by it
        self.elastic = proto.elastic  # type: ignore[misc]
        self.queues = queues
        self._policies: dict[str, Policy] = {}
        self._qidx = np.full(0, -1, dtype=np.int64)  # queue index by job uid (-1: not yet looked up)
        self._quotas: tuple[tuple[int, int], Quotas] | None = None
        self._entitled = np.zeros((2, len(queues.names)), dtype=np.int64)
        self._signature: dict[int, tuple] = {}  # per queue: what its policy saw when it last ran
        # per queue: the shares its jobs held when its policy last ran, and that policy's answer
        self._answer: dict[int, tuple[bytes, np.ndarray, np.ndarray | None, np.ndarray | None]] = {}
        self._wakes: dict[int, float | None] = {}  # per queue: when its policy asked to run again
        self._ran: set[int] = set()  # queues whose policy ran at the last decision

    def describe(self) -> str:
        return f"{self.inner.describe()} in {len(self.queues.names)} queues"

    def assigns_cores(self) -> bool:
        return self.inner.assigns_cores()

    def reconfigure(self, queues: QueueSet) -> None:
        """New queues or members (an admin's change): queues that stay keep their job policy's
        bookkeeping; every job's queue is looked up again."""
        self._policies = {q: p for q, p in self._policies.items() if q in queues.names}
        self.queues = queues
        self._qidx = np.full(0, -1, dtype=np.int64)
        self._quotas = None
        self._entitled = np.zeros((2, len(queues.names)), dtype=np.int64)
        self._signature, self._wakes, self._ran, self._answer = {}, {}, set(), {}

    def quotas(self, gpus: int, cpus: int) -> Quotas:
        if self._quotas is None or self._quotas[0] != (gpus, cpus):
            self._quotas = ((gpus, cpus), self.queues.quotas(gpus, cpus))
        return self._quotas[1]

    def policy_of(self, queue: str) -> Policy:
        p = self._policies.get(queue)
        if p is None:
            p = self._policies[queue] = self._make()
        return p

    # ------------------------------------------------------------------ one decision
    def queue_rows(self, ctx: Context) -> np.ndarray:
        """The queue index of every row of ``ctx.jobs``."""
        j = ctx.jobs
        uid = j.uid
        if uid.size and int(uid.max()) >= self._qidx.size:
            grown = np.full(max(2 * self._qidx.size, int(uid.max()) + 1), -1, dtype=np.int64)
            grown[: self._qidx.size] = self._qidx
            self._qidx = grown
        q = self._qidx[uid]
        for r in np.flatnonzero(q < 0).tolist():
            spec = j.specs[r]
            q[r] = self._qidx[uid[r]] = self.queues.queue_of(spec.user, spec.account)
        return q

    def demand(self, ctx: Context, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(2, Q) demand and floor per queue: GPUs and cores its jobs could use, and those its running
        jobs need at their minimum size."""
        j = ctx.jobs
        nq = len(self.queues.names)
        want = j.max_gpus if self.elastic else j.requested
        need = np.where(j.share > 0, j.min_gpus if self.elastic else j.requested, 0)
        per_gpu = ctx.cpu_capacity / ctx.capacity if ctx.capacity else 0.0
        cpu_want = np.where(j.max_cpus > 0, j.max_cpus, want * per_gpu)
        cpu_need = np.where(need > 0, np.where(j.min_cpus > 0, j.min_cpus, need * per_gpu), 0)
        demand = np.vstack([np.bincount(q, weights=want, minlength=nq), np.bincount(q, weights=cpu_want, minlength=nq)])
        floor = np.vstack([np.bincount(q, weights=need, minlength=nq), np.bincount(q, weights=cpu_need, minlength=nq)])
        return np.ceil(demand - 1e-9).astype(np.int64), np.ceil(floor - 1e-9).astype(np.int64)

    def entitlements(self, ctx: Context, q: np.ndarray) -> np.ndarray:
        """(2, Q): each queue's GPUs and cores at this decision."""
        quotas = self.quotas(ctx.capacity, ctx.cpu_capacity)
        demand, floor = self.demand(ctx, q)
        demand = np.minimum(demand, np.array([[ctx.capacity], [ctx.cpu_capacity]]))
        floor = np.minimum(floor, demand)
        return np.vstack([entitlements(quotas.nominal[r], demand[r], floor[r], quotas.cohort, quotas.weight,
                                       quotas.borrowing_limit[r], quotas.lending_limit[r]) for r in (0, 1)])

    def allocate(self, ctx: Context) -> Shares:
        j = ctx.jobs
        n = len(j)
        q = self.queue_rows(ctx)
        ent = self.entitlements(ctx, q)
        self._entitled = ent
        gpus = j.share.copy()
        types: np.ndarray | None = None
        cpus: np.ndarray | None = None
        free_by_type = np.asarray(ctx.capacity_by_type, dtype=np.int64).copy()
        run, kept = [], []
        for qi, rows in self._partition(q):
            # what the queue's policy decides on besides the clock: its jobs, their bounds (a job's
            # maximum drops when its own profile arrives, and the restart rule holds jobs back by
            # lowering it), their speed and the curves (a new array whenever one job's changes; the
            # signature keeps it, so its id is not reused while compared)
            sig = (int(ent[0, qi]), int(ent[1, qi]), j.uid[rows].tobytes(), j.speed[rows].tobytes(),
                   j.min_gpus[rows].tobytes(), j.max_gpus[rows].tobytes(), j.requested[rows].tobytes(),
                   j.model[rows].tobytes(), id(ctx.curves), ctx.curves)
            wake = self._wakes.get(qi)
            if _same(self._signature.get(qi), sig) and (wake is None or wake > ctx.now):
                answer = self._answer.get(qi)
                answered = answer is not None and answer[0] == self._held(j, rows)
                kept.append((rows, answered))  # nothing this queue's policy looks at changed: its shares stand
                if answered:
                    # Asked again before its last answer was carried out (the scheduler tries several
                    # capacities in one decision when jobs share GPUs): the answer stands, not the shares.
                    gpus[rows] = answer[1]
                    if answer[2] is not None:
                        if types is None:
                            types = j.gpu_type.copy()
                        types[rows] = answer[2]
                    if answer[3] is not None:
                        if cpus is None:
                            cpus = np.full(n, -1, dtype=np.int64)
                        cpus[rows] = answer[3]
            else:
                run.append((qi, rows))
                self._signature[qi] = sig
        for rows, _ in kept:  # GPUs of a type that queues left as they were hold
            held_types = (types if types is not None else j.gpu_type)
            typed = rows[(gpus[rows] > 0) & (held_types[rows] >= 0)]
            free_by_type -= np.bincount(held_types[typed], weights=gpus[typed],
                                        minlength=free_by_type.size).astype(np.int64)
        self._ran = {qi for qi, _ in run}
        for qi, rows in run:
            cap = int(ent[0, qi])
            if cap == 0:
                gpus[rows] = 0
                continue
            sub = self._sub_context(ctx, rows, cap, int(ent[1, qi]), np.minimum(free_by_type, cap))
            out = self.policy_of(self.queues.names[qi]).allocate(sub)
            share = out if isinstance(out, Shares) else Shares(np.asarray(out))
            g = cut_to_fit(sub, np.asarray(share.gpus, dtype=np.int64), share.gpu_type, self.elastic)
            gpus[rows] = g
            self._answer[qi] = (self._held(j, rows), g.copy(),
                                None if share.gpu_type is None else np.array(share.gpu_type, dtype=np.int64),
                                None if share.cpus is None else np.array(share.cpus, dtype=np.int64))
            if share.gpu_type is not None:
                if types is None:
                    types = j.gpu_type.copy()
                types[rows] = share.gpu_type
                held = g > 0
                free_by_type -= np.bincount(share.gpu_type[held], weights=g[held],
                                            minlength=free_by_type.size).astype(np.int64)
            if share.cpus is not None:
                if cpus is None:
                    cpus = np.full(n, -1, dtype=np.int64)  # -1: a queue whose policy left cores to the placer
                cpus[rows] = share.cpus
        if cpus is not None:  # queues left as they were keep their cores; others get their GPUs' share
            for rows, answered in kept:
                if not answered:
                    cpus[rows] = j.cpus[rows]
            per_gpu = ctx.cpu_capacity // max(1, ctx.capacity)
            cpus = np.where(cpus < 0, gpus * per_gpu, cpus)
        return Shares(gpus, types, cpus)

    def wakeup(self, ctx: Context) -> float | None:
        """The earliest time a queue's policy asked for; asked again only of the policies that ran at
        the last decision (the others' answers stand, as their shares do)."""
        q = self.queue_rows(ctx)
        present = set()
        for qi, rows in self._partition(q):
            present.add(qi)
            if qi in self._ran or qi not in self._wakes:
                cap, cores = int(self._entitled[0, qi]), int(self._entitled[1, qi])  # one column per queue
                sub = self._sub_context(ctx, rows, cap, cores, np.minimum(ctx.capacity_by_type, cap))
                self._wakes[qi] = self.policy_of(self.queues.names[qi]).wakeup(sub)
        self._ran = set()
        for qi in set(self._wakes) - present:  # queues without jobs want nothing
            del self._wakes[qi]
            self._signature.pop(qi, None)
            self._answer.pop(qi, None)
        times = [w for w in self._wakes.values() if w is not None]
        return min(times) if times else None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _held(j, rows: np.ndarray) -> bytes:  # noqa: ANN001 - the context's jobs view
        """What ``rows`` hold now (GPUs, their type, cores): an answer given at another holding was
        carried out since, and the shares are what stands."""
        return j.share[rows].tobytes() + j.gpu_type[rows].tobytes() + j.cpus[rows].tobytes()

    @staticmethod
    def _partition(q: np.ndarray):  # noqa: ANN205 - yields (queue index, ascending rows)
        if q.size and (q == q[0]).all():  # every job in one queue (no queues configured): no sort
            yield int(q[0]), np.arange(q.size)
            return
        order = np.argsort(q, kind="stable")
        sq = q[order]
        starts = np.flatnonzero(np.r_[True, sq[1:] != sq[:-1]]) if sq.size else np.zeros(0, dtype=np.int64)
        ends = np.r_[starts[1:], sq.size]
        for s, e in zip(starts.tolist(), ends.tolist()):
            yield int(sq[s]), order[s:e]

    @staticmethod
    def _sub_context(ctx: Context, rows: np.ndarray, gpus: int, cpus: int, by_type: np.ndarray) -> Context:
        return dataclasses.replace(ctx, capacity=gpus, cpu_capacity=cpus, capacity_by_type=by_type,
                                   jobs=RowsView(ctx.jobs, rows))


def cut_to_fit(ctx: Context, gpus: np.ndarray, gpu_type: np.ndarray | None, elastic: bool) -> np.ndarray:
    """``gpus`` cut back to ``ctx``'s capacity (and per-type capacity): elastic jobs toward their
    minimum first, largest surplus first; then whole jobs, those that were not running first, then
    the most recently started (Kueue preempts the most recently admitted first). Never leaves a job
    between 0 and its minimum."""
    j = ctx.jobs
    g = gpus.copy()
    for rows, cap in _limits(ctx, g, gpu_type):
        excess = int(g[rows].sum()) - cap
        if excess <= 0:
            continue
        if elastic:
            surplus = np.where(g[rows] > 0, g[rows] - j.min_gpus[rows], 0)
            for r in np.argsort(-surplus, kind="stable").tolist():
                if excess <= 0 or surplus[r] <= 0:
                    break
                take = min(int(surplus[r]), excess)
                g[rows[r]] -= take
                excess -= take
        if excess > 0:  # not running first, then the latest started, then the latest submitted
            started = np.where(j.share[rows] > 0, np.nan_to_num(j.last_start[rows], nan=np.inf), np.inf)
            for r in np.lexsort((-j.uid[rows], -started)).tolist():
                if excess <= 0:
                    break
                if g[rows[r]] > 0:
                    excess -= int(g[rows[r]])
                    g[rows[r]] = 0
    return g


def _limits(ctx: Context, g: np.ndarray, gpu_type: np.ndarray | None):  # noqa: ANN202 - (rows, capacity) pairs
    yield np.arange(g.size), ctx.capacity
    if gpu_type is not None:
        for t, cap in enumerate(np.asarray(ctx.capacity_by_type).tolist()):
            yield np.flatnonzero(gpu_type == t), int(cap)


def _same(seen: tuple | None, sig: tuple) -> bool:
    """Signatures equal: every field but the curves by value, the curves by identity."""
    return seen is not None and seen[:-1] == sig[:-1] and seen[-1] is sig[-1]
