"""The AFS tournament (ALGORITHMS.md §2–§3), decided in bulk but exactly as the naive one.

The naive rule hands GPUs out one at a time. In every round the *candidates* — jobs below their
maximum whose next step still fits (a job at 0 GPUs steps to its minimum, one at s ≥ min to s+1)
— are visited in a fixed *visiting order*; the first is the incumbent, and each later candidate m
takes the GPU from the incumbent c iff m *dominates* c:

    loss(m) ≥ gain(c),  gain(j) = (P(s'_j) − P(s_j)) / P(s_j),  loss(j) = (P(s'_j) − P(s_j)) / P(s'_j)

(s' the next step; P(0) = 0 makes a job at 0 GPUs have gain ∞ and loss 1). Both AFS variants are
this one tournament with a different visiting order:

* AFS-L visits shortest first (T_j(s_j) ascending). For an earlier c and a later m, c is the
  shorter job l and m the longer h, and §2's "give to l iff gain_l > loss_h" is exactly "m takes
  it iff loss_m ≥ gain_c"; two jobs at 0 GPUs are visited by T(min), so the shorter keeps it.
* AFS-P visits in a seeded random priority order. m beats c iff m wins in both role assignments,
  which is again loss_m ≥ gain_c (§3); when neither dominates, the coin falls to the one with the
  higher priority, which is the incumbent.

Why a bulk algorithm can decide exactly the same: within a round the incumbent after each visit
is a *chain* — the first token, then the first later token that dominates it, and so on — and the
round's winner is the chain's end. Only the winner's token changes between rounds, so

1. if every candidate can reach its maximum with the GPUs left, all of them do;
2. while candidates at 0 GPUs fit and every job above 0 has gain ≤ 1 (no step more than doubles
   its speed), every chain runs into the first job at 0 GPUs (loss 1 ≥ any such gain, gain ∞):
   those jobs get their minimum in visiting order, skipping ones that no longer fit — one sort;
3. afterwards a *frame* sorts the tokens once and follows the chain's prefix c_0 … p as a stack:
   the next winners are p's dominators after p, in order, while each is a chain end and its
   replacement token is *inert* (it neither joins the prefix nor dominates p); a dominator that
   is not an end pushes onto the prefix, and once p's dominators are used up p is the winner and
   pops. The checks per served GPU are O(1) comparisons of Python floats; anything the frame does
   not cover (a token that moves later, GPUs too few for a job at 0) ends it, and the next frame
   re-sorts. A decision is a few sorts plus constant work per GPU, not a pass over all jobs per GPU.

``tests/policies/test_tournament_equivalence.py`` keeps the naive version and checks both against
each other on random cases with ties.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from typing import Callable

import numpy as np

from coddl.policies.base import Context, greedy_fit

# key(rows, levels, speed) -> visiting key of each job's token at that level (smaller visits
# first); ``speed`` is P_j(level) for those rows, already computed
KeyFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def next_level(s: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """The level after one step: a job at 0 GPUs goes to its minimum, otherwise one GPU more."""
    return np.where(s == 0, lo, s + 1)


def gain_loss(p0: np.ndarray, p1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gain and loss of a step from speed p0 to p1 (the §2/§3 formulas, float for float)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (p1 - p0) / p0, (p1 - p0) / p1


def tokens_at(ctx: Context, rows: np.ndarray, s: np.ndarray, lo: np.ndarray,
              key: KeyFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Key, gain and loss of ``rows``' tokens at levels ``s``."""
    p0 = ctx.throughput(s, rows)
    g, l = gain_loss(p0, ctx.throughput(next_level(s, lo[rows]), rows))
    return key(rows, s, p0), g, l


def tournament(ctx: Context, start: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
               key: KeyFn, tie: np.ndarray) -> np.ndarray:
    """GPUs per row after handing ``budget`` GPUs out one round at a time from ``start``.

    ``lo``/``hi`` are the per-row minimum and maximum, ``key`` the visiting key of a token and
    ``tie`` a per-row rank that breaks equal keys (unique per row, so the order is total).
    """
    s = start.astype(np.int64).copy()
    tokens: _Tokens | None = None
    while budget > 0:
        step = np.where(s == 0, lo, 1)
        cand = np.flatnonzero((s < hi) & (step <= budget))
        if cand.size == 0:
            break
        if int((hi[cand] - s[cand]).sum()) <= budget:
            s[cand] = hi[cand]
            break
        zeros = cand[s[cand] == 0]
        if zeros.size and tokens is None and _zeros_lead(ctx, cand, s, lo, hi):
            order = zeros[np.lexsort((tie[zeros], key(zeros, s[zeros], ctx.throughput(s[zeros], zeros))))]
            got = greedy_fit(order, lo, budget)
            s[got] = lo[got]
            budget -= int(lo[got].sum())
            continue
        if tokens is None:
            tokens = _Tokens(ctx, s, lo, hi, budget, key)
        zstep = int(lo[zeros].max()) if zeros.size else 0  # below this budget a zero job drops out
        budget = _frame(tokens, s, cand, lo, hi, budget, tie, zstep)
    return s


