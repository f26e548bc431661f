"""The AFS tournament (ALGORITHMS.md §2–§3), one GPU per round, compiled.

GPUs are handed out one at a time. In every round the *candidates* — jobs below their maximum
whose next step still fits (a job at 0 GPUs steps to its minimum, one at s ≥ min to s+1) — are
visited in a fixed *visiting order*; the first is the incumbent, and each later candidate m takes
the GPU from the incumbent c iff m *dominates* c:

    loss(m) ≥ gain(c),  gain(j) = (P(s'_j) − P(s_j)) / P(s_j),  loss(j) = (P(s'_j) − P(s_j)) / P(s'_j)

(s' the next step; P(0) = 0 makes a job at 0 GPUs have gain ∞ and loss 1). Both AFS variants are
this one tournament with a different visiting order:

* AFS-L visits shortest first (T_j(s_j) = W_j / P_j(s_j) ascending). For an earlier c and a later
  m, c is the shorter job l and m the longer h, and §2's "give to l iff gain_l > loss_h" is exactly
  "m takes it iff loss_m ≥ gain_c"; two jobs at 0 GPUs are ordered by T(min) (the tie rank), so
  the shorter keeps it.
* AFS-P visits in a seeded random priority order (a fixed key per job). m beats c iff m wins in
  both role assignments, which is again loss_m ≥ gain_c (§3); when neither dominates, the coin falls
  to the one with the higher priority, which is the incumbent.

Two more rules reproduce the CoDDL authors' simulator, which visits candidates in arrival order:

* ``rule="shorter"`` is §2 read literally for any visiting order: l and h are the shorter and the
  longer of (c, m) by T_j(s_j) (on a tie the incumbent is l), and l gets the GPU iff gain_l > loss_h.
  In shortest-first order it decides exactly as the dominance rule.
* ``rule="coin"`` flips a fresh fair coin in every contest neither job dominates (§3 with
  ``random.choice`` per comparison); every round is then scanned from the start, since a resumed
  scan would reuse the previous round's flips.

Why it is compiled rather than clever: the pairwise relation is not transitive, so no sort key
gives the winner, and a round must look at every candidate. On the whole Philly digest a decision
hands out a few hundred GPUs to ~200 jobs, so the rounds are tens of thousands of comparisons per
decision; numba runs them in machine code. Only the winner's token changes between rounds, so
the visiting order stays sorted by moving that one token, and a round's scan resumes at the first
position that changed instead of starting over. The compiled loop IS the naive rule,
so there is nothing to prove equivalent; ``tests/policies/test_tournament_equivalence.py`` still
checks it against a plain-Python transcription of ALGORITHMS.md on random cases with ties.
"""

from __future__ import annotations

import numba
import numpy as np

from coddl.jit import njit
from coddl.policies.base import Context

RULES = {"dominance": 0, "shorter": 1, "coin": 2}


def tournament(ctx: Context, start: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
               tie: np.ndarray, *, work: np.ndarray | None = None, fixed: np.ndarray | None = None,
               rule: str = "dominance", seed: int = 0) -> np.ndarray:
    """GPUs per row after handing ``budget`` GPUs out one round at a time from ``start``.

    ``lo``/``hi`` are the per-row minimum and maximum and ``tie`` a per-row rank that breaks equal
    visiting keys (unique per row, so the order is total). The visiting key of a row's token is
    T_j(s) = ``work``_j / P_j(s) (∞ at 0 GPUs) unless ``fixed`` gives a constant key per row
    (AFS-P's coin-flip priority, or an arrival rank). ``rule`` decides a contest (module
    docstring); "shorter" needs ``work``, "coin" draws from a generator seeded with ``seed``.
    """
    if work is None and fixed is None:
        raise ValueError("give work= (key T_j(s)) or fixed= (a constant key per row)")
    if rule not in RULES:
        raise ValueError(f"unknown tournament rule {rule!r}; valid: {', '.join(RULES)}")
    if rule == "shorter" and work is None:
        raise ValueError("rule='shorter' compares remaining times: give work=")
    s = start.astype(np.int64).copy()
    lo, hi = lo.astype(np.int64), hi.astype(np.int64)
    step = np.where(s == 0, lo, 1)
    cand = (s < hi) & (step <= budget)
    if int((hi - s)[cand].sum()) <= budget:  # everyone reaches the maximum: no contest
        s[cand] = hi[cand]
        return s
    j = ctx.jobs
    by_time = fixed is None
    keys = np.zeros(s.size) if fixed is None else np.asarray(fixed, dtype=np.float64)
    w = np.zeros(s.size) if work is None else np.asarray(work, dtype=np.float64)
    _rounds(s, lo, hi, int(budget), np.asarray(tie, dtype=np.int64), np.ascontiguousarray(ctx.curves, dtype=np.float64),
            j.model.astype(np.int64), j.speed.astype(np.float64), keys, w, by_time, RULES[rule], int(seed))
    return s


