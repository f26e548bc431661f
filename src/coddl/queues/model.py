"""Teams as queues, in Kueue's vocabulary: a queue has a nominal quota of GPUs (and CPU cores),
belongs to a cohort whose members lend each other what they do not use, may borrow up to its
borrowing limit and lends at most its lending limit; its weight is its fair-sharing weight.

Users (and trace accounts: a Slurm account, a Philly virtual cluster) belong to one queue each.
Everyone else belongs to the queue named ``default``: configured like any other, or, when the
configuration has none, a queue without a cohort whose quota is the GPUs and cores no configured
queue has — what nobody's quota covers serves the users nobody listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from coddl.core.job import JobSpec

DEFAULT_QUEUE = "default"


class QueueError(ValueError):
    """A queue configuration that cannot work (one line naming the queue and the setting); ``queue``
    (its position) and ``field`` say where, for a file's line number."""

    def __init__(self, message: str, queue: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.queue, self.field = queue, field


@dataclass(frozen=True, slots=True)
class Queue:
    """One team's queue. ``None`` limits mean none (borrow whatever the cohort has idle; lend all of
    the unused quota); ``nominal_cpus`` ``None`` means the GPU quota's share of the cluster's cores
    (the rest of them for ``default``); ``nominal_gpus`` ``None`` is allowed for ``default`` only:
    the GPUs no other queue has."""

    name: str
    nominal_gpus: int | None = 0
    cohort: str | None = None
    borrowing_limit_gpus: int | None = None
    lending_limit_gpus: int | None = None
    nominal_cpus: int | None = None
    borrowing_limit_cpus: int | None = None
    lending_limit_cpus: int | None = None
    weight: float = 1.0
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {"name": self.name, "cohort": self.cohort, "nominal_gpus": self.nominal_gpus,
                "borrowing_limit_gpus": self.borrowing_limit_gpus, "lending_limit_gpus": self.lending_limit_gpus,
                "nominal_cpus": self.nominal_cpus, "borrowing_limit_cpus": self.borrowing_limit_cpus,
                "lending_limit_cpus": self.lending_limit_cpus, "weight": self.weight, "users": list(self.users),
                "accounts": list(self.accounts)}


@dataclass(frozen=True)
class Quotas:
    """A queue set resolved against a cluster: one column per queue, row 0 GPUs, row 1 cores."""

    names: tuple[str, ...]
    cohort: np.ndarray  # cohort index per queue, −1: none
    weight: np.ndarray
    nominal: np.ndarray  # (2, Q) integers
    borrowing_limit: np.ndarray  # (2, Q), inf: none
    lending_limit: np.ndarray  # (2, Q), inf: none

    def ceiling(self) -> np.ndarray:
        """(2, Q): the most each queue can ever hold — its quota plus what it may borrow from the
        rest of its cohort's quotas."""
        out = self.nominal.astype(float).copy()
        for c in np.unique(self.cohort[self.cohort >= 0]):
            m = np.flatnonzero(self.cohort == c)
            lendable = np.minimum(self.nominal[:, m], self.lending_limit[:, m])
            others = lendable.sum(axis=1, keepdims=True) - lendable
            out[:, m] += np.minimum(others, self.borrowing_limit[:, m])
        return out.astype(np.int64)


@dataclass(frozen=True)
class QueueSet:
    """The configured queues (``default`` among them or implicit), with who belongs where."""

    queues: tuple[Queue, ...] = ()
    _user: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _account: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        qs = list(self.queues)
        if not any(q.name == DEFAULT_QUEUE for q in qs):
            qs.append(Queue(DEFAULT_QUEUE, nominal_gpus=None))
        object.__setattr__(self, "queues", tuple(qs))
        seen: set[str] = set()
        for i, q in enumerate(qs):
            if q.name in seen:
                raise QueueError(f"queue {q.name}: defined twice", i, "name")
            seen.add(q.name)
            if q.nominal_gpus is None and q.name != DEFAULT_QUEUE:
                raise QueueError(f"queue {q.name}: nominal_gpus: required (only {DEFAULT_QUEUE} may leave it out)",
                                 i, "name")
            if q.name == DEFAULT_QUEUE and (q.users or q.accounts):
                raise QueueError(f"queue {DEFAULT_QUEUE}: holds everyone no other queue lists; it takes no users "
                                 "or accounts", i, "users" if q.users else "accounts")
            for kind, names, index in (("user", q.users, self._user), ("account", q.accounts, self._account)):
                for k, n in enumerate(names):
                    if n in index:
                        raise QueueError(f"queue {q.name}: {kind} {n} is already in queue {qs[index[n]].name}",
                                         i, f"{kind}s.{k}")
                    index[n] = i

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queues)

    @property
    def configured(self) -> tuple[Queue, ...]:
        """The queues as written (the implicit ``default`` left out)."""
        return tuple(q for q in self.queues if q.nominal_gpus is not None or q != Queue(DEFAULT_QUEUE, None))

    def index(self, name: str) -> int:
        return self.names.index(name)

    def queue_of(self, user: str | None, account: str | None = None) -> int:
        """The queue of a job: its user's, else its account's, else ``default``."""
        i = self._user.get(user) if user is not None else None
        if i is None and account is not None:
            i = self._account.get(account)
        return self.index(DEFAULT_QUEUE) if i is None else i

    def too_large(self, specs: list[JobSpec], quotas: Quotas) -> list[tuple[JobSpec, str, int]]:
        """Jobs whose request (or minimum) exceeds the most their queue can ever hold, with the queue
        and that ceiling: they could never run (``coddl simulate`` leaves them out, the API refuses them)."""
        ceiling = quotas.ceiling()[0]
        out = []
        for s in specs:
            i = self.queue_of(s.user, s.account)
            if max(s.requested_gpus, s.min_gpus) > ceiling[i]:
                out.append((s, self.queues[i].name, int(ceiling[i])))
        return out

    def quotas(self, gpus: int, cpus: int) -> Quotas:
        """The quotas on a cluster of ``gpus`` GPUs and ``cpus`` cores; QueueError when the quotas
        add up to more than the cluster has."""
        qs = self.queues
        nominal = np.zeros((2, len(qs)), dtype=np.int64)
        fixed = np.array([q.nominal_gpus is not None for q in qs])
        nominal[0] = [q.nominal_gpus or 0 for q in qs]
        if nominal[0].sum() > gpus:
            raise QueueError(f"the queues' nominal quotas add up to {int(nominal[0].sum())} GPUs and the cluster has "
                             f"{gpus}")
        nominal[0, ~fixed] = gpus - nominal[0].sum()
        per_gpu = cpus / gpus if gpus else 0.0
        for i, q in enumerate(qs):
            if q.nominal_cpus is not None:
                nominal[1, i] = q.nominal_cpus
            elif fixed[i]:
                nominal[1, i] = int(nominal[0, i] * per_gpu)
        cpu_fixed = nominal[1].sum()
        if cpu_fixed > cpus:
            raise QueueError(f"the queues' nominal quotas add up to {int(cpu_fixed)} CPU cores and the cluster has "
                             f"{cpus}")
        rest = [i for i, q in enumerate(qs) if q.nominal_cpus is None and not fixed[i]]
        nominal[1, rest] = cpus - cpu_fixed
        cohorts = sorted({q.cohort for q in qs if q.cohort is not None})
        inf = np.inf
        return Quotas(
            names=self.names,
            cohort=np.array([cohorts.index(q.cohort) if q.cohort is not None else -1 for q in qs], dtype=np.int64),
            weight=np.array([q.weight for q in qs], dtype=float),
            nominal=nominal,
            borrowing_limit=np.array([[inf if q.borrowing_limit_gpus is None else q.borrowing_limit_gpus for q in qs],
                                      [inf if q.borrowing_limit_cpus is None else q.borrowing_limit_cpus for q in qs]]),
            lending_limit=np.array([[inf if q.lending_limit_gpus is None else q.lending_limit_gpus for q in qs],
                                    [inf if q.lending_limit_cpus is None else q.lending_limit_cpus for q in qs]]),
        )
