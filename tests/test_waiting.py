"""The one polling wait: on a simulated clock (sleeping advances it), so no test depends on load."""

from __future__ import annotations

import pytest

from coddl import waiting
from coddl.waiting import WaitTimeout, wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(waiting, "monotonic", c.monotonic)
    monkeypatch.setattr(waiting, "sleep", c.sleep)
    return c


def test_returns_the_first_truthy_answer_after_polling_at_the_interval(clock: Clock) -> None:
    answers = iter([0, None, "", 7, 8])
    assert wait_until(lambda: next(answers), 10.0, "x", interval=0.5) == 7
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_asks_once_even_with_no_time_and_never_sleeps_after_success(clock: Clock) -> None:
    assert wait_until(lambda: "ready", 0.0, "x") == "ready"
    assert clock.sleeps == []


def test_times_out_naming_what_was_awaited(clock: Clock) -> None:
    calls = []
    with pytest.raises(WaitTimeout) as e:
        wait_until(lambda: calls.append(clock.now), 1.0, "job 3: workers did not start", interval=0.25)
    assert str(e.value) == "job 3: workers did not start within 1 s"
    assert isinstance(e.value, TimeoutError)
    # asked at 100, 100.25, …, 101.0 (not yet past the deadline) and 101.25 (past it): then it gives up
    assert calls == [100.0, 100.25, 100.5, 100.75, 101.0, 101.25]


def test_without_a_timeout_it_waits_as_long_as_it_takes(clock: Clock) -> None:
    n = iter(range(10_000))
    assert wait_until(lambda: next(n) >= 5_000, None, "x", interval=60.0) is True
    assert clock.now == pytest.approx(100.0 + 5_000 * 60.0)


def test_an_exception_from_the_condition_ends_the_wait(clock: Clock) -> None:
    def failed() -> bool:
        raise RuntimeError("job failed")

    with pytest.raises(RuntimeError, match="job failed"):
        wait_until(failed, 10.0, "x")
    assert clock.sleeps == []
