"""Topology-aware placement that keeps running jobs where they are and consolidates the rest.

The placer is incremental: it owns the free maps of GPUs and CPU cores and is asked to re-place
only the jobs whose share changed, so its cost per scheduling step is proportional to what changed.
Rules:

* a shrinking job keeps its GPUs on the nodes where it has the most (it stays consolidated);
* a growing job first fills the nodes it already uses, then new nodes;
* new GPUs go best-fit to a single node (the fullest node that still fits, which leaves big holes
  for big jobs), or — when no node fits — to the emptiest nodes first, so the job spans few nodes;
* shrinks are applied before grows, and big requests are placed before small ones;
* CPU cores follow the GPUs: on each node a job gets cores in proportion to its GPUs there
  (the node's cores ÷ GPUs by default, or the job's requested total split by GPUs), keeping the
  cores it already had, never more than the node has free.
A GPU or a core is never given to two jobs.

Mixed clusters. A data-parallel job runs at the pace of its slowest GPU, so a request for "any
type" (``gpu_type=-1``) lands on ONE type unless ``allow_mixing`` (the job balances its per-GPU
batch to speed, CoDDL's load balancing): a type that can host it on one node if any, the one with
the most free GPUs among them; a growing job stays on its type while the type has room. When the
job must span nodes whatever the type, the optional ``scorer`` (the throughput estimator: steps/s
of the job on a shape of GPUs per node and their types) ranks the candidate placements of the same
count — the fewest-node placement on each type that has room, and with mixing one across types —
so a fast type on two nodes can beat a slow one on two. Only then is it consulted, which keeps the
common path free of estimator calls. A type-agnostic policy counts only total capacity, so when no
single type has room the job is spread over types, fastest first (and runs at the slowest's pace).
Single-type clusters never take these branches.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from coddl.core.allocation import Gpus
from coddl.core.cluster import Cluster
from coddl.core.job import JobId
from coddl.placement import kernels

Cores = tuple[int, ...]
# (job, GPUs per node, GPU type of each of those nodes) → estimated steps/s; higher is better
Scorer = Callable[[JobId, tuple[int, ...], tuple[str, ...]], float]
Shape = list[tuple[int, int]]  # (node, GPUs to take there)


class PlacementError(RuntimeError):
    """The shares asked for more GPUs (of a type) than are free: a policy bug, never user input."""


@dataclass(frozen=True, slots=True)
class Request:
    job_id: JobId
    gpus: int
    gpu_type: int = -1  # index into cluster.type_names; -1 = any type
    cpus: int | None = None  # total cores; None = the nodes' GPU-proportional share


@dataclass(frozen=True, slots=True)
class Placed:
    gpus: Gpus
    cores: Cores


class _Pool:
    """One per-node resource with global indices (GPUs or CPU cores)."""

    def __init__(self, node_of: np.ndarray, first: np.ndarray, sizes: list[int]) -> None:
        self.node_of = node_of
        self.first = first
        self.size = np.array(sizes, dtype=np.int64)
        self.free = np.ones(int(self.size.sum()), dtype=bool)
        self.node_free = self.size.copy()

    def claim(self, idx: tuple[int, ...]) -> None:
        a = np.asarray(idx, dtype=np.int64)
        if not self.free[a].all():
            raise PlacementError(f"{sorted(set(idx))} are not all free")
        self.free[a] = False
        np.subtract.at(self.node_free, self.node_of[a], 1)

    def release(self, idx: tuple[int, ...]) -> None:
        if idx:
            kernels.release(np.asarray(idx, dtype=np.int64), self.free, self.node_free, self.node_of)

    def take(self, node: int, count: int) -> list[int]:
        lo = int(self.first[node])
        local = np.flatnonzero(self.free[lo : lo + int(self.size[node])])[:count] + lo
        self.free[local] = False
        self.node_free[node] -= local.size
        return local.tolist()


class ConsolidatingPlacer:
    def __init__(self, cluster: Cluster, *, allow_mixing: bool = False, scorer: Scorer | None = None) -> None:
        self.cluster = cluster
        self.gpu = _Pool(cluster.node_of_gpu, cluster.node_first_gpu, [n.gpus for n in cluster.nodes])
        self.core = _Pool(cluster.node_of_core, cluster.node_first_core, [n.cpus for n in cluster.nodes])
        self._type = cluster.node_type_index
        self._nodes = len(cluster.nodes)
        self.allow_mixing = allow_mixing
        self.scorer = scorer
        self._mixed_cluster = len(cluster.type_names) > 1
        speed = [cluster.gpu_type_of(t).speed for t in cluster.type_names]
        self._fastest_first = sorted(range(len(speed)), key=lambda t: -speed[t])
        self._explicit_cores = False  # False: every job holds its GPUs' proportional core blocks
        self._lists = (cluster.node_of_gpu.tolist(), cluster.node_first_gpu.tolist(),
                       cluster.node_first_core.tolist(), cluster.cores_per_gpu.tolist())
        # False: one-type clusters take the plain Python path too (the compiled path's reference)
        self.compiled = True
        # each GPU's proportional block of cores (see _block_cores), made once
        self._gpu_cores = [self._block_cores((g,)) for g in range(cluster.total_gpus)]

    # views used by the scheduler, the engine's invariant checks and tests
    @property
    def free(self) -> np.ndarray:
        return self.gpu.free

    @property
    def node_free(self) -> np.ndarray:
        return self.gpu.node_free

    def claim(self, gpus: Gpus, cores: Cores = ()) -> None:
        """Mark resources as used (recovering a persisted allocation)."""
        self.gpu.claim(gpus)
        if self._explicit_cores:
            self.core.claim(cores)

    def release(self, gpus: Gpus, cores: Cores = ()) -> None:
        self.gpu.release(gpus)
        if self._explicit_cores:
            self.core.release(cores)

    def take_one(self, gpu_type: int = -1) -> int:
        """One free GPU for jobs that share it (``placement/sharing.py``): best fit, the fullest
        node with a free GPU (of ``gpu_type``; -1: the type with the most free GPUs)."""
        if gpu_type < 0 and self._mixed_cluster:
            gpu_type = int(np.argmax(self.free_by_type()))
        free = np.where(self._allowed(gpu_type, 0), self.gpu.node_free, 0)
        if not free.any():
            raise PlacementError(f"no free GPU left to share (type {gpu_type})")
        ((node, _),) = self._shape(free, 1)
        return self.gpu.take(node, 1)[0]

    def gpu_cores(self, gpu: int) -> Cores:
        """The GPU's proportional block of its node's cores (what jobs sharing it run on)."""
        return self._gpu_cores[gpu]

    def free_by_type(self) -> np.ndarray:
        out = np.zeros(len(self.cluster.type_names), dtype=np.int64)
        np.add.at(out, self._type, self.gpu.node_free)
        return out

    # ------------------------------------------------------------------ GPUs
    def _shrink(self, old: Gpus, keep: int) -> Gpus:
        nodes = self.gpu.node_of[np.asarray(old, dtype=np.int64)]
        counts = np.bincount(nodes, minlength=self._nodes)
        # keep GPUs on the nodes holding most of the job (ties: lower node index)
        order = sorted(range(len(old)), key=lambda i: (-counts[nodes[i]], nodes[i], old[i]))
        kept = sorted(old[i] for i in order[:keep])
        keep_set = set(kept)
        self.gpu.release(tuple(g for g in old if g not in keep_set))
        return tuple(kept)

    def _allowed(self, gpu_type: int, cores_per_gpu: int) -> np.ndarray:
        ok = self.gpu.node_free > 0
        if gpu_type >= 0:
            ok &= self._type == gpu_type
        if cores_per_gpu > 0:  # prefer nodes that can also host the job's cores
            with_cores = ok & (self.core.node_free >= cores_per_gpu)
            if with_cores.any():
                return with_cores
        return ok

    def _grow(self, old: Gpus, want: int, gpu_type: int, cores_per_gpu: int) -> Gpus:
        got = list(old)
        need = want - len(old)
        if old:  # fill the nodes the job already uses, most-free first
            used_nodes = np.unique(self.gpu.node_of[np.asarray(old, dtype=np.int64)])
            allowed = self._allowed(gpu_type, 0)
            for node in sorted(used_nodes.tolist(), key=lambda n: -int(self.gpu.node_free[n])):
                if need == 0:
                    break
                if allowed[node]:
                    got += self.gpu.take(node, min(need, int(self.gpu.node_free[node])))
                    need = want - len(got)
        if need > 0:
            free = np.where(self._allowed(gpu_type, cores_per_gpu), self.gpu.node_free, 0)
            if int(free.sum()) < need:  # the nodes with room for the cores cannot hold it: any node
                free = np.where(self._allowed(gpu_type, 0), self.gpu.node_free, 0)
            if int(free.sum()) < need:
                raise PlacementError(f"no free GPU left for {want} GPUs (type {gpu_type})")
            for node, count in self._shape(free, need):
                got += self.gpu.take(node, count)
        return tuple(sorted(got))

    @staticmethod
    def _shape(free: np.ndarray, need: int) -> Shape:
        """Where ``need`` new GPUs go given usable ``free`` GPUs per node: best fit — the fullest
        node that still holds the rest — or, when no node does, the emptiest node first, so the job
        spans the fewest nodes. Nothing is taken, so candidates can be compared first."""
        fits = np.flatnonzero(free >= need)
        if fits.size:  # the common case: one node holds it (no copy)
            return [(int(fits[np.argmin(free[fits])]), need)]
        free = free.copy()
        shape: Shape = []
        while need > 0:
            fits = np.flatnonzero(free >= need)
            node = int(fits[np.argmin(free[fits])]) if fits.size else int(np.argmax(free))
            count = min(need, int(free[node]))
            shape.append((node, count))
            free[node] -= count
            need -= count
        return shape

    def reachable(self, old: Gpus, kmax: int, gpu_type: int = -1) -> list[Shape]:
        """For k = 1 … kmax, the (node, GPUs) a job holding ``old`` would get if it alone were
        resized to k now, by the rules of ``_shrink`` and ``_grow`` (nothing is taken): what a
        policy must price a count at when a spread placement runs slower than a consolidated one.
        Stops at the GPUs free (of ``gpu_type``) plus the job's own; the shape is the job's only."""
        nodes = self.gpu.node_of[np.asarray(old, dtype=np.int64)]
        held = np.bincount(nodes, minlength=self._nodes)
        free = np.where(self._allowed(gpu_type, 0), self.gpu.node_free, 0)
        kept = sorted(np.flatnonzero(held).tolist(), key=lambda n: (-int(held[n]), n))  # _shrink's order
        grow_first = sorted(np.flatnonzero(held).tolist(), key=lambda n: -int(free[n]))  # _grow's order
        out: list[Shape] = []
        for k in range(1, min(kmax, len(old) + int(free.sum())) + 1):
            have = np.zeros(self._nodes, dtype=np.int64)
            need = k
            for n in kept:  # a shrink keeps the nodes holding most of the job
                have[n] = min(int(held[n]), need)
                need -= int(have[n])
            left = free.copy()
            for n in grow_first:  # a grow fills the job's own nodes first
                take = min(need, int(left[n]))
                have[n] += take
                left[n] -= take
                need -= take
            if need:
                for n, c in self._shape(left, need):
                    have[n] += c
            out.append([(int(n), int(have[n])) for n in np.flatnonzero(have)])
        return out

    # ------------------------------------------------------------------ GPU types (mixed clusters)
    def _grow_any_type(self, job: JobId, old: Gpus, want: int, cores_per_gpu: int) -> Gpus:
        """A ``gpu_type=-1`` request on a mixed cluster without mixing: see the module docstring."""
        free_by_type = self.free_by_type()
        if old:
            own = int(self._type[self.gpu.node_of[old[0]]])
            if free_by_type[own] >= want - len(old):
                return self._grow(old, want, own, cores_per_gpu)
            self.gpu.release(old)  # moved whole to a type with room (one migration, not a mixed job)
            free_by_type = self.free_by_type()
        usable = {t: np.where(self._allowed(t, cores_per_gpu), self.gpu.node_free, 0)
                  for t in range(len(free_by_type)) if free_by_type[t] >= want}
        if not usable:  # the policy counted only total capacity: spread over types, fastest first
            got: Gpus = ()
            for t in self._fastest_first:
                if free_by_type[t] and len(got) < want:
                    got = self._grow(got, min(want, len(got) + int(free_by_type[t])), t, cores_per_gpu)
            return got
        one_node = {t for t, f in usable.items() if int(f.max()) >= want}
        ranked = sorted(usable, key=lambda t: (t not in one_node, -int(free_by_type[t]), t))
        if one_node or self.scorer is None or len(ranked) == 1:
            return self._grow((), want, ranked[0], cores_per_gpu)
        candidates = [self._shape(self._usable(t, cores_per_gpu, want), want) for t in ranked]
        return self._take(candidates[self._best(job, candidates)])

    def _usable(self, gpu_type: int, cores_per_gpu: int, need: int) -> np.ndarray:
        """Free GPUs per node for ``need`` new GPUs, as ``_grow`` takes them: on the nodes that can
        also host the cores when those hold them all, else on any node (of ``gpu_type``)."""
        free = np.where(self._allowed(gpu_type, cores_per_gpu), self.gpu.node_free, 0)
        if int(free.sum()) < need:
            free = np.where(self._allowed(gpu_type, 0), self.gpu.node_free, 0)
        if int(free.sum()) < need:  # _shape would never finish
            raise PlacementError(f"no free GPU left for {need} GPUs (type {gpu_type})")
        return free

    def _best(self, job: JobId, candidates: list[Shape]) -> int:
        """Index of the candidate the scorer estimates fastest (ties: the earlier one)."""
        names = self.cluster.type_names
        scores = [self.scorer(job, tuple(c for _, c in shape), tuple(names[self._type[n]] for n, _ in shape))
                  for shape in candidates]
        return int(np.argmax(scores))

    def _take(self, shape: Shape) -> Gpus:
        return tuple(sorted(g for node, count in shape for g in self.gpu.take(node, count)))

    def _grow_mixing(self, job: JobId, old: Gpus, want: int, cores_per_gpu: int) -> Gpus:
        """``allow_mixing``: a new job that no node can hold compares the fewest-node placement of
        each type with room against the fewest-node placement over all types."""
        usable = np.where(self._allowed(-1, cores_per_gpu), self.gpu.node_free, 0)
        if old or self.scorer is None or int(usable.max()) >= want:
            return self._grow(old, want, -1, cores_per_gpu)
        candidates = []
        for t in range(len(self.cluster.type_names)):
            on_t = np.where(self._type == t, usable, 0)
            if int(on_t.sum()) >= want:
                candidates.append(self._shape(on_t, want))
        candidates.append(self._shape(self._usable(-1, cores_per_gpu, want), want))
        return self._take(candidates[self._best(job, candidates)])

    # ------------------------------------------------------------------ cores
    def _block_cores(self, gpus: Gpus) -> Cores:
        """GPU-proportional cores without bookkeeping: local GPU i of a node owns that node's cores
        [i·c, (i+1)·c), c = cores per GPU. Disjoint by construction, so while every job gets the
        proportional share (every policy but the CPU-aware ones) nothing has to be tracked."""
        out: list[int] = []
        node_of, gpu_first, core_first, cpg = self._lists
        for g in gpus:  # plain Python: jobs hold a handful of GPUs, numpy would cost more
            n = node_of[g]
            base = core_first[n] + (g - gpu_first[n]) * cpg[n]
            out.extend(range(base, base + cpg[n]))
        return tuple(out)

    def _core_targets(self, gpus: Gpus, cpus: int | None) -> dict[int, int]:
        if not gpus:
            return {}
        nodes, per_node = np.unique(self.gpu.node_of[np.asarray(gpus, dtype=np.int64)], return_counts=True)
        if cpus is None:
            want = per_node * self.cluster.cores_per_gpu[nodes]
        else:  # split the total in proportion to GPUs per node (largest remainder)
            exact = cpus * per_node / per_node.sum()
            want = np.floor(exact).astype(np.int64)
            for i in np.argsort(-(exact - want), kind="stable")[: cpus - int(want.sum())]:
                want[i] += 1
        return {int(n): int(w) for n, w in zip(nodes, want)}

    @property
    def pools_cores(self) -> bool:
        """Cores are handed out from a pool (a policy assigned cores), not as each GPU's block."""
        return self._explicit_cores

    # ------------------------------------------------------------------ placement
    def place(self, current: dict[JobId, Gpus], requests: list[Request],
              current_cores: dict[JobId, Cores] | None = None) -> dict[JobId, Placed]:
        """New GPUs and cores for each requested job (only those); ``current``/``current_cores``
        give what they hold now. Jobs whose type changes are moved whole."""
        cur_cores = current_cores or {}
        if self.compiled and not self._mixed_cluster and not self._explicit_cores and all(r.cpus is None for r in requests):
            return self._place_one_type(current, requests)
        if not self._explicit_cores and any(r.cpus is not None for r in requests):
            self._explicit_cores = True  # from now on cores are handed out from the pool
            for held in cur_cores.values():
                self.core.claim(held)
        gpus: dict[JobId, Gpus] = {}
        grows: list[tuple[Request, Gpus]] = []
        for req in requests:
            if self._explicit_cores:
                self.core.release(cur_cores.get(req.job_id, ()))  # re-assigned below, old ones first
            old = current.get(req.job_id, ())
            if old and req.gpu_type >= 0 and int(self._type[self.gpu.node_of[old[0]]]) != req.gpu_type:
                self.gpu.release(old)
                old = ()
            if req.gpus == 0:
                self.gpu.release(old)
                gpus[req.job_id] = ()
            elif req.gpus <= len(old):
                gpus[req.job_id] = self._shrink(old, req.gpus)
            else:
                grows.append((req, old))
        grows.sort(key=lambda ro: (ro[0].gpu_type < 0, -ro[0].gpus))  # typed first: "any" takes what is left
        for req, old in grows:
            per_gpu = -(-req.cpus // req.gpus) if req.cpus else 0
            if req.gpu_type >= 0 or not self._mixed_cluster:
                gpus[req.job_id] = self._grow(old, req.gpus, req.gpu_type, per_gpu)
            elif self.allow_mixing:
                gpus[req.job_id] = self._grow_mixing(req.job_id, old, req.gpus, per_gpu)
            else:
                gpus[req.job_id] = self._grow_any_type(req.job_id, old, req.gpus, per_gpu)
        if not self._explicit_cores:
            return {j: Placed(g, self._block_cores(g)) for j, g in gpus.items()}
        # cores: every job first takes back the cores it had on its nodes, then fills up
        targets = {r.job_id: self._core_targets(gpus[r.job_id], r.cpus) for r in requests}
        cores: dict[JobId, list[int]] = {j: [] for j in targets}
        for j, tgt in targets.items():
            old = np.asarray(cur_cores.get(j, ()), dtype=np.int64)
            if old.size:
                old = old[self.core.free[old]]
                for node, want in tgt.items():
                    mine = old[self.core.node_of[old] == node][:want].tolist()
                    if mine:
                        self.core.claim(tuple(mine))
                        cores[j] += mine
        for j, tgt in targets.items():
            have = np.bincount(self.core.node_of[np.asarray(cores[j], dtype=np.int64)], minlength=self._nodes)
            for node, want in tgt.items():
                if want > have[node]:
                    cores[j] += self.core.take(node, want - int(have[node]))
        return {j: Placed(gpus[j], tuple(sorted(cores[j]))) for j in gpus}

    def _place_one_type(self, current: dict[JobId, Gpus], requests: list[Request]) -> dict[JobId, Placed]:
        """``place`` on a one-type cluster with GPU-proportional cores: the same rules, compiled
        (``placement/kernels.py``); shrinks first, then grows, typed requests and big ones first.
        The arrays are built from plain lists (a step places a handful of jobs: numpy's per-call
        cost, not the copying, is what counts here)."""
        pool = self.gpu
        held = [current.get(r.job_id, ()) for r in requests]
        old_at = np.array([0, *itertools.accumulate(map(len, held))], dtype=np.int64)
        old = np.array([g for h in held for g in h], dtype=np.int64)
        want = np.array([r.gpus for r in requests], dtype=np.int64)
        grows = sorted((i for i, r in enumerate(requests) if r.gpus > len(held[i])),
                       key=lambda i: (requests[i].gpu_type < 0, -requests[i].gpus))
        new, new_at = kernels.place(old, old_at, want, np.array(grows, dtype=np.int64), pool.free, pool.node_free,
                                    pool.node_of, pool.first, pool.size, self._nodes)
        if new_at.size == 0:
            raise PlacementError("no free GPU left for the GPUs asked for")
        flat = new.tolist()
        at = new_at.tolist()
        out: dict[JobId, Placed] = {}
        for i, r in enumerate(requests):
            gpus = tuple(flat[at[i]:at[i + 1]])
            out[r.job_id] = Placed(gpus, self._cores_of(gpus))
        return out

    def _cores_of(self, gpus: Gpus) -> Cores:
        """The GPUs' proportional blocks of cores (``_block_cores``), fast for the common shapes:
        one GPU is its block, consecutive GPUs of one node one run of cores; others are joined."""
        if len(gpus) <= 1:
            return self._gpu_cores[gpus[0]] if gpus else ()
        node_of, gpu_first, core_first, cpg = self._lists
        g0, g1 = gpus[0], gpus[-1]
        n = node_of[g0]
        if g1 - g0 == len(gpus) - 1 and node_of[g1] == n:
            base = core_first[n] + (g0 - gpu_first[n]) * cpg[n]
            return tuple(range(base, base + len(gpus) * cpg[n]))
        cores = self._gpu_cores
        return tuple(itertools.chain.from_iterable(cores[g] for g in gpus))

    def fragmentation(self) -> float:
        """Share of free GPUs that sit on partially used nodes (0 = every free GPU is on an empty
        node; 1 = free capacity is scattered)."""
        return kernels.fragmentation(self.gpu.node_free, self.gpu.size)
