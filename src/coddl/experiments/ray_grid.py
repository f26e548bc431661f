"""The grid on a Ray cluster: one remote task per (group, seed, policy), for sweeps larger than one
machine's cores.

Each task runs the same ``one`` as the local pool and returns the same small summary, so what an
experiment writes is the same whichever ran it (only the ``wall_s`` timings differ). ``one`` travels
pickled by reference (a module-level function, or a ``partial`` of one): every node must have coddl
installed, at the same version as the driver. A task that raises, or whose worker or node dies, is
tried again up to ``RETRIES`` times; one that still fails stops the sweep with :class:`RunFailed`, a
one-line message naming the run. The driver retries rather than Ray (``max_retries`` and
``retry_exceptions``): Ray announces each of its retries on the driver's stdout with the task's
traceback, which would break into the progress bar. Ray is imported only here, so the local pool
never pays for it.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from coddl.experiments.grid import Task
from coddl.runtime.executors.ray_connect import connect, probe

R = TypeVar("R")

RETRIES = 2


class RunFailed(Exception):
    """A run of the grid that failed on every try; its message is one line naming the run."""


def _call(one: Callable[[str, int, str, int | None], R], group: str, seed: int, policy: str,
          jobs: int | None) -> R:
    """The remote task: a module-level function, so that Ray ships it by reference too."""
    return one(group, seed, policy, jobs)


def _reason(e: BaseException) -> str:
    """The error a task failed with, in one line: the task's own exception where it raised one
    (not Ray's wrapper with the remote traceback), else Ray's (a worker or node that died)."""
    cause = getattr(e, "cause", None) or e
    text = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def run_on_ray(one: Callable[[str, int, str, int | None], R], tasks: list[Task], jobs: int | None,
               address: str, connect_timeout_s: float,
               on_done: Callable[[R], None] | None = None) -> dict[Task, R]:
    """``one(group, seed, policy, jobs)`` for each task on the Ray cluster at ``address``; the
    results by task. ``on_done`` sees each as it finishes. An address that cannot be reached or
    joined is the connector's ConfigError; a run that fails every try is :class:`RunFailed`."""
    if connect_timeout_s > 0:  # connect() says what is wrong with other timeouts
        probe(address, connect_timeout_s)  # an unreachable address fails before the seconds Ray's import takes
    from coddl.runtime.executors.ray_connect import import_ray

    ray = import_ray(address)
    connect(ray, address, connect_timeout_s)
    try:
        remote = ray.remote(max_retries=0)(_call)
        futures: dict[object, tuple[Task, int]] = {}  # each task's current try, and how many came before

        def submit(task: Task, tries: int) -> None:
            futures[remote.remote(one, *task, jobs)] = (task, tries)

        for t in tasks:
            submit(t, 0)
        out: dict[Task, R] = {}
        while futures:
            [f], _ = ray.wait(list(futures), num_returns=1)
            task, tries = futures.pop(f)
            try:
                out[task] = r = ray.get(f)
            except ray.exceptions.RayError as e:
                if tries < RETRIES:
                    submit(task, tries + 1)
                    continue
                for rest in futures:
                    ray.cancel(rest, force=True)
                g, s, p = task
                raise RunFailed(f"run {g} seed {s} {p} failed on the Ray cluster after {RETRIES} retries: "
                                f"{_reason(e)}") from None
            if on_done:
                on_done(r)
        return out
    finally:
        ray.shutdown()
