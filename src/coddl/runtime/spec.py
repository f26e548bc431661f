"""The job file a user submits (YAML on the command line, JSON through the API), validated by pydantic.

A job names what to run — a Python training script (``command``) or a ``module:function`` entry
point — and what the scheduler needs to plan it: the model name for the throughput estimator, the
elastic GPU range and the amount of work (steps, or epochs × steps per epoch). Any mistake is
reported as ONE line that names the field, e.g. ``job.yaml: max_gpus: must be >= min_gpus (1), got 0``,
because the person reading it is fixing a file, not debugging coddl.

Why only Python: every worker runs the script in-process through ``coddl.elastic`` (forked from a
warm pool that has already imported torch), so a command must end up as a script path plus argv.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from coddl.core.job import JobSpec

DEFAULT_MODEL = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


class SpecError(ValueError):
    """A job file or request body that is not a valid job; the message is one line naming the field."""


class JobFile(BaseModel):
    """One training job. ``command`` or ``entrypoint``, and ``steps`` or ``epochs``, are required."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    command: list[str] | str | None = None
    entrypoint: str | None = None
    args: list[str] = Field(default_factory=list)
    model: str = DEFAULT_MODEL
    min_gpus: int = Field(1, ge=1)
    max_gpus: int | None = None
    steps: int | None = Field(None, gt=0)
    epochs: int | None = Field(None, gt=0)
    steps_per_epoch: int | None = Field(None, gt=0)
    batch_size: int | None = Field(None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, got {v!r}")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | str | None) -> list[str] | None:
        if v is None:
            return None
        argv = shlex.split(v) if isinstance(v, str) else list(v)
        if not argv:
            raise ValueError("must not be empty")
        script_argv(argv)  # raises ValueError with the reason
        return argv

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str | None) -> str | None:
        if v is not None and not _ENTRYPOINT.match(v):
            raise ValueError(f"must be 'package.module:function', got {v!r}")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        """The rule ``coddl token create`` applies to a user name: the store's owner column holds 64
        characters (PostgreSQL enforces it), and a NUL is no text PostgreSQL stores."""
        if v is not None and (not v.strip() or len(v) > 64 or "\x00" in v):
            raise ValueError(f"must be 1-64 characters, got {v!r}")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars(cls, v: Any) -> Any:
        """YAML reads ``LR: 0.001`` as a float; an environment holds strings, so scalars are spelled out."""
        if isinstance(v, dict):
            return {k: str(x).lower() if isinstance(x, bool) else str(x) if isinstance(x, (int, float)) else x
                    for k, x in v.items()}
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not _ENV_NAME.match(k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
        return v

    @model_validator(mode="after")
    def _whole(self) -> JobFile:
        if (self.command is None) == (self.entrypoint is None):
            raise _FieldError("command", "give exactly one of command or entrypoint")
        if self.command is not None and self.args:
            raise _FieldError("args", "only with entrypoint (a command carries its own arguments)")
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise _FieldError("max_gpus", f"must be >= min_gpus ({self.min_gpus}), got {self.max_gpus}")
        if (self.steps is None) == (self.epochs is None):
            raise _FieldError("steps", "give exactly one of steps or epochs")
        if self.epochs is not None and self.steps_per_epoch is None:
            raise _FieldError("steps_per_epoch", "required with epochs (the scheduler plans in steps)")
        if self.steps is not None and self.steps_per_epoch is not None:
            raise _FieldError("steps_per_epoch", "only with epochs")
        return self

    # ------------------------------------------------------------------ derived
    @property
    def total_steps(self) -> int:
        """The work the scheduler plans with, in optimizer steps at the job's global batch."""
        return self.steps if self.steps is not None else self.epochs * self.steps_per_epoch

    def entry_and_args(self) -> tuple[str, tuple[str, ...]]:
        """What a worker runs: a script path or ``module:function``, and its argv after it."""
        if self.entrypoint is not None:
            return self.entrypoint, tuple(self.args)
        script, rest = script_argv(self.command)
        return script, tuple(rest)

    def environment(self) -> dict[str, str]:
        """The job's environment: its own ``env``, then the planning fields under the names the
        example scripts read (STEPS or EPOCHS, GLOBAL_BATCH), so a script and its scheduler agree."""
        env = dict(self.env)
        if self.steps is not None:
            env["STEPS"] = str(self.steps)
        if self.epochs is not None:
            env["EPOCHS"] = str(self.epochs)
        if self.batch_size is not None:
            env["GLOBAL_BATCH"] = str(self.batch_size)
        return env

    def with_absolute_paths(self, base: Path) -> JobFile:
        """The same job with a relative script path made absolute against ``base`` (the directory the
        user submitted from): the server's workers do not run in the user's directory."""
        if self.command is None:
            return self
        script, _ = script_argv(self.command)
        p = Path(script)
        if p.is_absolute():
            return self
        argv = [str((base / p).resolve()) if a == script else a for a in self.command]
        return self.model_copy(update={"command": argv})

    def to_core(self, job_id: str, arrival: float, owner: str, model: str, steps_done: int = 0) -> JobSpec:
        """The scheduler's view: ``model`` is the curve name the estimator resolved for this job, and
        the work is what is left (a recovered job resumes ``steps_done`` steps in)."""
        left = max(1, self.total_steps - steps_done)
        return JobSpec(job_id=job_id, arrival=arrival, requested_gpus=self.min_gpus, total_work=float(left),
                       model=model, min_gpus=self.min_gpus, max_gpus=self.max_gpus, user=owner)


class _FieldError(ValueError):
    """A cross-field check that blames one field (pydantic would blame the whole model)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def script_argv(argv: list[str]) -> tuple[str, list[str]]:
    """Split ``[python [-u] SCRIPT.py ARGS...]`` into the script and its arguments."""
    i = 0
    if _PYTHON.match(Path(argv[0]).name) or argv[0] == "python":
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            if argv[i] == "-m":
                raise ValueError("'python -m MODULE' is not supported; use entrypoint: 'module:function'")
            if argv[i] not in ("-u", "-O", "-B"):
                raise ValueError(f"unsupported interpreter option {argv[i]!r}")
            i += 1
    if i >= len(argv):
        raise ValueError("names no script to run")
    script = argv[i]
    if not script.endswith(".py"):
        raise ValueError(f"must run a Python script (python SCRIPT.py ARGS...), got {script!r}")
    return script, argv[i + 1:]


def _describe(err: ErrorDetails) -> tuple[str, str]:
    """(field, message) for one pydantic error, in the one-line style of the CLI."""
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    got = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return loc, "required"
    if kind == "extra_forbidden":
        return loc, f"unknown field (valid fields: {', '.join(JobFile.model_fields)})"
    if kind == "value_error":
        cause = ctx.get("error")
        if isinstance(cause, _FieldError):
            return cause.field, cause.message
        return loc, str(cause) if cause is not None else err["msg"]
    if kind in ("greater_than_equal", "greater_than"):
        op = ">=" if kind == "greater_than_equal" else ">"
        bound = ctx.get("ge", ctx.get("gt"))
        return loc, f"must be {op} {bound}, got {got!r}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return loc, f"must be an integer, got {got!r}"
    if kind in ("string_type",):
        return loc, f"must be a string, got {got!r}"
    msg = err["msg"]
    return loc, f"{msg[0].lower()}{msg[1:]}, got {got!r}"


def parse_job(data: Any, source: str = "job") -> JobFile:
    """Validate a decoded job (a mapping); raises SpecError with ``source: field: problem``."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping of job fields, got {type(data).__name__}")
    try:
        return JobFile.model_validate(data)
    except ValidationError as e:
        field, message = _describe(e.errors()[0])
        raise SpecError(f"{source}: {field}: {message}" if field else f"{source}: {message}") from None


def load_job(path: Path | str) -> JobFile:
    """Read and validate a job YAML file; relative script paths are taken from the current directory."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise SpecError(f"{p}: cannot read: {e.__class__.__name__}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise SpecError(f"{p}: {where}{problem}") from None
    job = parse_job(data, str(p))
    job = job.with_absolute_paths(Path(os.getcwd()))
    if job.command is not None:
        script, _ = script_argv(job.command)
        if not Path(script).is_file():
            raise SpecError(f"{p}: command: no such script {script}")
    return job