def _zeros_lead(ctx: Context, cand: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """True if every token above 0 GPUs, now or once a zero job gets its minimum, has gain ≤ 1."""
    pos = cand[s[cand] > 0]
    first = cand[(s[cand] == 0) & (lo[cand] < hi[cand])]
    rows = np.concatenate([pos, first])
    levels = np.concatenate([s[pos], lo[first]])
    gain, _ = gain_loss(ctx.throughput(levels, rows), ctx.throughput(levels + 1, rows))
    return bool((gain <= 1.0).all())


class _Tokens:
    """Key, gain and loss of every row's token at levels below ``width``, computed in one
    vectorised pass; a row that grows past it gets the rest of its ladder in one more pass.
    ``cur_*`` hold each row's token at its present level; ``at(j, level)`` reads one token as
    Python floats, which is what the per-GPU checks of a frame need."""

    WIDTH = 16  # most jobs stop below this many GPUs; the few that do not are extended per row

    def __init__(self, ctx: Context, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
                 key: KeyFn) -> None:
        self.ctx, self.lo, self.hi, self.key = ctx, lo, hi, key
        n = s.size
        self.width = w = int(min(max(int(hi.max()), 1), int(s.max()) + budget + 1, self.WIDTH))
        rows = np.arange(n)[:, None]
        speed = ctx.throughput(np.arange(w + 1)[None, :], rows)  # P_j(0 … w); from 0 the step is to min_j
        nxt = speed[:, 1:].copy()
        nxt[:, 0] = ctx.throughput(lo, rows[:, 0])
        self.g, self.l = gain_loss(speed[:, :w], nxt)
        self.k = key(np.broadcast_to(rows, (n, w)), np.broadcast_to(np.arange(w), (n, w)), speed[:, :w])
        self.cur_k, self.cur_g, self.cur_l = np.empty(n), np.empty(n), np.empty(n)
        self._far: dict[int, list[tuple[float, float, float]]] = {}  # row -> tokens from ``width`` on
        self.update(np.arange(n), s)

    def at(self, j: int, level: int) -> tuple[float, float, float]:
        w = self.width
        if level < w:
            i = j * w + level
            return self.k.item(i), self.g.item(i), self.l.item(i)
        far = self._far.get(j)
        if far is None:
            levels = np.arange(w, max(int(self.hi[j]), w + 1))
            k, g, l = tokens_at(self.ctx, np.full(levels.size, j), levels, self.lo, self.key)
            far = self._far[j] = list(zip(k.tolist(), g.tolist(), l.tolist()))
        return far[level - w]

    def update(self, rows: np.ndarray, s: np.ndarray) -> None:
        """Refresh ``cur_*`` for rows whose level changed."""
        lv = s[rows]
        near = lv < self.width
        r, v = rows[near], lv[near]
        self.cur_k[r], self.cur_g[r], self.cur_l[r] = self.k[r, v], self.g[r, v], self.l[r, v]
        for j in rows[~near].tolist():
            self.cur_k[j], self.cur_g[j], self.cur_l[j] = self.at(j, min(int(s[j]), int(self.hi[j]) - 1))


def _frame(tokens: _Tokens, s: np.ndarray, cand: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
           tie: np.ndarray, zstep: int) -> int:
    """Serve rounds while the chain can be followed without re-sorting (module docstring, point
    3); mutates ``s`` and returns the GPUs left. Always serves the current round's winner.

    The chain's prefix c_0 … p is kept as a stack of nodes (key, tie, gain, row, frame position or
    −1). The winners are p's dominators after p, in order. Gain ≥ loss for every token (also in
    floating point), so whatever dominates a dominator of p dominates p too: a dominator ends the
    chain iff no later dominator dominates it, and if it does not, it is pushed (its dominators
    are the later ones of p's). Once p has no dominators left, p is the winner: it pops and is the
    first dominator of the node before it, or, if p is c_0, it is served and its replacement is
    the new c_0 (its key does not grow, so it stays first). A replacement that lands inside the
    prefix and dominates the node before it cuts the prefix there and is pushed. Dominators are
    read from the tokens as they are now: the frame's sorted ones not yet served plus the
    replacements of the served ones."""
    k = tokens.cur_k[cand]
    order = np.lexsort((tie[cand], k))
    rows = cand[order]
    k, g, l = k[order], tokens.cur_g[rows], tokens.cur_l[rows]
    state = _FrameState(rows, k, g, l, tie, s.size)
    prefix = [(float(k[0]), float(tie[rows[0]]), float(g[0]), int(rows[0]), 0)]
    sl, lol, hil = s.tolist(), lo.tolist(), hi.tolist()
    while True:
        level = state.dominators(*prefix[-1][:3])
        budget, status, node = _serve_dominators(tokens, sl, lol, hil, budget, zstep, level, prefix, state)
        if status is _Status.EXHAUSTED and len(prefix) == 1:
            budget, status, node = _serve_first(tokens, sl, lol, hil, budget, zstep, prefix[0], state)
        if status is _Status.STOP:
            break
        if status is _Status.EXHAUSTED:
            prefix.pop()
        elif status is _Status.CUT:  # node lands in the prefix (or is the new c_0): keep what is before it
            while prefix and prefix[-1][:2] >= node[:2]:
                prefix.pop()
            prefix.append(node)
        else:  # JOIN: a dominator of p that something after it dominates
            prefix.append(node)
    served = np.flatnonzero(state.served)
    s[served] = np.array(sl)[served]
    tokens.update(served, s)
    return budget


def _serve_first(tokens: _Tokens, s: list[int], lo: list[int], hi: list[int], budget: int, zstep: int,
                 node: tuple, state: "_FrameState") -> tuple[int, "_Status", tuple]:
    """c_0 has no dominators: it wins. Serve it; its replacement is the new c_0 (a CUT before
    every node), unless the frame cannot go on."""
    key, td, _, j, pos = node
    step = lo[j] if s[j] == 0 else 1
    if step > budget:
        return budget, _Status.STOP, ()
    state.served[j] = True
    if pos >= 0:
        state.gone[pos] = True
    state.moved[j] = False
    s[j] += step
    budget -= step
    if budget == 0 or budget < zstep or s[j] >= hi[j]:
        return budget, _Status.STOP, ()  # (at its maximum the new first token is not at hand)
    kk, gg, ll = tokens.at(j, s[j])
    if kk > key:
        return budget, _Status.STOP, ()
    state.move(j, kk, gg, ll)
    return budget, _Status.CUT, (kk, td, gg, j, -1)


class _Status(enum.Enum):
    STOP = 0  # a doubt, or the GPUs (or the fitting zero jobs) ran out: end the frame
    EXHAUSTED = 1  # every dominator of p served: p ends the chain
    JOIN = 2  # a dominator of p does not end the chain: it joins the prefix
    CUT = 3  # a replacement lands inside the prefix and dominates the node before it


class _FrameState:
    """The frame's tokens, sorted by (key, tie), and what became of them: ``gone[i]`` once
    position i's token is served; ``moved[row]`` the current token (key, tie, gain, loss) of a row
    served in this frame, if it has one (``moved``, ``m*``)."""

    def __init__(self, rows: np.ndarray, k: np.ndarray, g: np.ndarray, l: np.ndarray, tie: np.ndarray,
                 n_rows: int) -> None:
        self.keys = k.tolist()
        self.ties = tie[rows].tolist()
        self.l = l
        self.floats = np.stack([k, tie[rows], g])  # read together: one gather per level
        self.ints = np.stack([rows, np.arange(rows.size)])
        self.gone = np.zeros(rows.size, dtype=bool)
        self.served = np.zeros(n_rows, dtype=bool)
        self.moved = np.zeros(n_rows, dtype=bool)  # the row's current token is a replacement:
        self.mk, self.mt = np.zeros(n_rows), tie  # its key, tie,
        self.mg, self.ml = np.zeros(n_rows), np.zeros(n_rows)  # gain and loss

    def move(self, j: int, key: float, gain: float, loss: float) -> None:
        """Row j's current token is now a replacement token."""
        self.moved[j] = True
        self.mk[j], self.mg[j], self.ml[j] = key, gain, loss

    def dominators(self, key: float, tie: float, gain: float) -> "_Level":
        """The tokens after (key, tie) with loss ≥ ``gain``, as they are now, in visiting order."""
        start = bisect_left(self.keys, key)
        while start < len(self.keys) and self.keys[start] == key and self.ties[start] <= tie:
            start += 1
        pos = np.flatnonzero((self.l[start:] >= gain) & ~self.gone[start:]) + start
        level = _Level(self.floats[:, pos], self.ints[:, pos], self.l[pos])
        mk, mt = self.mk, self.mt
        moved = np.flatnonzero(self.moved & (self.ml >= gain) & ((mk > key) | ((mk == key) & (mt > tie))))
        if moved.size:
            level.merge(list(zip(mk[moved].tolist(), mt[moved].tolist(), self.mg[moved].tolist(),
                                 self.ml[moved].tolist(), moved.tolist(), [-1] * moved.size)))
        return level


class _Level:
    """The dominators of the prefix's last node as Python lists — keys, ties, gains, losses, rows,
    frame positions (−1 for a replacement token) — and tail[i], the largest loss among i, i+1, …"""

    def __init__(self, floats: np.ndarray, ints: np.ndarray, loss: np.ndarray) -> None:
        self.keys, self.ties, self.gains = floats.tolist()
        self.rows, self.pos = ints.tolist()
        self.losses = loss.tolist()
        self.tail = np.maximum.accumulate(loss[::-1])[::-1].tolist()
        self.tail.append(-np.inf)

    def merge(self, moved: list[tuple[float, float, float, float, int, int]]) -> None:
        """Add replacement tokens (key, tie, gain, loss, row, −1) in visiting order."""
        entries = sorted([*zip(self.keys, self.ties, self.gains, self.losses, self.rows, self.pos), *moved])
        self.keys, self.ties, self.gains, self.losses, self.rows, self.pos = (list(c) for c in zip(*entries))
        tail = [-np.inf] * (len(entries) + 1)
        for i in range(len(entries) - 1, -1, -1):
            tail[i] = max(tail[i + 1], self.losses[i])
        self.tail = tail


def _serve_dominators(tokens: _Tokens, s: list[int], lo: list[int], hi: list[int], budget: int,
                      zstep: int, level: _Level, prefix: list, state: _FrameState) -> tuple[int, _Status, tuple]:
    """Serve p's dominators (``level``, in visiting order) while each ends the chain and its
    replacement is inert or wins again. Returns the GPUs left, why it stopped and the token
    node that joins or cuts the prefix. ``s``, ``lo``, ``hi`` are per-row lists."""
    pk, pt, gp = prefix[-1][:3]
    tail = level.tail
    kmat, gmat, lmat, width = tokens.k, tokens.g, tokens.l, tokens.width
    for i, (kd, td, gain, j, pos) in enumerate(zip(level.keys, level.ties, level.gains, level.rows, level.pos)):
        step = lo[j] if s[j] == 0 else 1
        if step > budget:
            return budget, _Status.STOP, ()
        if not gain > tail[i + 1]:
            return budget, _Status.JOIN, (kd, td, gain, j, pos)
        state.served[j] = True
        if pos >= 0:
            state.gone[pos] = True
        state.moved[j] = False
        while True:  # serve j, then look at its replacement token: inert, the next winner, or a doubt
            s[j] += step
            budget -= step
            step = 1
            if budget == 0 or budget < zstep:
                return budget, _Status.STOP, ()
            if s[j] >= hi[j]:
                break  # no replacement: inert
            lev = s[j]
            if lev < width:
                at = j * width + lev
                kk, gg, ll = kmat.item(at), gmat.item(at), lmat.item(at)
            else:
                kk, gg, ll = tokens.at(j, lev)
            if kk > kd:
                return budget, _Status.STOP, ()  # the token moves later (a falling curve): not covered
            state.move(j, kk, gg, ll)
            if kk < pk or (kk == pk and td < pt):  # lands inside the prefix: inert unless it heads or joins
                before = [node for node in prefix if node[:2] < (kk, td)]
                if not before or ll >= before[-1][2]:
                    return budget, _Status.CUT, (kk, td, gg, j, -1)
                break
            if ll < gp:
                break  # after p and does not dominate p: inert
            if not gg > tail[i + 1]:
                return budget, _Status.JOIN, (kk, td, gg, j, -1)  # p's first dominator, not the end
            state.moved[j] = False
            kd = kk  # p's first dominator and the chain's end: it wins again
    return budget, _Status.EXHAUSTED, ()
