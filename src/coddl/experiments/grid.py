"""What every experiment shares: a grid of independent simulations spread over a process pool, or
over a Ray cluster's nodes (``ray_grid``), and how its results are written."""

from __future__ import annotations

import csv
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from coddl.policies.registry import available
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S

R = TypeVar("R")
Task = tuple[str, int, str]  # (group, seed, policy)


def registered(policies: Sequence[str]) -> list[str]:
    """The policy specs whose policy is registered in this build, in order."""
    names = available()
    return [p for p in policies if p.split(":")[0] in names]


def run_grid(one: Callable[[str, int, str, int | None], R], groups: list[str], seeds: list[int],
             policies: list[str], jobs: int | None, workers: int | None = None,
             on_done: Callable[[R], None] | None = None, ray_address: str | None = None,
             ray_connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[R]:
    """``one(group, seed, policy, jobs)`` for every combination, one process per core (or one Ray task
    each on the cluster at ``ray_address``); results come back in grid order (group, seed, policy), so
    what is written from them does not depend on which finished first. ``on_done`` sees each result
    as it finishes."""
    tasks = [(g, s, p) for g in groups for s in seeds for p in policies]
    if ray_address:
        from coddl.experiments.ray_grid import run_on_ray

        out = run_on_ray(one, tasks, jobs, ray_address, ray_connect_timeout_s, on_done)
    else:
        out = _run_local(one, tasks, jobs, workers, on_done)
    return [out[t] for t in tasks]


def _run_local(one: Callable[[str, int, str, int | None], R], tasks: list[Task], jobs: int | None,
               workers: int | None, on_done: Callable[[R], None] | None) -> dict[Task, R]:
    out: dict[Task, R] = {}
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futs = {pool.submit(one, g, s, p, jobs): (g, s, p) for g, s, p in tasks}
        for f in as_completed(futs):
            out[futs[f]] = r = f.result()
            if on_done:
                on_done(r)
    return out


def write_results(out: Path, runs: Sequence[Any], rows: Sequence[Any], chart: str,
                  plot: Callable[[Path, Sequence[Any]], None]) -> list[Path]:
    """Every run (``runs.csv``) and the table (``table.csv``), one column per dataclass field, and the
    table's chart drawn by ``plot`` into ``chart``; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, items in (("runs.csv", runs), ("table.csv", rows)):
        p = out / name
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(asdict(items[0])))
            w.writeheader()
            w.writerows(asdict(i) for i in items)
        paths.append(p)
    plot(out / chart, rows)
    return [*paths, out / chart]


def grouped_bars(ax: Any, groups: list[str], series: list[str], value: Callable[[str, str], float],
                 label: Callable[[str], str] = str) -> None:
    """One bar per (group, series) on ``ax``, the series side by side within each group; ``value``
    is NaN where a pair was not run (no bar)."""
    import numpy as np

    w = 0.8 / len(series)
    x = np.arange(len(groups))
    for i, s in enumerate(series):
        ax.bar(x + i * w - 0.4 + w / 2, [value(g, s) for g in groups], w, label=label(s))