@numba.njit(error_model="numpy", inline="always")  # inlined: a cached caller holds no call into it
def _token(j: int, level: int, lo: np.ndarray, curves: np.ndarray, model: np.ndarray, speed: np.ndarray,
           keys: np.ndarray, work: np.ndarray, by_time: bool) -> tuple[float, float, float, float]:
    """Key, gain, loss and remaining time T_j(level) of row j's token at ``level``, float for
    float as numpy computes them (``Context.throughput``: the curve clipped at its last column,
    times the job's speed)."""
    last = curves.shape[1] - 1
    nxt = lo[j] if level == 0 else level + 1
    p0 = curves[model[j], min(level, last)] * speed[j]
    p1 = curves[model[j], min(nxt, last)] * speed[j]
    t = work[j] / p0 if p0 > 0 else np.inf
    key = t if by_time else keys[j]
    return key, (p1 - p0) / p0, (p1 - p0) / p1, t


_BLOCK = 16  # positions per block of the scan's skip summary


@numba.njit(error_model="numpy", inline="always")
def _summarise(b: int, m: int, gain: np.ndarray, loss: np.ndarray, fits: np.ndarray, bloss: np.ndarray,
               bgain: np.ndarray) -> None:
    """Block b's largest loss and gain over its fitting tokens (−∞: none fits)."""
    hl = -np.inf
    hg = -np.inf
    for i in range(b * _BLOCK, min(m, (b + 1) * _BLOCK)):
        if fits[i]:
            hl = max(hl, loss[i])
            hg = max(hg, gain[i])
    bloss[b] = hl
    bgain[b] = hg


