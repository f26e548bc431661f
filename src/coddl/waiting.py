"""Waiting for a condition that nothing announces: one polling loop with a deadline.

Workers, the job handle, the coordinator, the store client, the driver and the HTTP server all wait
for something another process or thread brings about (a generation forming, a port listening, a
phase settling) and that has no notifier they can block on. They all wait the same way: check, and
until the deadline passes, sleep a little and check again. Where a notifier exists (a
``threading.Condition`` the other side signals) use ``Condition.wait_for`` instead.
"""

from __future__ import annotations

from time import monotonic, sleep
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """The condition did not hold before the deadline; the message says what was awaited."""


def wait_until(predicate: Callable[[], T], timeout: float | None, what: str, interval: float = 0.01) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    It is always called at least once, and once more after each ``interval`` of sleep; once
    ``timeout`` seconds have passed (None: never) with no truthy answer, raise ``WaitTimeout``
    reading "``what`` within ``timeout`` s" — so phrase ``what`` as the failure ("workers did not
    start"). An exception from ``predicate`` ends the wait at once (a condition that can no longer
    come true should raise rather than be waited out).
    """
    deadline = None if timeout is None else monotonic() + timeout
    while not (value := predicate()):
        if deadline is not None and monotonic() > deadline:
            raise WaitTimeout(f"{what} within {timeout:g} s")
        sleep(interval)
    return value
