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

1. while candidates at 0 GPUs fit and every job above 0 has gain ≤ 1 (no step more than doubles
   its speed), every chain runs into the first job at 0 GPUs (loss 1 ≥ any such gain, gain ∞):
   those jobs get their minimum in visiting order, skipping ones that no longer fit — one sort;
2. afterwards a *frame* fixes the chain's prefix c_0 … p: the next winners are the tokens after p
   that dominate p, in order, as long as each is a chain end (nothing after it dominates it) and
   each replacement token is *inert* (it lands where it neither joins the prefix nor dominates p).
   Those conditions are checked per served GPU in O(1); the first doubt ends the frame and the
   next frame recomputes the chain from scratch. A frame serves many GPUs, so the work per
   decision is a few sorts, not a pass over all jobs per GPU.
3. if every candidate can reach its maximum with the GPUs left, all of them do.

``tests/policies/test_tournament_equivalence.py`` keeps the naive version and checks both against
each other on random cases with ties.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from typing import Callable

import numpy as np

from coddl.policies.base import Context, greedy_fit

# key(rows, levels) -> visiting key of each job's token at that level (smaller visits first)
KeyFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def next_level(s: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """The level after one step: a job at 0 GPUs goes to its minimum, otherwise one GPU more."""
    return np.where(s == 0, lo, s + 1)


def gain_loss(ctx: Context, rows: np.ndarray, s: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gain and loss of the step from ``s`` for ``rows`` (the §2/§3 formulas, float for float)."""
    p0 = ctx.throughput(s, rows)
    p1 = ctx.throughput(next_level(s, lo[rows]), rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (p1 - p0) / p0, (p1 - p0) / p1


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
            order = zeros[np.lexsort((tie[zeros], key(zeros, s[zeros])))]
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
    gain, _ = gain_loss(ctx, rows, levels, lo)
    return bool((gain <= 1.0).all())


class _Tokens:
    """Key, gain and loss of every row's token at every level it may reach, computed in one
    vectorised pass (levels beyond ``WIDTH``, if a row may grow that far, per row on demand).
    ``cur_*`` hold each row's token at its present level; ``at(j, level)`` reads one token as
    Python floats, which is what the per-GPU checks of a frame need."""

    WIDTH = 256

    def __init__(self, ctx: Context, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
                 key: KeyFn) -> None:
        self.ctx, self.lo, self.key = ctx, lo, key
        n = s.size
        self.width = w = int(min(max(int(hi.max()), 1), int(s.max()) + budget + 1, self.WIDTH))
        rows = np.repeat(np.arange(n), w)
        levels = np.tile(np.arange(w), n)
        g, l = gain_loss(ctx, rows, levels, lo)
        self.k, self.g, self.l = key(rows, levels).reshape(n, w), g.reshape(n, w), l.reshape(n, w)
        self.cur_k, self.cur_g, self.cur_l = np.empty(n), np.empty(n), np.empty(n)
        self._far: dict[tuple[int, int], tuple[float, float, float]] = {}
        self.update(np.arange(n), s)

    def at(self, j: int, level: int) -> tuple[float, float, float]:
        if level < self.width:
            return self.k.item(j, level), self.g.item(j, level), self.l.item(j, level)
        tok = self._far.get((j, level))
        if tok is None:
            r, lv = np.array([j]), np.array([level])
            g, l = gain_loss(self.ctx, r, lv, self.lo)
            tok = self._far[j, level] = (self.key(r, lv).item(), g.item(), l.item())
        return tok

    def update(self, rows: np.ndarray, s: np.ndarray) -> None:
        """Refresh ``cur_*`` for rows whose level changed."""
        lv = s[rows]
        near = lv < self.width
        r, v = rows[near], lv[near]
        self.cur_k[r], self.cur_g[r], self.cur_l[r] = self.k[r, v], self.g[r, v], self.l[r, v]
        for j in rows[~near].tolist():
            self.cur_k[j], self.cur_g[j], self.cur_l[j] = self.at(j, int(s[j]))


def _frame(tokens: _Tokens, s: np.ndarray, cand: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
           tie: np.ndarray, zstep: int) -> int:
    """Serve rounds while the chain's prefix can be followed without re-sorting (module docstring,
    point 2); mutates ``s`` and returns the GPUs left. Always serves the current round's winner.

    With prefix c_0 … p, the winners are p's dominators after p, in order. Gain ≥ loss for every
    token (also in floating point), so whatever dominates a dominator of p dominates p too: a
    dominator ends the chain iff no later dominator dominates it, and if it does not, it joins the
    prefix (its dominators are the later ones of p's). Once p's dominators are all served with
    inert replacements, p ends the chain and is the first dominator of the node before it; a
    replacement that lands inside the prefix and dominates the node before it cuts the prefix
    there and joins it. Each step's dominators are the tokens after the node, as they are now:
    the frame's sorted tokens not yet served plus the replacements of the served ones."""
    k = tokens.cur_k[cand]
    order = np.lexsort((tie[cand], k))
    rows = cand[order]
    k, g, l = k[order], tokens.cur_g[rows], tokens.cur_l[rows]
    n = rows.size
    after = np.empty(n)  # after[i]: the largest loss strictly after position i
    after[:-1] = np.maximum.accumulate(l[:0:-1])[::-1]
    after[-1] = -np.inf
    chain = [0]
    c = 0
    while after[c] >= g[c]:
        c = c + 1 + int(np.argmax(l[c + 1:] >= g[c]))
        chain.append(c)
    if len(chain) == 1:
        budget = _run_first(tokens, s, rows, k, tie, float(after[0]), hi, budget, zstep)
        tokens.update(rows[:1], s)
        return budget
    state = _FrameState(rows, k, g, l, tie)
    prefix = [(state.keys[c], state.gains[c]) for c in chain[:-1]]
    level = state.dominators(*prefix[-1])
    while True:
        budget, status, node = _serve_dominators(tokens, s, lo, hi, budget, zstep, level, prefix, state)
        if status is _Status.STOP or (status is _Status.EXHAUSTED and len(prefix) == 1):
            break
        if status is _Status.EXHAUSTED:
            prefix.pop()
        elif status is _Status.CUT:  # node lands in the prefix: keep what is before it
            while prefix and prefix[-1][0] > node[0]:
                prefix.pop()
            prefix.append(node)
        else:  # _Status.JOIN: node dominates p but something after it dominates node
            prefix.append(node)
        level = state.dominators(*prefix[-1])
    tokens.update(np.array(state.served, dtype=np.int64), s)
    return budget


class _Status(enum.Enum):
    STOP = 0  # a doubt, or the GPUs (or the fitting zero jobs) ran out: end the frame
    EXHAUSTED = 1  # every dominator of p served: p ends the chain
    JOIN = 2  # a dominator of p does not end the chain: it joins the prefix
    CUT = 3  # a replacement lands inside the prefix and dominates the node before it


class _FrameState:
    """The frame's tokens, sorted, and what became of them: ``gone[i]`` once position i's token is
    served, ``moved[row]`` the current token of a row served in this frame."""

    def __init__(self, rows: np.ndarray, k: np.ndarray, g: np.ndarray, l: np.ndarray, tie: np.ndarray) -> None:
        self.keys = list(zip(k.tolist(), tie[rows].tolist()))
        self.gains, self.losses, self.rows = g.tolist(), l.tolist(), rows.tolist()
        self.l = l
        self.gone = np.zeros(rows.size, dtype=bool)
        self.moved: dict[int, tuple[tuple[float, int], float, float]] = {}
        self.served: list[int] = []

    def dominators(self, key: tuple[float, int], gain: float) -> list:
        """The tokens after ``key`` with loss ≥ ``gain`` as they are now: (key, gain, loss, row,
        frame position or −1), in visiting order."""
        start = bisect_right(self.keys, key)
        pos = (np.flatnonzero((self.l[start:] >= gain) & ~self.gone[start:]) + start).tolist()
        out = [(self.keys[i], self.gains[i], self.losses[i], self.rows[i], i) for i in pos]
        out += [(kk, gg, ll, j, -1) for j, (kk, gg, ll) in self.moved.items() if kk > key and ll >= gain]
        out.sort()
        return out


def _serve_dominators(tokens: _Tokens, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int,
                      zstep: int, level: list, prefix: list, state: _FrameState) -> tuple[int, _Status, tuple]:
    """Serve p's dominators (``level``, in visiting order) while each ends the chain and its
    replacement is inert or wins again. Returns the GPUs left, why it stopped and the token
    (key, gain) that joins or cuts the prefix."""
    gp = prefix[-1][1]
    tail = [-np.inf] * (len(level) + 1)  # tail[i]: largest loss among dominators i, i+1, …
    for i in range(len(level) - 1, -1, -1):
        tail[i] = max(tail[i + 1], level[i][2])
    for i, (prev, gain, _, j, pos) in enumerate(level):
        step = int(lo[j]) if s[j] == 0 else 1
        if step > budget:
            return budget, _Status.STOP, ()
        if not gain > tail[i + 1]:
            return budget, _Status.JOIN, (prev, gain)
        state.served.append(j)
        if pos >= 0:
            state.gone[pos] = True
        state.moved.pop(j, None)
        while True:  # serve j, then look at its replacement token: inert, the next winner, or a doubt
            s[j] += step
            budget -= step
            step = 1
            if budget == 0 or budget < zstep:
                return budget, _Status.STOP, ()
            if s[j] >= hi[j]:
                break  # no replacement: inert
            kk, gg, ll = tokens.at(j, int(s[j]))
            new = (kk, prev[1])
            if new > prev:
                return budget, _Status.STOP, ()  # the token moves later (a falling curve): not covered
            state.moved[j] = (new, gg, ll)
            if new < prefix[-1][0]:  # lands inside the prefix: inert unless it heads or joins the chain
                before = [node for node in prefix if node[0] < new]
                if not before or ll >= before[-1][1]:
                    return budget, _Status.CUT, (new, gg)
                break
            if ll < gp:
                break  # after p and does not dominate p: inert
            if not gg > tail[i + 1]:
                return budget, _Status.JOIN, (new, gg)  # p's first dominator, not the chain's end
            state.moved.pop(j)
            prev = new  # p's first dominator and the chain's end: it wins again
    return budget, _Status.EXHAUSTED, ()


def _run_first(tokens: _Tokens, s: np.ndarray, rows: np.ndarray, k: np.ndarray, tie: np.ndarray,
               rest: float, hi: np.ndarray, budget: int, zstep: int) -> int:
    """The first token is the chain's end: serve it, and again while it stays first and no other
    token dominates it (``rest`` is the largest loss among the others, which do not change)."""
    j = int(rows[0])
    second = (float(k[1]), int(tie[rows[1]])) if rows.size > 1 else None
    tj = int(tie[j])
    step = int(tokens.lo[j]) if s[j] == 0 else 1
    top = int(hi[j])
    while True:
        s[j] += step
        budget -= step
        step = 1
        if budget == 0 or budget < zstep or s[j] >= top:
            return budget
        kk, gg, _ = tokens.at(j, int(s[j]))
        if (second is not None and (kk, tj) > second) or not gg > rest:
            return budget
