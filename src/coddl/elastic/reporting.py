"""Rank 0's reports of the job's progress (rates over the steps since its last report) and its
periodic checkpoints."""

from __future__ import annotations

import time
from dataclasses import dataclass

from coddl.elastic import state
from coddl.elastic.protocol import PROGRESS_KEY, Progress, WorkerEnv
from coddl.elastic.rank import RankState


@dataclass
class Window:
    """What happened since rank 0's last progress report."""

    start: float
    steps: int = 0
    samples: int = 0
    loss_sum: float = 0.0
    loss_weight: float = 0.0


class Reporting(RankState):
    def __init__(self, env: WorkerEnv) -> None:
        super().__init__(env)
        self._window = Window(time.perf_counter())
        self._last_checkpoint = time.monotonic()

    def _account(self, samples: int, loss_sum: float, loss_weight: float) -> None:
        w = self._window
        w.steps += 1
        w.samples += samples
        w.loss_sum += loss_sum
        w.loss_weight += loss_weight
        if self._rank != 0:
            return
        if time.perf_counter() - w.start >= self._env.report_s:
            self._report()
            self._window = Window(time.perf_counter())
        if self._env.checkpoint_s > 0 and time.monotonic() - self._last_checkpoint >= self._env.checkpoint_s:
            self._checkpoint()

    def _report(self) -> None:
        """Publish the window (if it has steps: an empty one would only overwrite the last rates)."""
        w = self._window
        if w.steps == 0:
            return
        elapsed = max(time.perf_counter() - w.start, 1e-9)
        progress = Progress(
            generation=self.generation,
            world_size=self.world_size,
            step=self._counters.step,
            epoch=self._counters.position.epoch,
            samples=self._counters.samples,
            samples_per_s=w.samples / elapsed,
            steps_per_s=w.steps / elapsed,
            loss=w.loss_sum / w.loss_weight if w.loss_weight > 0 else None,
            global_batch=self._global_batch,
            regroup_s=self._regroup_s,
            time=time.time(),
        )
        self._store.set(PROGRESS_KEY, progress.dumps())

    def _checkpoint(self) -> None:
        if self._env.job_dir is not None:
            state.save_checkpoint(self._env.job_dir, state.capture(self._model, self._optimizer, self._counters))
        self._last_checkpoint = time.monotonic()
