"""The wire protocol between a job's coordinator and its workers: env vars and store keys.

Everything a worker needs comes from environment variables, and everything the two sides say to each
other afterwards goes through ONE key-value store (``coddl.elastic.kvstore``) that the coordinator
hosts for the whole life of the job. Workers only need the store's ``host:port`` and the job's key,
so a worker may run on any node (a Ray actor on another machine starts workers with the same env
vars; nothing here assumes one host); nobody without the key can read or write the store.

Environment of a worker (set by the executor; ``WorkerEnv.from_environ`` reads it)::

    CODDL_STORE_ADDR        host:port of the job's store (unset: standalone, world size 1)
    CODDL_STORE_KEY         the job's secret (hex): proves to the store that this is one of its workers
    CODDL_JOB_ID            job name, for logs
    CODDL_WORKER_ID         unique within the job, never reused ("w0", "w1", ...)
    CODDL_GENERATION        the membership generation this worker was started for
    CODDL_JOB_DIR           checkpoints live here (unset: no checkpoints)
    CODDL_PG_TIMEOUT_S      process-group and store timeout, default 30 (see below)
    CODDL_CHECKPOINT_S      seconds between periodic checkpoints by rank 0, default 60; 0 = never
    CODDL_REPORT_S          seconds between progress reports by rank 0, default 0.5
    CODDL_SEED              seed of the data permutation and of the initial RNG state, default 0
    CODDL_VERIFY            "1": every rank reports a hash of its training state after each regroup
    CODDL_INSPECT           "1": time the job's first steps for the estimator (job inspection, below)
    CODDL_SLOT              the logical GPU slot this worker occupies (informational)
    CODDL_DEVICE_TYPE       the slot's device type as the cluster spec names it (default: the CUDA
                            device name, or cpu); ranks of more than one type balance the batch
    CODDL_DEVICE_SPEED      that type's relative speed in the spec, default 1 (the balance's start)
    CUDA_VISIBLE_DEVICES    the slot's physical GPU, when CUDA exists

Store keys (values are ASCII; JSON where structured)::

    generation              integer, the newest ANNOUNCED membership generation (read with add(key, 0))
    membership/{g}          JSON Membership: ordered worker ids (index = rank) and the reason
    gen{g}/arrived          counter: workers started for g whose script has reached ``wrap()``
    gen{g}/pg/...           the gloo/nccl rendezvous of generation g (a PrefixStore)
    gen{g}/ready            counter: ranks of g that finished regrouping and state sync
    gen{g}/complete         set by the last ready rank: generation g is training
    gen{g}/hash/{rank}      with CODDL_VERIFY: sha256 of that rank's model + optimizer state
    progress                JSON Progress, written by rank 0 every CODDL_REPORT_S
    inspection              JSON Inspection, written once by rank 0 after its first steps (CODDL_INSPECT)
    finished                set by rank 0 when training reached its end
    failure/{worker}        JSON Failure: why that worker's script failed (see ``coddl.elastic.failure``)

Resize: the coordinator writes ``membership/{g+1}``, starts the new workers (if any) and, once all of
them have arrived, announces g+1 by setting ``generation``; the survivors keep training meanwhile, so
the newcomers' start-up (fork, imports, building dataset and model, CUDA init) costs them nothing.
Rank 0 reads ``generation`` once per step and piggy-backs it on the step's control all-reduce, so
every rank learns the new generation at the SAME step boundary without an extra round. Survivors then
tear down their process group and join ``gen{g+1}/pg`` with their new rank; the new workers, which
wait for the announcement too (and so skip straight to a newer generation if a failure superseded
theirs), are already waiting there; workers not in the membership leave (exit code 0). A membership
with no members stops the job (rank 0 writes a checkpoint first).

State: in the new group the ranks compare (has state, clean, step). Survivors of a planned resize are
consistent, so each new rank receives model, optimizer, data position and RNG state point-to-point
from one of them (the copies run in parallel; survivors receive nothing, and a shrink copies nothing).
After a failure the survivor with the most progress sends to every other rank; if no rank has state
(a start or a restart), rank 0 loads the checkpoint, if any, and sends it.

Failure: the coordinator sees a worker process exit and posts a membership of the survivors with
reason ``failure``. Only the dead worker's ring neighbours get an error from gloo at once; the others
would block until the process-group timeout, so workers wait for collectives in slices and abandon
them as soon as a ``failure`` membership appears. CODDL_PG_TIMEOUT_S (default 30 s) still bounds
rendezvous and any hang the coordinator cannot see; it must exceed the longest legitimate wait
(a slow joiner's start-up, rank 0 writing a checkpoint).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Mapping

GENERATION_KEY = "generation"
PROGRESS_KEY = "progress"
INSPECTION_KEY = "inspection"
FINISHED_KEY = "finished"

REASON_START = "start"
REASON_RESIZE = "resize"
REASON_FAILURE = "failure"
REASON_RESTART = "restart"
REASON_STOP = "stop"

MAX_COUNT = 2**31 - 1  # steps, samples, sizes: what the controller's store keeps in an INTEGER column


def membership_key(generation: int) -> str:
    return f"membership/{generation}"


def arrived_key(generation: int) -> str:
    return f"gen{generation}/arrived"


def pg_prefix(generation: int) -> str:
    return f"gen{generation}/pg"


def ready_key(generation: int) -> str:
    return f"gen{generation}/ready"


def complete_key(generation: int) -> str:
    return f"gen{generation}/complete"


def hash_key(generation: int, rank: int) -> str:
    return f"gen{generation}/hash/{rank}"


@dataclass(frozen=True)
class Membership:
    """Who trains in generation ``generation``: ``members[i]`` is the worker id of rank i."""

    generation: int
    members: tuple[str, ...]
    reason: str

    def dumps(self) -> str:
        return json.dumps({"generation": self.generation, "members": list(self.members), "reason": self.reason})

    @classmethod
    def loads(cls, raw: bytes | str) -> Membership:
        d = json.loads(raw)
        return cls(generation=int(d["generation"]), members=tuple(d["members"]), reason=str(d["reason"]))


@dataclass(frozen=True)
class Progress:
    """Rank 0's report: enough for a controller to track work done and feed a throughput estimator.

    ``samples_per_s`` and ``loss`` cover only the steps since the previous report, and a report
    window never spans a regroup, so each sample belongs to exactly one ``world_size``.
    """

    generation: int
    world_size: int
    step: int
    epoch: int
    samples: int  # samples trained on since the job first started, across restarts
    samples_per_s: float
    steps_per_s: float
    loss: float | None
    global_batch: int
    regroup_s: float | None  # how long rank 0 stood still in its latest regroup (None: none yet)
    time: float  # wall clock (time.time()) of the report

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, raw: bytes | str) -> Progress:
        """A report read back; anything that is not one rank 0 could have written (the job's own code
        can write its store) raises ValueError, so that no absurd number reaches the controller."""
        if len(raw) > 4096:
            raise ValueError("not a progress report")
        d = json.loads(raw)
        if not isinstance(d, dict) or set(d) != _PROGRESS_FIELDS:
            raise ValueError("not a progress report")
        for name in ("generation", "world_size", "step", "epoch", "samples", "global_batch"):
            if type(d[name]) is not int or not 0 <= d[name] <= (2**53 if name == "samples" else MAX_COUNT):
                raise ValueError(f"progress: {name}: not a count")
        if d["loss"] is not None and type(d["loss"]) not in (int, float):
            raise ValueError("progress: loss: not a number")
        for name in ("samples_per_s", "steps_per_s", "regroup_s", "time"):
            v = d[name]
            if v is None and name == "regroup_s":
                continue
            if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"progress: {name}: not a finite number >= 0")
        return cls(**d)


_PROGRESS_FIELDS = {f.name for f in fields(Progress)}

# every micro-batch of the inspected steps: (1 + 2 + 4 + 16) × 3 rounds = 69, about 2.5 kB of JSON
MAX_TIMINGS = 128


@dataclass(frozen=True)
class Inspection:
    """Rank 0's measurements of the job on its own device, for the estimator's one-GPU profile
    (``coddl.perf.inspection``): the bytes it all-reduces per step, the forward and backward time
    of each timed (micro-)batch as (local batch, seconds), and the per-step cost outside them
    (flattening gradients, the optimizer's update) measured without the collectives' waits.
    ``global_batch`` or ``local_batch`` is the batch rule the script asked for."""

    param_bytes: int
    timings: tuple[tuple[int, float], ...]
    step_overhead_s: float
    global_batch: int | None
    local_batch: int | None

    def dumps(self) -> str:
        d = asdict(self)
        d["timings"] = [list(t) for t in self.timings]
        return json.dumps(d)

    @classmethod
    def loads(cls, raw: bytes | str) -> Inspection:
        """A report read back; as with ``Progress``, anything rank 0 could not have written (the
        job's own code can write its store) raises ValueError."""
        if len(raw) > 8192:
            raise ValueError("not an inspection report")
        d = json.loads(raw)
        if not isinstance(d, dict) or set(d) != _INSPECTION_FIELDS:
            raise ValueError("not an inspection report")
        if type(d["param_bytes"]) is not int or not 0 <= d["param_bytes"] <= 2**53:
            raise ValueError("inspection: param_bytes: not a count")
        for name in ("global_batch", "local_batch"):
            if d[name] is not None and (type(d[name]) is not int or not 1 <= d[name] <= MAX_COUNT):
                raise ValueError(f"inspection: {name}: not a batch size")
        if (d["global_batch"] is None) == (d["local_batch"] is None):
            raise ValueError("inspection: exactly one of global_batch and local_batch")
        t = d["timings"]
        if not isinstance(t, list) or not 1 <= len(t) <= MAX_TIMINGS:
            raise ValueError(f"inspection: timings: 1 to {MAX_TIMINGS} pairs")
        timings = []
        for pair in t:
            if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and 1 <= pair[0] <= MAX_COUNT
                    and type(pair[1]) in (int, float) and math.isfinite(pair[1]) and pair[1] > 0):
                raise ValueError("inspection: timings: (local batch, seconds > 0) pairs")
            timings.append((pair[0], float(pair[1])))
        v = d["step_overhead_s"]
        if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
            raise ValueError("inspection: step_overhead_s: not a finite number >= 0")
        return cls(d["param_bytes"], tuple(timings), float(v), d["global_batch"], d["local_batch"])


_INSPECTION_FIELDS = {f.name for f in fields(Inspection)}


@dataclass(frozen=True)
class WorkerEnv:
    """The settings a worker reads from its environment (see the module docstring)."""

    store_addr: str | None
    store_key: bytes | None
    job_id: str
    worker_id: str
    generation: int
    job_dir: Path | None
    pg_timeout_s: float = 30.0
    checkpoint_s: float = 60.0
    report_s: float = 0.5
    seed: int = 0
    verify: bool = False
    inspect: bool = False
    device_type: str = ""  # empty: the device's own name (coddl.elastic.group.device_name)
    device_speed: float = 1.0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> WorkerEnv:
        job_dir = environ.get("CODDL_JOB_DIR")
        return cls(
            store_addr=environ.get("CODDL_STORE_ADDR") or None,
            store_key=bytes.fromhex(environ["CODDL_STORE_KEY"]) if environ.get("CODDL_STORE_KEY") else None,
            job_id=environ.get("CODDL_JOB_ID", "standalone"),
            worker_id=environ.get("CODDL_WORKER_ID", "w0"),
            generation=int(environ.get("CODDL_GENERATION", "1")),
            job_dir=Path(job_dir) if job_dir else None,
            pg_timeout_s=float(environ.get("CODDL_PG_TIMEOUT_S", "30")),
            checkpoint_s=float(environ.get("CODDL_CHECKPOINT_S", "60")),
            report_s=float(environ.get("CODDL_REPORT_S", "0.5")),
            seed=int(environ.get("CODDL_SEED", "0")),
            verify=environ.get("CODDL_VERIFY", "") == "1",
            inspect=environ.get("CODDL_INSPECT", "") == "1",
            device_type=environ.get("CODDL_DEVICE_TYPE", ""),
            device_speed=_positive(environ.get("CODDL_DEVICE_SPEED", "1")),
        )

    def to_environ(self) -> dict[str, str]:
        env = {
            "CODDL_JOB_ID": self.job_id,
            "CODDL_WORKER_ID": self.worker_id,
            "CODDL_GENERATION": str(self.generation),
            "CODDL_PG_TIMEOUT_S": str(self.pg_timeout_s),
            "CODDL_CHECKPOINT_S": str(self.checkpoint_s),
            "CODDL_REPORT_S": str(self.report_s),
            "CODDL_SEED": str(self.seed),
            "CODDL_VERIFY": "1" if self.verify else "0",
        }
        if self.inspect:  # only when asked: the launcher's own env may carry the controller's request
            env["CODDL_INSPECT"] = "1"
        if self.store_addr:
            env["CODDL_STORE_ADDR"] = self.store_addr
        if self.store_key:
            env["CODDL_STORE_KEY"] = self.store_key.hex()
        if self.job_dir is not None:
            env["CODDL_JOB_DIR"] = str(self.job_dir)
        if self.device_type:
            env["CODDL_DEVICE_TYPE"] = self.device_type
            env["CODDL_DEVICE_SPEED"] = repr(self.device_speed)
        return env


def _positive(raw: str) -> float:
    """A relative speed; anything that is not a finite number > 0 counts as 1 (unknown)."""
    try:
        v = float(raw)
    except ValueError:
        return 1.0
    return v if math.isfinite(v) and v > 0 else 1.0


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` → ``(host, port)``; the host may be a bracketed IPv6 literal."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"CODDL_STORE_ADDR must be host:port, got {addr!r}")
    return host.strip("[]"), int(port)
