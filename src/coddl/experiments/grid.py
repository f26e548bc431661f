"""What every experiment shares: a grid of independent simulations spread over a process pool."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Sequence, TypeVar

from coddl.policies.registry import available

R = TypeVar("R")


def registered(policies: Sequence[str]) -> list[str]:
    """The policy specs whose policy is registered in this build, in order."""
    names = available()
    return [p for p in policies if p.split(":")[0] in names]


def run_grid(one: Callable[[str, int, str, int | None], R], groups: list[str], seeds: list[int],
             policies: list[str], jobs: int | None, workers: int | None = None,
             on_done: Callable[[R], None] | None = None) -> list[R]:
    """``one(group, seed, policy, jobs)`` for every combination, one process per core; results come
    back in grid order (group, seed, policy). ``on_done`` sees each result as it finishes."""
    tasks = [(g, s, p) for g in groups for s in seeds for p in policies]
    out: dict[tuple[str, int, str], R] = {}
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futs = {pool.submit(one, g, s, p, jobs): (g, s, p) for g, s, p in tasks}
        for f in as_completed(futs):
            out[futs[f]] = r = f.result()
            if on_done:
                on_done(r)
    return [out[t] for t in tasks]
