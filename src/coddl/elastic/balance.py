"""Dynamic load balancing inside a job that spans device types (CoDDL's heterogeneous training).

A data-parallel step waits for its slowest rank: with an equal split of the global batch, a job on
one fast and one slow GPU trains at twice the slow GPU's pace, and the fast one idles half the time.
So when the ranks of a job run on more than one device type, each rank's share of the global batch
follows its speed: ``n_r ∝ 1 / t_r``, where ``t_r`` is the rank's measured compute seconds per sample
(the forward and backward pass over its local batch, without the collectives). The global batch, the
sample stream and the update stay exactly what they are with an equal split: the session weights
each rank's gradient by its share of the global batch, so only who computes which samples changes.

Every rank must cut the batch at the same places, so every input here is one that all ranks hold
bit for bit: the table each rank contributed when the group formed (its device type, the type's
prior speed from the cluster spec, and what it measured in the previous generation) and, at each
step, the vector of per-sample times that the step's control all-reduce carries. The arithmetic is
plain IEEE double, so the same inputs give the same split everywhere.

At a regroup (a resize, a failure, a restart) the balancer starts again from that table: the
measured times of the survivors carry over to their device types, newcomers of a measured type get
that type's time, and if any type was never measured the split starts from the types' prior speeds
until every rank has been timed. Within a generation the split moves only when the predicted step
time improves by more than ``tolerance``, so measurement noise does not reshuffle the batch at
every step.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Sequence

from coddl.elastic.data import local_range

WARMUP_STEPS = 2  # steps of each generation not timed: a fresh group's first steps run cold
EMA_ALPHA = 0.3  # weight of the newest measurement in each rank's smoothed time per sample
TOLERANCE = 0.05  # re-split only when the predicted step time falls by more than this fraction
MIN_S_PER_SAMPLE = 1e-9  # a shorter time is a clock's artefact: 1 / t would overflow the weights


def type_key(device_type: str) -> int:
    """A device type's name as an integer below 2**31 (exact in the float64 table the ranks share)."""
    return int.from_bytes(hashlib.blake2b(device_type.encode(), digest_size=4).digest(), "big") >> 1


@dataclass(frozen=True)
class RankInfo:
    """What one rank brings to a new group: its device type (``type_key``), the type's prior speed
    (relative; from the cluster spec, 1.0 when unknown) and its smoothed seconds per sample measured
    in the previous generation (0: none)."""

    type_key: int
    prior_speed: float
    known_s_per_sample: float = 0.0

    def row(self) -> list[float]:
        return [float(self.type_key), self.prior_speed, self.known_s_per_sample]

    @classmethod
    def from_row(cls, row: Sequence[float]) -> RankInfo:
        return cls(int(row[0]), float(row[1]), float(row[2]))


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` samples as whole counts proportional to ``weights``, each at least 1 (when
    ``total`` >= the number of ranks), summing to ``total``: one sample each, then the rest by the
    largest-remainder method (ties to the lower rank)."""
    n = len(weights)
    if total < n:
        return [local_range(total, n, r)[1] - local_range(total, n, r)[0] for r in range(n)]
    spare = total - n
    s = sum(weights)
    exact = [spare * w / s for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(n), key=lambda r: (-(exact[r] - counts[r]), r))
    for r in order[: spare - sum(counts)]:
        counts[r] += 1
    return [c + 1 for c in counts]


@dataclass
class Balancer:
    """Where each rank's slice of a global batch starts and ends, for one generation of a group."""

    ranks: tuple[RankInfo, ...]
    tolerance: float = TOLERANCE
    weights: list[float] = field(init=False)
    times: list[float] = field(init=False)  # smoothed seconds per sample; 0 = not measured yet
    _seen: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.ranks = tuple(RankInfo(r.type_key, r.prior_speed, max(r.known_s_per_sample, MIN_S_PER_SAMPLE))
                           if r.known_s_per_sample > 0 else r for r in self.ranks)
        self.active = len({r.type_key for r in self.ranks}) > 1
        by_type: dict[int, float] = {}
        for r in self.ranks:
            if r.known_s_per_sample > 0:
                by_type.setdefault(r.type_key, r.known_s_per_sample)
        self.times = [r.known_s_per_sample if r.known_s_per_sample > 0 else by_type.get(r.type_key, 0.0)
                      for r in self.ranks]
        if all(t > 0 for t in self.times):
            self.weights = [1.0 / t for t in self.times]
        else:
            self.weights = [r.prior_speed if math.isfinite(r.prior_speed) and r.prior_speed > 0 else 1.0
                            for r in self.ranks]
        self._seen = [0] * len(self.ranks)

    @classmethod
    def alone(cls) -> Balancer:
        """A group of one (standalone, or before the first group forms)."""
        return cls((RankInfo(0, 1.0),))

    def slice(self, total: int, rank: int) -> tuple[int, int]:
        """Rank ``rank``'s contiguous share [start, stop) of a global batch of ``total`` samples."""
        if not self.active:
            return local_range(total, len(self.ranks), rank)
        counts = apportion(total, self.weights)
        start = sum(counts[:rank])
        return start, start + counts[rank]

    def observe(self, s_per_sample: Sequence[float], total: int) -> bool:
        """One step's per-rank seconds per sample (0: that rank timed nothing); returns whether the
        split changed. ``total`` is the global batch the next steps will cut."""
        if not self.active:
            return False
        for r, x in enumerate(s_per_sample):
            if not (x > 0 and math.isfinite(x)):
                continue
            x = max(x, MIN_S_PER_SAMPLE)
            self._seen[r] += 1
            if self._seen[r] <= WARMUP_STEPS:
                continue
            self.times[r] = x if self.times[r] <= 0 else (1 - EMA_ALPHA) * self.times[r] + EMA_ALPHA * x
        if not all(t > 0 for t in self.times):
            return False
        ideal = [1.0 / t for t in self.times]
        if self.step_time(ideal, total) < self.step_time(self.weights, total) * (1 - self.tolerance):
            self.weights = ideal
            return True
        return False

    def step_time(self, weights: Sequence[float], total: int) -> float:
        """The compute time of a step split by ``weights``, at the measured times: its slowest rank's."""
        return max(t * n for t, n in zip(self.times, apportion(total, weights)))

    def known(self, rank: int) -> float:
        """This rank's smoothed seconds per sample, to carry into the next generation (0: none)."""
        return self.times[rank] if self.active else 0.0
