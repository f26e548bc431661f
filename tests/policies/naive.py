"""Naive reference implementations, written from ALGORITHMS.md line by line: one GPU per round,
every candidate compared in a Python loop. Slow on purpose; the fast policies must agree exactly."""

from __future__ import annotations

import math

import numpy as np

from coddl.policies.base import Context


class Curves:
    """P_j(k), T_j(k), gain and loss of one context as plain Python floats."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        j = ctx.jobs
        self.lo, self.hi = j.min_gpus.tolist(), j.max_gpus.tolist()
        self.work = j.remaining.tolist()

    def p(self, r: int, k: int) -> float:
        return float(self.ctx.throughput(np.array([k]), np.array([r]))[0])

    def t(self, r: int, k: int) -> float:
        p = self.p(r, k)
        return self.work[r] / p if p > 0 else math.inf

    def nxt(self, r: int, s: int) -> int:
        return self.lo[r] if s == 0 else s + 1

    def gain(self, r: int, s: int) -> float:
        p0, p1 = self.p(r, s), self.p(r, self.nxt(r, s))
        return (p1 - p0) / p0 if p0 > 0 else math.inf

    def loss(self, r: int, s: int) -> float:
        p0, p1 = self.p(r, s), self.p(r, self.nxt(r, s))
        return (p1 - p0) / p1


def naive_afs_l(ctx: Context) -> list[int]:
    """§2: GPUs one at a time from 0; candidates visited shortest first (T(s), then T(min), uid)."""
    c = Curves(ctx)
    uid = ctx.jobs.uid.tolist()
    n = len(uid)
    s = [0] * n
    budget = ctx.capacity
    while True:
        cands = [r for r in range(n) if s[r] < c.hi[r] and (c.lo[r] if s[r] == 0 else 1) <= budget]
        if not cands:
            return s
        cands.sort(key=lambda r: (c.t(r, s[r]), c.t(r, c.lo[r]), uid[r]))
        w = cands[0]
        for m in cands[1:]:
            if s[w] == 0 and s[m] == 0:
                if c.t(m, c.lo[m]) < c.t(w, c.lo[w]):
                    w = m
                continue
            # l, h = the shorter and the longer by T_j(s_j); on a tie the incumbent counts as l
            l, h = (w, m) if c.t(w, s[w]) <= c.t(m, s[m]) else (m, w)
            w = l if c.gain(l, s[l]) > c.loss(h, s[h]) else h
        budget -= c.nxt(w, s[w]) - s[w]
        s[w] = c.nxt(w, s[w])


def naive_afs_p_light(ctx: Context, priority: np.ndarray) -> list[int]:
    """§3 light load: everyone at min, then GPUs one at a time; m beats c iff loss(m) ≥ gain(c);
    if neither dominates, the coin flip goes to the higher ``priority``; visited by priority."""
    c = Curves(ctx)
    n = len(c.lo)
    s = list(c.lo)
    budget = ctx.capacity - sum(s)
    pr = priority.tolist()
    while budget > 0:
        cands = sorted((r for r in range(n) if s[r] < c.hi[r]), key=lambda r: -pr[r])
        if not cands:
            break
        w = cands[0]
        for m in cands[1:]:
            if c.loss(m, s[m]) >= c.gain(w, s[w]):
                w = m
            elif c.loss(w, s[w]) >= c.gain(m, s[m]):
                pass
            elif pr[m] > pr[w]:
                w = m
        s[w] += 1
        budget -= 1
    return s


def naive_tournament(ctx: Context, start: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
                     key, tie: np.ndarray) -> list[int]:
    """The generic rule ``coddl.policies.tournament`` decides in bulk, one round at a time."""
    c = Curves(ctx)
    c.lo = lo.tolist()
    s = start.tolist()
    n = len(s)
    while budget > 0:
        cands = [r for r in range(n) if s[r] < hi[r] and (lo[r] if s[r] == 0 else 1) <= budget]
        if not cands:
            break
        rows, levels = np.array(cands), np.array([s[r] for r in cands])
        k = key(rows, levels, ctx.throughput(levels, rows)).tolist()
        order = sorted(range(len(cands)), key=lambda i: (k[i], int(tie[cands[i]])))
        w = cands[order[0]]
        for i in order[1:]:
            m = cands[i]
            if c.loss(m, s[m]) >= c.gain(w, s[w]):
                w = m
        budget -= c.nxt(w, s[w]) - s[w]
        s[w] = c.nxt(w, s[w])
    return s


def naive_afs_l_arrival(ctx: Context) -> list[int]:
    """The CoDDL authors' AFS-L (ALGORITHMS.md §4): minimums first, by T(min) then submission
    order while they fit; then GPUs one at a time, candidates visited in arrival (submission)
    order, l = the shorter of incumbent and candidate by T_j(s_j) (the incumbent on a tie), and l
    takes the GPU iff gain_l > loss_h."""
    c = Curves(ctx)
    uid = ctx.jobs.uid.tolist()
    n = len(uid)
    s = [0] * n
    budget = ctx.capacity
    for r in sorted(range(n), key=lambda r: (c.t(r, c.lo[r]), uid[r])):
        if c.lo[r] <= budget:
            s[r] = c.lo[r]
            budget -= c.lo[r]
    while budget > 0:
        cands = sorted((r for r in range(n) if 0 < s[r] < c.hi[r]), key=lambda r: uid[r])
        if not cands:
            break
        w = cands[0]
        for m in cands[1:]:
            l, h = (m, w) if c.t(m, s[m]) < c.t(w, s[w]) else (w, m)
            w = l if c.gain(l, s[l]) > c.loss(h, s[h]) else h
        s[w] += 1
        budget -= 1
    return s


def naive_afs_p_per_contest(ctx: Context, coin) -> list[int]:
    """The CoDDL authors' AFS-P under light load: everyone at min, then GPUs one at a time over
    the candidates in arrival order; m takes the GPU if it dominates, the incumbent keeps it if it
    dominates, otherwise ``coin()`` (True: m) decides — a fresh flip per contest."""
    c = Curves(ctx)
    uid = ctx.jobs.uid.tolist()
    n = len(uid)
    s = list(c.lo)
    budget = ctx.capacity - sum(s)
    while budget > 0:
        cands = sorted((r for r in range(n) if s[r] < c.hi[r]), key=lambda r: uid[r])
        if not cands:
            break
        w = cands[0]
        for m in cands[1:]:
            if c.loss(m, s[m]) >= c.gain(w, s[w]):
                w = m
            elif c.loss(w, s[w]) < c.gain(m, s[m]) and coin():
                w = m
        s[w] += 1
        budget -= 1
    return s
