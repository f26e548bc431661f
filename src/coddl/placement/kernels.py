"""Compiled kernels for the placer's common path: one GPU type, GPU-proportional cores.

They make exactly the placer's decisions (``ConsolidatingPlacer._shrink``/``_grow``/``_shape``;
``tests/placement`` runs both paths on the same cases) on its free maps, in machine code: a
resize touches a few GPUs, and numpy's per-call overhead would cost more than the work. The
mixed-type and explicit-core paths stay in Python (they consult the estimator).
"""

from __future__ import annotations

import numba
import numpy as np

from coddl.jit import njit


@njit()
def release(idx: np.ndarray, free: np.ndarray, node_free: np.ndarray, node_of: np.ndarray) -> None:
    for g in idx:
        free[g] = True
        node_free[node_of[g]] += 1


@numba.njit(inline="always")  # inlined: a cached caller holds no call into it
def _take(node: int, count: int, free: np.ndarray, node_free: np.ndarray, first: np.ndarray,
          size: np.ndarray, out: np.ndarray, k: int) -> int:
    """The node's lowest-numbered free GPUs, ``count`` of them, appended to ``out`` from ``k``."""
    lo = first[node]
    for g in range(lo, lo + size[node]):
        if count == 0:
            break
        if free[g]:
            free[g] = False
            node_free[node] -= 1
            out[k] = g
            k += 1
            count -= 1
    return k


@njit()
def shrink(old: np.ndarray, keep: int, free: np.ndarray, node_free: np.ndarray, node_of: np.ndarray,
           nodes: int) -> np.ndarray:
    """Keep ``keep`` of ``old`` on the nodes holding most of the job (ties: lower node, lower GPU);
    release the rest. Returns the kept GPUs, sorted."""
    counts = np.zeros(nodes, dtype=np.int64)
    for g in old:
        counts[node_of[g]] += 1
    m = old.size
    key = np.empty(m, dtype=np.int64)
    big = old.max() + 1
    for i in range(m):  # (−count, node, gpu) as one integer: counts and nodes are small
        node = node_of[old[i]]
        key[i] = ((old.size - counts[node]) * nodes + node) * big + old[i]
    order = np.argsort(key)
    kept = np.sort(old[order[:keep]])
    for i in order[keep:]:
        g = old[i]
        free[g] = True
        node_free[node_of[g]] += 1
    return kept


@njit()
def grow(old: np.ndarray, want: int, free: np.ndarray, node_free: np.ndarray, node_of: np.ndarray,
         first: np.ndarray, size: np.ndarray) -> np.ndarray:
    """``old`` plus new GPUs up to ``want``: first on the nodes the job uses (most free first),
    then best fit — the fullest node that holds the rest — or, when none does, the emptiest
    nodes first. Returns the job's GPUs, sorted."""
    out = np.empty(want, dtype=np.int64)
    k = 0
    for g in old:
        out[k] = g
        k += 1
    need = want - k
    if k > 0:
        used = np.unique(node_of[old])
        # most free first; ties keep node order (a stable sort, as Python's sorted)
        order = np.argsort(-node_free[used], kind="mergesort")
        for i in order:
            if need == 0:
                break
            node = used[i]
            if node_free[node] > 0:
                k = _take(node, min(need, node_free[node]), free, node_free, first, size, out, k)
                need = want - k
    while need > 0:
        best = -1
        for node in range(node_free.size):  # best fit: the fullest node that still holds the rest
            f = node_free[node]
            if f >= need and (best < 0 or f < node_free[best]):
                best = node
        if best < 0:  # none does: the emptiest node
            for node in range(node_free.size):
                if node_free[node] > 0 and (best < 0 or node_free[node] > node_free[best]):
                    best = node
            if best < 0:
                return out[:0]  # no free GPU left: the caller reports it
        k = _take(best, min(need, node_free[best]), free, node_free, first, size, out, k)
        need = want - k
    return np.sort(out)


@njit()
def fragmentation(node_free: np.ndarray, size: np.ndarray) -> float:
    """Share of free GPUs on partially used nodes."""
    free = 0
    partial = 0
    for i in range(node_free.size):
        f = node_free[i]
        free += f
        if 0 < f < size[i]:
            partial += f
    return partial / free if free else 0.0


@njit()
def place(old: np.ndarray, old_at: np.ndarray, want: np.ndarray, grow_order: np.ndarray, free: np.ndarray,
          node_free: np.ndarray, node_of: np.ndarray, first: np.ndarray, size: np.ndarray,
          nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Every request of one ``place`` call at once: request i holds ``old[old_at[i]:old_at[i+1]]``
    and wants ``want[i]`` GPUs. Releases and shrinks first, in request order, then the grows in
    ``grow_order``. Returns the new GPUs of request i as ``new[new_at[i]:new_at[i+1]]``, or an
    empty ``new_at`` when a grow finds too few free GPUs."""
    m = want.size
    new_at = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        new_at[i + 1] = new_at[i] + want[i]
    new = np.empty(new_at[m], dtype=np.int64)
    for i in range(m):
        held = old[old_at[i]:old_at[i + 1]]
        if want[i] == 0:
            for g in held:
                free[g] = True
                node_free[node_of[g]] += 1
        elif want[i] <= held.size:
            new[new_at[i]:new_at[i + 1]] = shrink(held, want[i], free, node_free, node_of, nodes)
    for i in grow_order:
        got = grow(old[old_at[i]:old_at[i + 1]], want[i], free, node_free, node_of, first, size)
        if got.size < want[i]:
            return new, new_at[:0]
        new[new_at[i]:new_at[i + 1]] = got
    return new, new_at