@njit(error_model="numpy")
def _rounds(s: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int, tie: np.ndarray, curves: np.ndarray,
            model: np.ndarray, speed: np.ndarray, keys: np.ndarray, work: np.ndarray, by_time: bool,
            rule: int, seed: int) -> int:
    """The rounds, in place on ``s``; returns the GPUs left.

    Position i of the visiting order holds row ``row[i]``'s token: key, tie, gain, loss and T;
    ``fits[i]`` turns False once the row's next step no longer fits (it is then never a candidate
    again: the budget only falls). Rows at their maximum leave the order.

    A round's scan is resumed, not restarted: only the winner's token changes between rounds, so
    the scan up to the first position that changed is the same as last round's, and so is the part
    of the chain (the successive incumbents) found there. (Not with the coin rule: there every
    round flips fresh coins from the first position.)

    And a scan skips whole blocks of positions that cannot change the incumbent: each block keeps
    an upper bound of its largest loss and gain (raised as tokens move in, never lowered within
    a decision), and when no loss in it reaches the incumbent's gain (nobody
    dominates it) — and, for the rules that look further, no gain in it exceeds the incumbent's
    loss (nobody is the shorter job that gains more, nobody gets a coin flip) — no position in it
    would have taken the GPU. The decisions, and the coin flips drawn, are those of the plain scan.
    """
    if rule == 2:
        np.random.seed(seed)
    n = s.size
    order = np.empty(n, dtype=np.int64)
    m = 0
    for j in np.argsort(tie):
        if s[j] < hi[j]:
            order[m] = j
            m += 1
    key = np.empty(m)
    for i in range(m):
        key[i] = _token(order[i], s[order[i]], lo, curves, model, speed, keys, work, by_time)[0]
    order[:m] = order[:m][np.argsort(key, kind="mergesort")]  # stable: (key, tie) ascending
    row = order[:m].copy()
    pkey, ptie, gain, loss, tval = np.empty(m), np.empty(m, dtype=np.int64), np.empty(m), np.empty(m), np.empty(m)
    fits = np.empty(m, dtype=np.bool_)
    zstep = 0  # the largest step of a row at 0 GPUs that still fits
    for i in range(m):
        j = row[i]
        pkey[i], gain[i], loss[i], tval[i] = _token(j, s[j], lo, curves, model, speed, keys, work, by_time)
        ptie[i] = tie[j]
        fits[i] = True
        if s[j] == 0:
            zstep = max(zstep, lo[j])
    nb = (m + _BLOCK - 1) // _BLOCK
    bloss, bgain = np.empty(nb), np.empty(nb)
    for b in range(nb):
        _summarise(b, m, gain, loss, fits, bloss, bgain)
    chain = np.empty(m + 1, dtype=np.int64)  # positions of the incumbents, in scan order
    c = 0
    x = 0  # the first position whose token changed since the last scan
    while budget > 0:
        if zstep > budget:  # rows at 0 whose minimum no longer fits drop out
            zstep = 0
            for i in range(m):
                j = row[i]
                if fits[i] and s[j] == 0:
                    if lo[j] > budget:
                        fits[i] = False
                        x = min(x, i)
                        _summarise(i // _BLOCK, m, gain, loss, fits, bloss, bgain)
                    else:
                        zstep = max(zstep, lo[j])
        if rule == 2:
            x = 0
        while c > 0 and chain[c - 1] >= x:
            c -= 1
        w = chain[c - 1] if c > 0 else -1
        gw = gain[w] if w >= 0 else 0.0
        lw = loss[w] if w >= 0 else 0.0
        tw = tval[w] if w >= 0 else 0.0
        i = x
        while i < m:
            if i % _BLOCK == 0:
                b = i // _BLOCK
                if w < 0:
                    skip = bloss[b] == -np.inf
                elif rule == 0:
                    skip = bloss[b] < gw
                else:
                    skip = bloss[b] < gw and bgain[b] <= lw
                if skip:
                    i += _BLOCK
                    continue
            if fits[i]:
                if w < 0:
                    takes = True
                elif rule == 1:  # §2 literally: the shorter of the two is l
                    takes = gain[i] > lw if tval[i] < tw else loss[i] >= gw
                elif loss[i] >= gw:  # i dominates the incumbent
                    takes = True
                elif rule == 2 and lw < gain[i]:  # neither dominates: a fresh fair coin
                    takes = np.random.random() < 0.5
                else:
                    takes = False
                if takes:
                    w = i
                    gw, lw, tw = gain[i], loss[i], tval[i]
                    chain[c] = i
                    c += 1
            i += 1
        if w < 0:
            break
        j = row[w]
        step = lo[j] if s[j] == 0 else 1
        s[j] += step
        budget -= step
        if s[j] >= hi[j]:  # leaves the order
            for i in range(w, m - 1):
                row[i], pkey[i], ptie[i] = row[i + 1], pkey[i + 1], ptie[i + 1]
                gain[i], loss[i], fits[i], tval[i] = gain[i + 1], loss[i + 1], fits[i + 1], tval[i + 1]
            m -= 1
            for b in range(w // _BLOCK + 1, (m + _BLOCK - 1) // _BLOCK):  # the token entering from the right
                i = b * _BLOCK - 1
                if fits[i]:
                    bloss[b - 1] = max(bloss[b - 1], loss[i])
                    bgain[b - 1] = max(bgain[b - 1], gain[i])
            x = w
            continue
        k, g, l, t = _token(j, s[j], lo, curves, model, speed, keys, work, by_time)
        tj = tie[j]
        i = w  # slide the new token to its place
        while i > 0 and (k < pkey[i - 1] or (k == pkey[i - 1] and tj < ptie[i - 1])):
            row[i], pkey[i], ptie[i], gain[i], loss[i], fits[i], tval[i] = (
                row[i - 1], pkey[i - 1], ptie[i - 1], gain[i - 1], loss[i - 1], fits[i - 1], tval[i - 1])
            i -= 1
        while i < m - 1 and (k > pkey[i + 1] or (k == pkey[i + 1] and tj > ptie[i + 1])):
            row[i], pkey[i], ptie[i], gain[i], loss[i], fits[i], tval[i] = (
                row[i + 1], pkey[i + 1], ptie[i + 1], gain[i + 1], loss[i + 1], fits[i + 1], tval[i + 1])
            i += 1
        row[i], pkey[i], ptie[i], gain[i], loss[i], fits[i], tval[i] = j, k, tj, g, l, True, t
        # keep the summaries upper bounds: a token that crossed into a block raises its maxima
        # (stale, larger maxima only skip less, never wrongly)
        lo_p, hi_p = min(w, i), max(w, i)
        for b in range(lo_p // _BLOCK, hi_p // _BLOCK + 1):
            for q in (lo_p, hi_p, b * _BLOCK, b * _BLOCK + _BLOCK - 1):  # the ends, and each crossing
                if lo_p <= q <= hi_p and q // _BLOCK == b and fits[q]:
                    bloss[b] = max(bloss[b], loss[q])
                    bgain[b] = max(bgain[b], gain[q])
        x = min(w, i)
    return budget
