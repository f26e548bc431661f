"""Topology-aware placement that keeps running jobs where they are and consolidates the rest.

The placer is incremental: it owns the free-GPU map and is asked to re-place only the jobs whose
share changed, so its cost per scheduling step is proportional to what changed. Rules:

* a shrinking job keeps its GPUs on the nodes where it has the most (it stays consolidated);
* a growing job first fills the nodes it already uses, then new nodes;
* new GPUs go best-fit to a single node (the fullest node that still fits, which leaves big holes
  for big jobs), or — when no node fits — to the emptiest nodes first, so the job spans few nodes;
* shrinks are applied before grows, and big requests are placed before small ones.
A GPU is never given to two jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.core.allocation import Gpus
from coddl.core.cluster import Cluster
from coddl.core.job import JobId


class PlacementError(RuntimeError):
    """The shares asked for more GPUs (of a type) than are free: a policy bug, never user input."""


@dataclass(frozen=True, slots=True)
class Request:
    job_id: JobId
    gpus: int
    gpu_type: int = -1  # index into cluster.type_names; -1 = any type


class ConsolidatingPlacer:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.free = np.ones(cluster.total_gpus, dtype=bool)
        self.node_free = np.array([n.gpus for n in cluster.nodes], dtype=np.int64)
        self._node_of = cluster.node_of_gpu
        self._first = cluster.node_first_gpu
        self._size = np.array([n.gpus for n in cluster.nodes], dtype=np.int64)
        self._type = cluster.node_type_index

    # ------------------------------------------------------------------ primitives
    def claim(self, gpus: Gpus) -> None:
        """Mark GPUs as used (recovering a persisted allocation)."""
        idx = np.asarray(gpus, dtype=np.int64)
        if not self.free[idx].all():
            raise PlacementError(f"GPUs {sorted(set(gpus))} are not all free")
        self.free[idx] = False
        np.subtract.at(self.node_free, self._node_of[idx], 1)

    def release(self, gpus: Gpus) -> None:
        if not gpus:
            return
        idx = np.asarray(gpus, dtype=np.int64)
        self.free[idx] = True
        np.add.at(self.node_free, self._node_of[idx], 1)

    def free_by_type(self) -> np.ndarray:
        out = np.zeros(len(self.cluster.type_names), dtype=np.int64)
        np.add.at(out, self._type, self.node_free)
        return out

    def _take_on_node(self, node: int, count: int) -> list[int]:
        lo = int(self._first[node])
        local = np.flatnonzero(self.free[lo : lo + int(self._size[node])])[:count] + lo
        self.free[local] = False
        self.node_free[node] -= count
        return local.tolist()

    # ------------------------------------------------------------------ placement
    def _shrink(self, old: Gpus, keep: int) -> Gpus:
        nodes = self._node_of[np.asarray(old, dtype=np.int64)]
        counts = np.bincount(nodes, minlength=len(self._size))
        # keep GPUs on the nodes holding most of the job (ties: lower node index)
        order = sorted(range(len(old)), key=lambda i: (-counts[nodes[i]], nodes[i], old[i]))
        kept = sorted(old[i] for i in order[:keep])
        self.release(tuple(g for g in old if g not in set(kept)))
        return tuple(kept)

    def _allowed(self, gpu_type: int) -> np.ndarray:
        ok = self.node_free > 0
        return ok & (self._type == gpu_type) if gpu_type >= 0 else ok

    def _grow(self, old: Gpus, want: int, gpu_type: int) -> Gpus:
        got = list(old)
        need = want - len(old)
        if old:  # fill the nodes the job already uses, most-free first
            used_nodes = np.unique(self._node_of[np.asarray(old, dtype=np.int64)])
            allowed = self._allowed(gpu_type)
            for node in sorted(used_nodes.tolist(), key=lambda n: -int(self.node_free[n])):
                if need == 0:
                    break
                if allowed[node]:
                    take = min(need, int(self.node_free[node]))
                    got += self._take_on_node(node, take)
                    need -= take
        while need > 0:
            allowed = self._allowed(gpu_type)
            free = np.where(allowed, self.node_free, 0)
            fits = np.flatnonzero(free >= need)
            if fits.size:  # best fit: the fullest node that still holds the rest
                node = int(fits[np.argmin(free[fits])])
            else:  # spread over the emptiest nodes first → fewest nodes
                node = int(np.argmax(free))
                if free[node] == 0:
                    raise PlacementError(f"no free GPU left for {want} GPUs (type {gpu_type})")
            take = min(need, int(free[node]))
            got += self._take_on_node(node, take)
            need -= take
        return tuple(sorted(got))

    def place(self, current: dict[JobId, Gpus], requests: list[Request]) -> dict[JobId, Gpus]:
        """New GPUs for each requested job (only those); ``current`` gives what they hold now.
        Jobs whose type changes are moved whole (released, then placed afresh)."""
        out: dict[JobId, Gpus] = {}
        grows: list[tuple[Request, Gpus]] = []
        for req in requests:
            old = current.get(req.job_id, ())
            if old and req.gpu_type >= 0 and int(self._type[self._node_of[old[0]]]) != req.gpu_type:
                self.release(old)
                old = ()
            if req.gpus == 0:
                self.release(old)
                out[req.job_id] = ()
            elif req.gpus <= len(old):
                out[req.job_id] = self._shrink(old, req.gpus)
            else:
                grows.append((req, old))
        grows.sort(key=lambda ro: -ro[0].gpus)
        for req, old in grows:
            out[req.job_id] = self._grow(old, req.gpus, req.gpu_type)
        return out

    def fragmentation(self) -> float:
        """Share of free GPUs that sit on partially used nodes (0 = every free GPU is on an empty
        node; 1 = free capacity is scattered)."""
        free = int(self.node_free.sum())
        if free == 0:
            return 0.0
        partial = (self.node_free > 0) & (self.node_free < self._size)
        return float(self.node_free[partial].sum()) / free
