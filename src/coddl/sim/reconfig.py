"""Reconfiguration-cost models (ALGORITHMS.md §7): how long a job pauses when its GPUs change.

* ``zero`` — free, as the CoDDL authors' simulator charged (for reproduction);
* ``in-place`` — CoDDL-style resizing: re-form the process group on a long-lived store, broadcast
  parameters and optimizer state to new ranks, redo one step; new workers come from a warm pool;
* ``restart`` — checkpoint, kill, cold-start fresh processes, reload.
A paused job keeps its GPUs and loses no work; it just makes no progress for the cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from coddl.core.allocation import Action, ActionKind

# Parameter bytes per model (fp32), from the published architectures; optimizer state is charged
# as one more copy (momentum SGD) where a resize has to move it.
MODEL_BYTES: dict[str, float] = {
    "VggnetModel256": 138e6 * 4, "GooglenetModel128": 6.8e6 * 4, "Inception4Model256": 43e6 * 4,
    "Resnet50Model128": 25.6e6 * 4, "DeepspeechModel64": 38e6 * 4, "TransformerModel256": 65e6 * 4,
    "DcganModel256": 3.6e6 * 4, "ChatbotModel256": 20e6 * 4, "VideopredictionModel64": 30e6 * 4,
    "AutoencoderModel51200": 10e6 * 4, "TransformerModel4096": 65e6 * 4,
}
# Measured cold start (graph import + first step, s) from the CoDDL authors' simulator (DATA.md).
COLD_START_S: dict[str, float] = {
    "VggnetModel256": 0.35 + 3.57, "GooglenetModel128": 0.88 + 3.20, "Inception4Model256": 2.87 + 7.50,
    "Resnet50Model128": 1.29 + 3.72, "DcganModel256": 0.56 + 2.63, "VideopredictionModel64": 6.48 + 17.81,
    "ChatbotModel256": 0.1 + 0.1,
}


@dataclass(frozen=True)
class ReconfigCost:
    name: str = "zero"
    regroup_s: float = 0.02  # re-forming the process group on a live store (4–40 ms measured)
    warm_start_s: float = 0.05  # a worker forked from a pre-warmed pool
    state_gbps: float = 0.25  # state broadcast bandwidth (measured 250 MB/s on CPU/gloo)
    default_cold_start_s: float = 30.0  # Pollux's flat restart penalty for models without a measurement
    checkpoint_gbps: float = 1.0  # checkpoint write/read bandwidth

    def resize_cost(self, model: str) -> float:
        """Seconds a resize of a running job of ``model`` stands it still, for the scheduler's rule
        that a growth must save more than it costs (``coddl.policies.restarts``): under ``restart``
        the checkpoint written and read back plus a cold start (the one step redone is left out:
        it is the job's own pace, not a cost of the move); 0 for an in-place resize."""
        if self.name != "restart":
            return 0.0
        state = 2 * MODEL_BYTES.get(model, 100e6)
        return COLD_START_S.get(model, self.default_cold_start_s) + 2 * state / (self.checkpoint_gbps * 1e9)

    def pause(self, action: Action, model: str, step_time_s: float) -> float:
        """Seconds the job makes no progress after ``action``."""
        if self.name == "zero" or action.kind in (ActionKind.SUSPEND, ActionKind.COTENANTS):
            return 0.0  # a new co-tenant changes the job's speed, not its processes
        state = 2 * MODEL_BYTES.get(model, 100e6)  # parameters + optimizer state
        if self.name == "in-place" and action.kind is ActionKind.RECORE:
            return self.regroup_s  # same ranks, new core affinity and input workers
        if self.name == "in-place":
            if action.kind in (ActionKind.START, ActionKind.RESUME):
                load = state / (self.checkpoint_gbps * 1e9) if action.kind is ActionKind.RESUME else 0.0
                return self.warm_start_s + load + step_time_s
            return self.regroup_s + state / (self.state_gbps * 1e9) + step_time_s
        if self.name == "restart":
            if action.kind is ActionKind.START:
                return COLD_START_S.get(model, self.default_cold_start_s) + step_time_s
            return self.resize_cost(model) + step_time_s
        raise ValueError(f"unknown reconfiguration model {self.name!r}; valid: zero, in-place, restart")
