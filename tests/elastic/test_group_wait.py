"""``group.wait`` on real gloo collectives: a collective that completes just after a wait slice
timed out is a success, not a failure.

gloo's ``wait(timeout)`` raises when the slice runs out and leaves the collective running;
``is_completed()`` then turns True whether it succeeded or failed. Treating "completed after a
timed-out slice" as failure made a rank abandon a good step and wait for a failure membership that
never came, stalling the job for the generation timeout (seen after checkpoint-restarts on a loaded
machine). The interleaving is forced here by replaying a real, finished all-reduce whose first
sliced wait reports the timeout it would have reported a moment earlier.
"""

from __future__ import annotations

import datetime
import socket

import pytest
import torch
import torch.distributed as dist

from coddl.elastic import group


@pytest.fixture
def gloo_world_of_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=10))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=10))
    yield
    dist.destroy_process_group()


class _FinishedLate:
    """A real gloo work whose first sliced wait timed out: the collective ended right after."""

    def __init__(self, work: dist.Work) -> None:
        self._work = work
        self.timed_out = False

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if timeout is not None and not self.timed_out:
            self.timed_out = True
            raise RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc] Operation timed out!")
        return self._work.wait() if timeout is None else self._work.wait(timeout)

    def is_completed(self) -> bool:
        return self._work.is_completed()


def test_a_collective_that_completes_after_a_timed_out_slice_succeeds(gloo_world_of_one) -> None:
    t = torch.tensor([1.0, 2.0])
    work = dist.all_reduce(t, async_op=True)
    work.wait()  # done: what the rank sees when it looks again after the slice
    late = _FinishedLate(work)
    group.wait(late, abandon=lambda: pytest.fail("a completed collective must not ask to abandon"))
    assert late.timed_out and t.tolist() == [1.0, 2.0]

