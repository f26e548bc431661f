"""The study file: a hyperparameter search over one training job, as a user writes it.

A study is ONE submission of many trials (Fluid's trial group): the job every trial runs (the same
fields as ``coddl submit``), the search space, how many trials and how many at once, Optuna's sampler
and pruner. Each parameter reaches its trial as the environment variable of its name, so a script
that already reads ``LR`` from its environment needs no change::

    name: mlp-lr
    trials: 12
    parallel: 4
    pruner: {kind: successive-halving, min_resource: 40, reduction_factor: 3}
    job:
      command: python examples/train_mlp.py
      max_gpus: 4
      steps: 300
    space:
      LR: {low: 1.0e-4, high: 0.1, log: true}
      GLOBAL_BATCH: {choices: [64, 128, 256]}

Mistakes are one line naming the file, line and field, as for a job file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator, model_validator

from coddl.runtime.spec import (
    _ENV_NAME,
    _NAME,
    RESERVED_ENV_PREFIX,
    JobFile,
    SpecError,
    parse_job,
    script_argv,
    validate,
)
from coddl.runtime.spec import _FieldError
from coddl.runtime.spec import _text_at as job_text_at
from coddl.runtime.yaml_safe import YamlFileError, dotted
from coddl.runtime.yaml_safe import read_file as read_yaml_file

MAX_TRIALS = 10_000
MAX_STEPS = 10**9  # values of a stepped range (Optuna counts them exactly)
MAX_STUDY_BYTES = 1 << 20

Scalar = StrictBool | StrictInt | StrictFloat | StrictStr
Number = StrictInt | StrictFloat


class Parameter(BaseModel):
    """One dimension of the search space: a range (``low``/``high``, optionally ``log`` or ``step``;
    integers when ``low``, ``high`` and ``step`` are all integers) or a list of ``choices``."""

    model_config = ConfigDict(extra="forbid")

    low: Number | None = None
    high: Number | None = None
    log: bool = Field(False, strict=True)
    step: Number | None = Field(None, gt=0)
    choices: list[Scalar] | None = None

    @field_validator("choices", mode="before")
    @classmethod
    def _choices(cls, v: object) -> object:
        if isinstance(v, list):
            for c in v:
                if not isinstance(c, (bool, int, float, str)):
                    raise ValueError(f"each choice must be a number, text or true/false, got {c!r}")
        return v

    @model_validator(mode="after")
    def _shape(self) -> Parameter:
        if self.choices is not None:
            if self.low is not None or self.high is not None or self.step is not None or self.log:
                raise ValueError("give either choices or a range (low, high), not both")
            if not self.choices:
                raise ValueError("choices: must list at least one value")
            return self
        if self.low is None or self.high is None:
            raise ValueError("needs low and high (a range) or choices (a list)")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ValueError(f"must have finite low <= high, got low {self.low}, high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log: needs low > 0, got {self.low}")
        if self.log and self.step is not None:
            raise ValueError("give log or step, not both")
        if not math.isfinite(self.high - self.low):
            raise ValueError(f"the range from {self.low} to {self.high} is wider than a float can hold")
        if self.step is not None:
            n = (self.high - self.low) / self.step
            if n > MAX_STEPS:
                raise ValueError(f"step: {self.step} makes more than {MAX_STEPS:,} values between low and high")
            if abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):
                raise ValueError(f"step: high - low ({self.high} - {self.low}) must be a multiple of step ({self.step})")
        return self

    @property
    def integer(self) -> bool:
        return self.choices is None and all(isinstance(v, int) for v in (self.low, self.high, self.step or 1))

    def admits(self, value: Scalar) -> bool:
        """Whether ``value`` is one this parameter could take (an enqueued configuration's)."""
        if self.choices is not None:
            return any(value == c and type(value) is type(c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.integer and not isinstance(value, int)):
            return False
        return self.low <= value <= self.high


def _located(field: str, message: str) -> ValueError:
    """A cross-field error that names its field (``coddl.runtime.spec.describe`` reads it)."""
    return _FieldError(field, message)


class Pruner(BaseModel):
    """Optuna's pruner, stopping trials whose reported loss is behind: ``successive-halving`` (ASHA),
    ``hyperband``, ``median``, ``threshold`` (a loss above ``upper`` or below ``lower``: a diverging
    run) or ``none``. Resources are optimizer steps (the trial's progress reports)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["successive-halving", "hyperband", "median", "threshold", "none"] = "successive-halving"
    min_resource: int = Field(1, ge=1, strict=True, description="steps every trial runs before it may be pruned")
    reduction_factor: int = Field(3, ge=2, strict=True, description="successive-halving and hyperband: 1/η survive a rung")
    startup_trials: int = Field(4, ge=0, strict=True, description="median: trials never pruned, to learn the median")
    upper: Number | None = Field(None, description="threshold: prune a trial whose loss is above this")
    lower: Number | None = Field(None, description="threshold: prune a trial whose loss is below this")

    @model_validator(mode="after")
    def _bounds(self) -> Pruner:
        if self.kind == "threshold" and self.upper is None and self.lower is None:
            raise ValueError("threshold: needs upper or lower (or both)")
        if self.kind != "threshold" and (self.upper is not None or self.lower is not None):
            raise ValueError(f"upper and lower belong to the threshold pruner, not {self.kind}")
        if self.upper is not None and self.lower is not None and self.lower > self.upper:
            raise ValueError(f"lower ({self.lower}) must be <= upper ({self.upper})")
        return self


class Sampler(BaseModel):
    """Optuna's sampler: ``tpe`` (the default) or ``random``; ``seed`` makes the suggestions repeatable."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["tpe", "random"] = "tpe"
    seed: int | None = Field(None, ge=0, le=2**32 - 1, strict=True)


class StudyFile(BaseModel):
    """A study as submitted: what every trial runs and what varies between them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="1-64 letters, digits, '.', '_' or '-'; trial n runs as the job <name>-<n>")
    direction: Literal["minimize", "maximize"] = Field(
        "minimize", description="the objective is the loss each trial passes to s.step (its last report)")
    trials: int = Field(ge=1, le=MAX_TRIALS, strict=True, description="trials in all")
    parallel: int | None = Field(None, ge=1, le=MAX_TRIALS, strict=True,
                                 description="trials submitted at once (default: all of them)")
    sampler: Sampler = Field(default_factory=Sampler)
    pruner: Pruner = Field(default_factory=Pruner)
    job: dict = Field(description="the job every trial runs: the fields of a job file")
    space: dict[str, Parameter] = Field(description="parameter name (an environment variable) → range or choices")
    enqueue: list[dict[str, Scalar]] = Field(
        default_factory=list, description="configurations to try first, in order (Optuna's enqueue_trial): a "
                                          "known-good setting to start from; parameters left out are sampled")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # a trial's job is <name>-<number>: leave room for the number within a job name's 64 characters
        if not _NAME.fullmatch(v) or len(v) > 58:
            raise ValueError(f"must be 1-58 letters, digits, '.', '_' or '-', starting with a letter or digit, got {v!r}")
        return v

    @field_validator("space")
    @classmethod
    def _space(cls, v: dict[str, Parameter]) -> dict[str, Parameter]:
        if not v:
            raise ValueError("must name at least one parameter")
        for name in v:
            if not _ENV_NAME.fullmatch(name) or name.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{name!r} is not an environment variable a trial may be given "
                                 f"(letters, digits and '_', not starting with a digit or {RESERVED_ENV_PREFIX})")
        return v

    @model_validator(mode="after")
    def _enqueued(self) -> StudyFile:
        if len(self.enqueue) > self.trials:
            raise _located("enqueue", f"lists {len(self.enqueue)} configurations for {self.trials} trials")
        for i, config in enumerate(self.enqueue):
            for name, value in config.items():
                p = self.space.get(name)
                if p is None:
                    raise _located(f"enqueue.{i}.{name}", f"not a parameter of the space ({', '.join(self.space)})")
                if not p.admits(value):
                    raise _located(f"enqueue.{i}.{name}", f"{value!r} is outside the parameter's "
                                                          f"{'choices' if p.choices is not None else 'range'}")
        return self

    @property
    def in_flight(self) -> int:
        return min(self.parallel or self.trials, self.trials)


def _text_at(path: tuple[str | int, ...]) -> bool:
    """The job template's fields stay text where a job file's do; the space's choices keep their type."""
    return len(path) >= 2 and path[0] == "job" and job_text_at(path[1:])


def load_study(path: Path | str) -> tuple[StudyFile, JobFile]:
    """Read and validate a study file and the job its trials run (relative script paths from the
    current directory, as ``coddl submit`` takes them); raises SpecError, one line naming file, line
    and field."""
    p = Path(path)
    try:
        data, lines = read_yaml_file(p, MAX_STUDY_BYTES, "a study file", "a mapping of study fields", _text_at)
    except YamlFileError as e:
        raise SpecError(str(e), dotted(e.path) or None) from None

    def located(e: SpecError, prefix: str = "") -> SpecError:
        """``e`` (``FILE: field: message``) with the field's line, the field under ``prefix``."""
        rest = str(e)[len(str(p)) + 2:]
        field = f"{prefix}{e.field}" if e.field else None
        line = lines.get(field) if field else None
        return SpecError(f"{p}: {f'line {line}: ' if line else ''}{prefix if field else ''}{rest}", field)

    try:
        study = validate(StudyFile, data, str(p), what="study")
    except SpecError as e:
        raise located(e) from None
    if "name" in study.job:
        raise located(SpecError(f"{p}: name: trials are named <study>-<n> (here {study.name}-0, {study.name}-1, ...); "
                                "remove the job's name", "name"), "job.")
    env = study.job.get("env")
    for name in study.space:
        if isinstance(env, dict) and name in env:
            raise located(SpecError(f"{p}: env.{name}: is set by the search space; remove it from the job's env",
                                    f"env.{name}"), "job.")
    try:
        job = parse_job({**study.job, "name": study.name}, str(p))  # each trial's job is renamed <name>-<n>
    except SpecError as e:
        raise located(e, "job.") from None
    if job.steps is not None and study.pruner.kind != "none" and study.pruner.min_resource >= job.steps:
        raise located(SpecError(f"{p}: pruner.min_resource: {study.pruner.min_resource} is not below the job's "
                                f"{job.steps} steps, so no trial could ever be pruned", "pruner.min_resource"))
    job = job.with_absolute_paths(Path(os.getcwd()))
    if job.command is not None and job.kind == "elastic":
        script, _ = script_argv(job.command)
        if not Path(script).is_file():
            raise SpecError(f"{p}: job.command: no such script {script}", "job.command")
    return study, job
