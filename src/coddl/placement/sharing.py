"""Many jobs per GPU: which sharing jobs go together on which GPU.

The other scale of GPU management (Salus, Gandiva, Gavel's space sharing, KAI's fractions): a job
that asks for part of a GPU (``JobSpec.gpu_fraction``) or accepts a co-tenant (``shareable``) is
packed beside others on one GPU. Policies are not changed: they see a sharing job as a rigid
one-GPU job; the scheduler lets them hand out the GPUs that packing saves (``Scheduler._decide``)
and this module decides where the sharing jobs sit.

Rules (``SharingRule``):

* ``exclusive`` — no sharing: each sharing job holds a GPU of its own (the baseline);
* ``pack`` — Gandiva's packing: a GPU takes sharing jobs while their fractions sum to at most 1
  and their memory fits the GPU type's;
* ``aware`` — as ``pack``, and a job joins a GPU only if every job there, the newcomer included,
  keeps at least ``min_retained`` of its solo speed under the co-location model
  (``perf/interference.py``, from Gavel's measured pairs): Gavel's space sharing admits a pair
  only where sharing does not make a job too slow.

Packing is best-fit decreasing: newcomers, largest fraction first, go to the GPU they fit with the
least room left (existing GPUs and the ones opened in the same decision), else to a new GPU — a job
that asked for a fraction is packed onto as few GPUs as possible, leaving whole GPUs for whole-GPU
jobs. A shareable job asked for a whole GPU: it gets one to itself while the decision leaves GPUs
free (``spare``), and shares only when GPUs run short (space sharing where it helps). A
running sharing job never moves: jobs that stay keep their GPU, so packing never migrates. A GPU
whose last sharing job leaves goes back to the placer. Only one-GPU jobs share; a data-parallel
job's GPUs are never shared.

A co-tenant slows a job down: its rate is its solo rate × the product over its co-tenants b of
f(a|b), the fraction of its speed job a keeps beside b (Gavel measured pairs; for three or more
jobs the pairwise losses are taken as independent, an approximation stated here because no table
measured triples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Literal

import numpy as np

from coddl.core.cluster import Cluster
from coddl.core.job import JobId, JobSpec

if TYPE_CHECKING:
    from coddl.policies.base import Policy

Mode = Literal["exclusive", "pack", "aware"]
EPS = 1e-9
NEW = -1  # a GPU a packing opens: it has no index until the placer gives it one
# kinds of job whose refusals are remembered at once (a cache: a server that sees ever new kinds —
# fractions, memory needs — forgets them all and starts again rather than grow without bound)
MAX_REMEMBERED_KINDS = 256


class SharingRuleError(ValueError):
    """A ``--sharing`` value that is not a rule (one line naming the valid ones)."""


@dataclass(frozen=True, slots=True)
class SharingRule:
    mode: Mode = "exclusive"
    min_retained: float = 0.5  # aware: each tenant keeps at least this share of its solo speed

    @property
    def shares(self) -> bool:
        return self.mode != "exclusive"

    def __str__(self) -> str:
        return f"aware:min_retained={self.min_retained:g}" if self.mode == "aware" else self.mode

    @staticmethod
    def parse(text: str) -> "SharingRule":
        """``exclusive``, ``pack``, ``aware`` or ``aware:min_retained=0.6``."""
        mode, _, opts = text.strip().partition(":")
        if mode not in ("exclusive", "pack", "aware"):
            raise SharingRuleError(f"unknown sharing rule {text!r}; valid: exclusive, pack, aware[:min_retained=F]")
        floor = 0.5
        for opt in filter(None, opts.split(",")):
            key, _, value = opt.partition("=")
            if mode != "aware" or key != "min_retained":
                raise SharingRuleError(f"sharing rule {text!r}: unknown option {key!r}"
                                       + ("; valid: min_retained" if mode == "aware" else f"; {mode} takes none"))
            try:
                floor = float(value)
            except ValueError:
                raise SharingRuleError(f"sharing rule {text!r}: min_retained must be a number, got {value!r}") from None
            if not 0.0 <= floor <= 1.0:
                raise SharingRuleError(f"sharing rule {text!r}: min_retained must be in [0, 1], got {value}")
        return SharingRule(mode, floor)  # type: ignore[arg-type]

    def check_policy(self, policy: "Policy") -> None:
        """A rule that shares GPUs cannot run under a policy that assigns each job its CPU cores."""
        if self.shares and policy.assigns_cores():
            raise SharingRuleError(f"policy {policy.name} assigns each job its CPU cores, which jobs sharing a GPU "
                                   f"cannot have (they run on their GPU's cores): use sharing 'exclusive'"
                                   + (f" or {policy.name}:unified=false" if policy.name == "aiturbo" else ""))


@dataclass(frozen=True, slots=True)
class Tenant:
    """A sharing job as the packer sees it."""

    job_id: JobId
    fraction: float  # the part of a GPU it is packed as (JobSpec.packing_fraction)
    memory_gb: float | None  # None: its fraction of the GPU's memory
    kind: int  # its row in the co-location matrix (the job's curve model at submission)
    gpu_type: int = -1  # the type it must run on (-1: any)
    declared: bool = True  # it asked for a fraction of a GPU (a shareable job did not: it packs as 0.5)

    @staticmethod
    def of(spec: JobSpec, kind: int, gpu_type: int) -> "Tenant":
        return Tenant(spec.job_id, spec.packing_fraction, spec.gpu_memory_gb, kind, gpu_type, spec.gpu_fraction < 1.0)


@dataclass(slots=True)
class Bin:
    """One GPU's tenants (``gpu`` is NEW for a GPU a packing opens), with the fraction and memory
    they hold (kept up to date by ``add``: packing asks for them for every candidate GPU)."""

    gpu: int
    gpu_type: int  # -1 for a new GPU of no requested type: the placer chooses
    tenants: list[Tenant] = field(default_factory=list)
    used: float = 0.0
    memory: float = 0.0

    def add(self, tenant: Tenant, memory: float) -> None:
        self.tenants.append(tenant)
        self.used += tenant.fraction
        self.memory += memory


@dataclass(slots=True)
class Packing:
    """A tentative answer: where each admitted sharing job sits (an existing GPU's index, or a new
    GPU in ``opened``), and what it costs in GPUs. Only what changes is listed, so that a decision
    costs what changed, not what is shared."""

    at: dict[JobId, int]  # newcomers that join existing GPUs
    opened: list[Bin]  # new GPUs and their tenants
    leaving: list[JobId]  # sharing jobs that lose their GPU
    emptied: list[int]  # existing GPUs whose every tenant leaves
    gpus: int  # shared GPUs after: existing ones not emptied, and the opened ones
    joined: dict[int, Bin] = field(default_factory=dict)  # existing GPUs a newcomer joins → their bin after


Retained = Callable[[int, int, int], float]  # (kind of a, kind of b, GPU type) → f(a|b)
Clash = Callable[[int, int, int], bool]  # (kind, kind, GPU type) → known not to fit one GPU together


class SharedGpus:
    """The sharing jobs' GPUs: which GPU each holds and who else is there."""

    def __init__(self, cluster: Cluster, rule: SharingRule, retained: Retained | None = None,
                 clash: Clash | None = None) -> None:
        self.cluster = cluster
        self.rule = rule
        self.retained_pair: Retained = retained or (lambda a, b, t: 1.0)
        self.clash: Clash = clash or (lambda a, b, t: False)
        self._type_memory = np.array([cluster.gpu_type_of(t).memory_gb for t in cluster.type_names])
        self._type_of_gpu = cluster.node_type_index[cluster.node_of_gpu]
        self.tenants: dict[JobId, Tenant] = {}  # every registered sharing job, placed or not
        self.gpu_of: dict[JobId, int] = {}
        self.on: dict[int, list[Tenant]] = {}  # GPU → its tenants (only GPUs holding someone)
        # per GPU: 1 − the fraction its tenants hold (−1: not a shared GPU), and the memory they hold
        self._room = np.full(cluster.total_gpus, -1.0)
        # the shared GPUs' room, summed: a running total kept with ``_room`` (packing reads it at every
        # call); it only bounds a packing from below, with EPS to spare, so rounding in it moves nothing
        self._room_sum = 0.0
        self._memory = np.zeros(cluster.total_gpus)
        self._count = np.zeros(cluster.total_gpus, dtype=np.int64)  # tenants per GPU
        ntypes = len(cluster.type_names)
        self._shared_by_type = np.zeros(ntypes, dtype=np.int64)  # shared GPUs per type
        self._saved_by_type = np.zeros(ntypes, dtype=np.int64)  # per type, tenants minus shared GPUs
        self._bins: dict[int, Bin] = {}  # per shared GPU, its tenants as a bin (read by packing, never changed)
        self.touched: set[int] = set()  # GPUs whose tenants changed since the last ``take_touched``
        # measured f(a|b) per (kind a, kind b, GPU type), replacing the table's value (``observe``)
        self.measured: dict[tuple[int, int, int], float] = {}
        # per tenant signature (``_signature``), the GPUs whose tenants as they are now refused a job
        # with it: a GPU's answer cannot change until its tenants do (``_changed``) or a pair's
        # measured value does, so a job that fits nowhere is not tried again GPU by GPU at every step
        self._refused: dict[tuple, np.ndarray] = {}

    # ------------------------------------------------------------------ jobs
    def register(self, tenant: Tenant) -> None:
        self.tenants[tenant.job_id] = tenant

    def forget(self, job: JobId) -> int | None:
        """The job left the system; returns the GPU it emptied (to give back), if any."""
        self.tenants.pop(job, None)
        return self._leave(job)

    def _leave(self, job: JobId) -> int | None:
        g = self.gpu_of.pop(job, None)
        if g is None:
            return None
        self.on[g] = [t for t in self.on[g] if t.job_id != job]
        self._changed(g)
        if not self.on[g]:
            del self.on[g]
            del self._bins[g]
            self._room_sum -= max(float(self._room[g]), 0.0)
            self._room[g], self._memory[g] = -1.0, 0.0
            self._set_count(g, 0)
            return g
        self._sync(g)
        return None

    def _changed(self, g: int) -> None:
        """GPU ``g``'s tenants change: it is touched, and what it refused may now fit."""
        self.touched.add(g)
        for no in self._refused.values():
            no[g] = False

    @staticmethod
    def _signature(t: Tenant) -> tuple:
        """What ``_fits`` reads of a newcomer: jobs alike in it fit the same GPUs."""
        return (t.kind, t.declared, t.fraction, t.memory_gb, t.gpu_type)

    def _sync(self, g: int) -> None:
        """Recompute a GPU's bin, room and memory from its tenants (sums, not running updates: no drift)."""
        b = self._bin(g, int(self._type_of_gpu[g]), self.on[g])
        self._bins[g] = b
        self._room_sum += max(1.0 - b.used, 0.0) - max(float(self._room[g]), 0.0)
        self._room[g], self._memory[g] = 1.0 - b.used, b.memory
        self._set_count(g, len(b.tenants))

    def _set_count(self, g: int, count: int) -> None:
        """GPU ``g`` now holds ``count`` tenants: the per-type tallies follow (kept, not recounted:
        the scheduler reads them at every decision)."""
        old = int(self._count[g])
        ty = int(self._type_of_gpu[g])
        self._shared_by_type[ty] += (count > 0) - (old > 0)
        self._saved_by_type[ty] += max(count - 1, 0) - max(old - 1, 0)
        self._count[g] = count

    @property
    def gpus_used(self) -> int:
        return len(self.on)

    # ------------------------------------------------------------------ speed
    def capacity_of(self, gpu_type: int) -> float:
        """A GPU type's memory; for a GPU of no type yet (the placer picks it), the smallest type's."""
        return float(self._type_memory[gpu_type] if gpu_type >= 0 else self._type_memory.min())

    def memory_of(self, tenant: Tenant, gpu_type: int) -> float:
        """What the tenant holds of a GPU's memory: its need, or its fraction of the GPU's; a need
        beyond the GPU's memory counts as all of it (the job gets the GPU to itself, and its own
        allocator, not the packer, finds out it does not fit)."""
        cap = self.capacity_of(gpu_type)
        return min(tenant.memory_gb, cap) if tenant.memory_gb is not None else tenant.fraction * cap

    def retained(self, job: JobId) -> float:
        """The share of its solo speed the job keeps beside its co-tenants now (1 alone)."""
        g = self.gpu_of.get(job)
        if g is None:
            return 1.0
        return self._retained_in(self.tenants[job], self.on[g], int(self._type_of_gpu[g]))

    def _retained_in(self, me: Tenant, group: list[Tenant], gpu_type: int) -> float:
        f = 1.0
        t = max(gpu_type, 0)
        for other in group:
            if other.job_id != me.job_id:
                key = (me.kind, other.kind, t)
                f *= self.measured[key] if key in self.measured else self.retained_pair(*key)
        return f

    def observe(self, job: JobId, retained: float, weight: float = 0.5) -> bool:
        """Online correction (the real system): the job, beside exactly one co-tenant, ran at
        ``retained`` × its solo speed. The pair's value moves that far (``weight``) towards the
        measurement — an exponential average, so one noisy sample does not rule — and the packer
        and the ``aware`` rule use it from then on. Returns False when nothing was learnt (the job
        is alone or has several co-tenants, whose shares of the loss cannot be told apart)."""
        g = self.gpu_of.get(job)
        if g is None or len(self.on[g]) != 2 or not retained > 0:
            return False
        me, other = (self.on[g][0], self.on[g][1]) if self.on[g][0].job_id == job else (self.on[g][1], self.on[g][0])
        key = (me.kind, other.kind, int(self._type_of_gpu[g]))
        old = self.measured.get(key, self.retained_pair(*key))
        self.measured[key] = (1.0 - weight) * old + weight * min(1.0, retained)
        self._refused.clear()  # a pair's value moved: under ``aware`` a refusal may no longer hold
        return True

    def _fits(self, b: Bin, new: Tenant) -> bool:
        """Fractions sum to at most 1, memory fits, no pair that cannot run together (Gavel's 0:
        together they do not fit a GPU), and under ``aware`` every tenant keeps its floor."""
        gpu_type = b.gpu_type
        if new.gpu_type >= 0 and gpu_type >= 0 and new.gpu_type != gpu_type:
            return False
        if b.used + new.fraction > 1.0 + EPS:
            return False
        if b.memory + self.memory_of(new, gpu_type) > self.capacity_of(gpu_type) + EPS:
            return False
        group = b.tenants
        if not group:
            return True
        # a pair known not to fit one GPU's memory is kept apart unless both declared their fractions
        t_ = max(gpu_type, 0)
        if any(not (new.declared and t.declared) and self.clash(new.kind, t.kind, t_) for t in group):
            return False
        after = [*group, new]
        floor = self.rule.min_retained if self.rule.mode == "aware" else 0.0
        for t in after:
            kept = self._retained_in(t, after, gpu_type)
            if kept <= 0.0 or kept < floor - EPS:
                return False
        return True

    @staticmethod
    def _typed(t: Tenant, types: dict[JobId, int] | None) -> Tenant:
        chosen = types.get(t.job_id, -1) if types else -1
        return replace(t, gpu_type=chosen) if chosen >= 0 and chosen != t.gpu_type else t

    def _bin(self, gpu: int, gpu_type: int, tenants: list[Tenant]) -> Bin:
        b = Bin(gpu, gpu_type)
        for t in tenants:
            b.add(t, self.memory_of(t, gpu_type))
        return b

    # ------------------------------------------------------------------ packing
    def pack(self, admitted: list[JobId], free: int | None = None, types: dict[JobId, int] | None = None) -> Packing:
        """Where the ``admitted`` sharing jobs would sit (nothing changes): those placed stay, the
        others are packed best-fit decreasing; sharing jobs placed but not admitted leave. ``free``
        is the GPUs no whole-GPU job holds (None: no limit): those beyond the shared GPUs kept may go to shareable
        jobs (no fraction asked for), one each; a packing that needs more than ``free`` stops there
        (its ``gpus`` is then ``free + 1``). Costs what changes: the leavers, the newcomers and one
        vector pass over the GPUs per newcomer. ``types``: the GPU type a policy chose for a job
        (it must then run on that type)."""
        want = set(admitted)
        return self.pack_changes([j for j in admitted if j not in self.gpu_of],
                                 [j for j in self.gpu_of if j not in want], free, types)

    def pack_changes(self, arriving: list[JobId], leaving: list[JobId], free: int | None = None,
                     types: dict[JobId, int] | None = None) -> Packing:
        """``pack`` given what changes: the sharing jobs to place and those to take off their GPUs
        (every other placed job stays)."""
        if not arriving and not leaving:  # the common step: nothing moves
            return Packing({}, [], [], [], len(self.on))
        tenants = self.tenants
        newcomers = [self._typed(tenants[j], types) for j in arriving] if types else [tenants[j] for j in arriving]
        if len(newcomers) > 1:
            newcomers.sort(key=lambda t: (-t.fraction, t.job_id))
        total = self._room.size
        room = np.empty(total + len(newcomers))  # opened GPUs after the real ones
        room[:total] = self._room
        room[total:] = -1.0
        room_sum = self._room_sum  # room on the shared GPUs, as the leavers leave them
        bins: dict[int, Bin] = {}  # GPUs whose tenants change, as they will be
        emptied = []
        if leaving:
            gone = set(leaving)
            for g in {self.gpu_of[j] for j in leaving}:
                room_sum -= max(float(room[g]), 0.0)
                stay = [t for t in self.on[g] if t.job_id not in gone]
                if stay:
                    bins[g] = self._bin(g, int(self._type_of_gpu[g]), stay)
                    room[g] = 1.0 - bins[g].used
                    room_sum += max(float(room[g]), 0.0)
                else:
                    emptied.append(g)
                    room[g] = -1.0
        at: dict[JobId, int] = {}
        kept = len(self.on) - len(emptied)
        opened: list[Bin] = []
        if free is not None:  # a GPU holds fractions up to 1: fewer GPUs than the fractions need cannot do
            short = sum(t.fraction for t in newcomers) - room_sum
            if kept + max(0, math.ceil(short - EPS)) > free:
                return Packing(at, opened, leaving, emptied, free + 1)
        spare = free - kept if free is not None else 0
        limit = free if free is not None else len(self.on) + len(newcomers)
        # a GPU that refused a job refuses every job alike (``_signature``) for the rest of this
        # packing: tenants are only added, which leaves less room and more contention; a GPU this
        # packing does not change keeps its refusal for later packings too (``_refused``)
        refused: dict[tuple, np.ndarray] = {}
        for t in newcomers:
            at_bin = -1
            if t.declared or spare <= len(opened):
                sig = self._signature(t)
                known = self._refused.get(sig)
                if known is None:
                    if len(self._refused) >= MAX_REMEMBERED_KINDS:
                        self._refused.clear()
                    known = self._refused[sig] = np.zeros(total, dtype=bool)
                no = refused.get(sig)
                if no is None:
                    no = refused[sig] = np.zeros(room.size, dtype=bool)
                    no[:total] = known
                    for g in bins:  # a GPU whose tenants change in this packing is asked again
                        no[g] = False
                # best fit: the least room left first, the lowest GPU among equals; almost always
                # the first one asked takes the job (refusals are remembered), so no sort
                candidates = np.where((room >= t.fraction - EPS) & ~no, room, np.inf)
                while True:
                    i = int(candidates.argmin())
                    if candidates[i] == np.inf:
                        break
                    b = (bins.get(i) or self._bins[i]) if i < total else opened[i - total]
                    if self._fits(b, t):
                        at_bin = i
                        if i < total and i not in bins:  # a copy: the GPU's own bin stays as it is
                            bins[i] = Bin(b.gpu, b.gpu_type, list(b.tenants), b.used, b.memory)
                        break
                    no[i] = True
                    candidates[i] = np.inf
                    if i < total and i not in bins:  # refused as the GPU is now: remembered
                        known[i] = True
            if at_bin < 0:
                if kept + len(opened) >= limit:  # one GPU more than there is: the decision cannot be
                    return Packing(at, opened, leaving, emptied, limit + 1)  # packed, stop here
                at_bin = total + len(opened)
                opened.append(Bin(NEW, t.gpu_type))
            best = bins[at_bin] if at_bin < total else opened[at_bin - total]
            if best.gpu_type < 0 and t.gpu_type >= 0:
                best.gpu_type = t.gpu_type
            best.add(t, self.memory_of(t, best.gpu_type))
            room[at_bin] = 1.0 - best.used
            if at_bin < total:
                at[t.job_id] = at_bin
        joined = {g: b for g, b in bins.items() if any(self.gpu_of.get(x.job_id) != g for x in b.tenants)}
        return Packing(at, opened, leaving, emptied, kept + len(opened), joined)

    def commit(self, packing: Packing, take: Callable[[int], int], give_back: Callable[[int], None]) -> dict[JobId, int]:
        """Carry a packing out: GPUs whose last tenant leaves go back first (``give_back``), newcomers
        join their GPUs, then ``take(gpu_type)`` gives a free GPU to each opened bin. Returns every
        admitted job's GPU. (The scheduler calls the three parts itself, to place whole jobs between.)"""
        self.release(packing, give_back)
        where = self.join(packing)
        where.update(self.open(packing.opened, take))
        return where

    def release(self, packing: Packing, give_back: Callable[[int], None]) -> None:
        """The packing's leavers go; a GPU left empty goes back."""
        for j in packing.leaving:
            g = self._leave(j)
            if g is not None:
                give_back(g)

    def join(self, packing: Packing) -> dict[JobId, int]:
        """Newcomers join existing GPUs; returns where every admitted job on an existing GPU is."""
        for j, g in packing.at.items():
            if self.gpu_of.get(j) != g:
                self.gpu_of[j] = g
                self.on.setdefault(g, []).append(self.tenants[j])
                self._changed(g)
                self._sync(g)
        return dict(packing.at)

    def open(self, bins: list[Bin], take: Callable[[int], int]) -> dict[JobId, int]:
        """Each bin gets a free GPU from ``take(gpu_type)``; returns where its tenants are."""
        where = {}
        for b in bins:
            g = take(b.gpu_type)
            self.on[g] = list(b.tenants)
            self._changed(g)
            self._sync(g)
            for t in b.tenants:
                self.gpu_of[t.job_id] = g
                where[t.job_id] = g
        return where

    def take_touched(self) -> set[int]:
        out, self.touched = self.touched, set()
        return out

    def saved_by_type(self) -> np.ndarray:
        """Per type, the GPUs the current packing saves: jobs placed minus GPUs they hold."""
        return self._saved_by_type.copy()

    def has_room(self, packing: Packing, waiting: int, smallest: float) -> bool:
        """Whether ``room`` finds any: a GPU of ``packing`` where the smallest of ``waiting`` jobs
        might still fit (what a first offer of one GPU needs to know, without counting)."""
        if waiting <= 0:
            return False
        if any(1.0 - b.used + EPS >= smallest for b in (*packing.opened, *packing.joined.values())):
            return True
        changed = set(packing.emptied) | packing.joined.keys()
        return any(g not in changed for g in np.flatnonzero(self._room + EPS >= smallest).tolist())

    def room(self, packing: Packing, ntypes: int, waiting: int, smallest: float) -> tuple[np.ndarray, int]:
        """How many of ``waiting`` sharing jobs left out of ``packing`` (the smallest asks for
        ``smallest`` of a GPU) might still fit on its GPUs, by fraction alone (an upper bound: memory
        and the aware rule may refuse some), per type of the GPU, and on new GPUs of no type yet."""
        per_type = np.zeros(ntypes, dtype=np.int64)
        if waiting <= 0:
            return per_type, 0
        room = self._room.copy()
        room[packing.emptied] = -1.0
        for g, b in packing.joined.items():
            room[g] = 1.0 - b.used
        shared = room >= 0
        fits = np.floor((room[shared] + EPS) / smallest).astype(np.int64)
        per_type = np.bincount(self._type_of_gpu[shared], weights=fits, minlength=ntypes).astype(np.int64)
        anywhere = 0
        for b in packing.opened:
            extra = int((1.0 - b.used + EPS) // smallest)
            if b.gpu_type >= 0:
                per_type[b.gpu_type] += extra
            else:
                anywhere += extra
        # no more than are waiting: the roomiest types first, then GPUs of no type (scaling each
        # part down and rounding would lose one that fits where the room is split)
        left = waiting
        for ti in np.argsort(-per_type, kind="stable"):
            per_type[ti] = min(int(per_type[ti]), left)
            left -= int(per_type[ti])
        return per_type, min(anywhere, left)

    def used_by_type(self, packing: Packing) -> tuple[np.ndarray, int]:
        """GPUs a packing holds per type, and how many new ones may be of any type."""
        used = self._shared_by_type.copy()
        for g in packing.emptied:
            used[self._type_of_gpu[g]] -= 1
        anywhere = 0
        for b in packing.opened:
            if b.gpu_type >= 0:
                used[b.gpu_type] += 1
            else:
                anywhere += 1
        return used, anywhere
