"""The job file a user submits (YAML on the command line, JSON through the API), validated by pydantic.

A job names what to run — a Python training script (``command``) or a ``module:function`` entry
point, or with ``kind: command`` any program at all — and what the scheduler needs to plan it: the model name for the throughput estimator, the
elastic GPU range and the amount of work (steps, or epochs × steps per epoch). Any mistake is
reported as ONE line that names the field, e.g. ``job.yaml: max_gpus: must be >= min_gpus (1), got 0``,
because the person reading it is fixing a file, not debugging coddl.

Why an elastic job is Python: every worker runs the script in-process through ``coddl.elastic``
(forked from a warm pool that has already imported torch), so its command must end up as a script
path plus argv. A ``kind: command`` job is run as it is, as a rigid gang with torchrun's environment
(``coddl.elastic.gang``): resized only by restarting it, and only if it says it can be.

Sharing a GPU: ``gpu_fraction`` below 1 (or ``shareable: true``) makes a one-GPU job that the server
may pack beside others on one GPU (``coddl server start --sharing``); ``gpu_memory_gb`` is what it
needs of that GPU's memory. Such a job runs on exactly one GPU, so min_gpus and max_gpus must be 1.
"""

from __future__ import annotations

import os
import re
import shlex
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from coddl.core.job import MIN_GPU_FRACTION, JobSpec
from coddl.runtime.limits import DEFAULT_MAX_BODY_BYTES, MAX_STORE_INT
from coddl.runtime.text import find_bad_text, short
from coddl.runtime.yaml_safe import YamlFileError, dotted
from coddl.runtime.yaml_safe import read_file as read_yaml_file

DEFAULT_MODEL = "default"
MAX_MODEL_CHARS = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENTRYPOINT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", re.ASCII)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
RESERVED_ENV_PREFIX = "CODDL_"  # the launcher sets these for each worker
GANG_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RESTART_COUNT")  # set for each process of a command job
DEFAULT_GRACE_S = 30.0
MAX_GRACE_S = 3600.0


class SpecError(ValueError):
    """A job file or request body that is not a valid job; the message is one line naming the field
    (``field``, when one field is to blame)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def user_name_problem(name: str) -> str | None:
    """The rule for a user name (a job's ``user``, ``coddl token create USER``): the store's owner
    column holds 64 characters, and a name is shown in tables, so it is printable text without
    surrounding blanks."""
    if not 0 < len(name) <= 64 or not name.isprintable() or name != name.strip():
        return f"must be 1-64 printable characters without leading or trailing blanks, got {short(name)}"
    return None


def _count(description: str, *, positive: bool = True) -> Any:
    """An optional integer field up to MAX_STORE_INT (positive unless a cross-field check says more);
    strict, so 2.0, "2" and true are refused rather than converted."""
    return Field(None, ge=1 if positive else None, le=MAX_STORE_INT, strict=True, description=description)


STORED = {"stored": True}  # validation context of a spec read back from the store


def _stored(info: ValidationInfo) -> bool:
    """A spec an earlier version accepted is held to what running it needs, not to every rule a new
    submission meets: a stricter name rule must not fail a job that was running before an upgrade."""
    return bool(info.context and info.context.get("stored"))


class StoredInput(BaseModel):
    """A request that the store will keep: text that the store cannot hold or the API cannot send (a
    NUL, a lone surrogate) anywhere in it is refused before any field is looked at, naming where."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        found = find_bad_text(data)
        if found is not None:
            path, problem = found
            raise _FieldError(dotted(path) or "body", problem)
        return data


class JobFile(StoredInput):
    """One training job. ``command`` or ``entrypoint``, and ``steps`` or ``epochs``, are required."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="Job")

    name: str = Field(description="1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
                      examples=["mlp"])
    kind: Literal["elastic", "command"] = Field(
        "elastic", description="elastic: a coddl.elastic script, resized in place; command: any program, run as a "
                               "rigid gang of min_gpus processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, "
                               "MASTER_PORT and CUDA_VISIBLE_DEVICES set, as torchrun would")
    command: list[str] | str | None = Field(
        None, description="the Python script to run with its arguments: `python SCRIPT.py ARGS...` as a list of "
                          "words or one shell-quoted string; the script path must be absolute on the server. "
                          "With kind: command, any program and its arguments (paths absolute: the job runs in "
                          "its job directory)")
    restartable: bool = Field(False, strict=True, description="kind: command only: the program resumes from its own "
                                                              "checkpoint, so the scheduler may resize it between "
                                                              "min_gpus and max_gpus by restarting it")
    grace_s: float = Field(DEFAULT_GRACE_S, ge=0, le=MAX_GRACE_S, strict=True,
                           description="kind: command only: seconds between SIGTERM and SIGKILL when the job is "
                                       "preempted, resized or cancelled")
    entrypoint: str | None = Field(None, description="instead of command: a `package.module:function` to call")
    args: list[str] = Field(default_factory=list, description="arguments of the entrypoint (sys.argv[1:])")
    model: str = Field(DEFAULT_MODEL, description="optional: the model's name, whose bundled curve (if any) plans the job "
                                                 "until its first steps report its own profile; any other name, "
                                                 "or none, starts on a conservative default curve")
    min_gpus: int = Field(1, ge=1, le=MAX_STORE_INT, strict=True,
                          description="the fewest GPUs the job runs on (all of one GPU type)")
    max_gpus: int | None = _count("the most GPUs the scheduler may give it (default: no limit)",
                                      positive=False)
    steps: int | None = _count("the work in optimizer steps at the global batch size (or epochs)")
    epochs: int | None = _count("the work in epochs (with steps_per_epoch), instead of steps")
    steps_per_epoch: int | None = _count("optimizer steps per epoch, with epochs")
    batch_size: int | None = _count("the global batch size, kept constant whatever the GPU count "
                                    "(GLOBAL_BATCH in the job's environment)")
    gpu_fraction: float = Field(1.0, ge=MIN_GPU_FRACTION, le=1, strict=True,
                                description="the part of one GPU the job needs (0.01 <= f <= 1); below 1 the job runs on "
                                            "one GPU that other such jobs may share (with CUDA: that share of its "
                                            "memory, and of its compute under MPS)")
    shareable: bool = Field(False, strict=True,
                            description="a one-GPU job that accepts one co-tenant on its GPU (packed as half a GPU)")
    gpu_memory_gb: float | None = Field(None, gt=0, allow_inf_nan=False, strict=True,
                                        description="with gpu_fraction < 1 or shareable: the GPU memory the job needs "
                                                    "in GiB, enforced with CUDA (default: its share of the GPU's)")
    env: dict[str, str] = Field(default_factory=dict,
                                description="environment variables of every worker (names other than CODDL_*; "
                                            "values are text)")
    user: str | None = Field(None, description="the owner, if not the token's user (admins only)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str, info: ValidationInfo) -> str:
        if not _stored(info) and not _NAME.fullmatch(v):
            raise ValueError(f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, "
                             f"got {short(v)}")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | str | None, info: ValidationInfo) -> list[str] | None:
        if v is None:
            return None
        argv = shlex.split(v) if isinstance(v, str) else list(v)  # ValueError: No closing quotation
        if not argv or not argv[0]:
            raise ValueError("must not be empty")
        if info.data.get("kind", "elastic") == "elastic":
            script_argv(argv)  # raises ValueError with the reason
        return argv

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not _stored(info) and not _ENTRYPOINT.fullmatch(v):
            raise ValueError(f"must be 'package.module:function', got {short(v)}")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None, info: ValidationInfo) -> str | None:
        problem = None if v is None or _stored(info) else user_name_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str, info: ValidationInfo) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        if not _stored(info) and (len(v) > MAX_MODEL_CHARS or not v.isprintable()):
            raise ValueError(f"must be a printable name of at most {MAX_MODEL_CHARS} characters, got {short(v)}")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if _stored(info):
            return v
        for k in v:
            if not _ENV_NAME.fullmatch(k):
                raise ValueError(f"{short(k)} is not a valid environment variable name")
            if k.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{k}: names starting with {RESERVED_ENV_PREFIX} are set by coddl for each worker")
        return v

    @model_validator(mode="after")
    def _whole(self) -> JobFile:
        if (self.command is None) == (self.entrypoint is None):
            raise _FieldError("command", "give exactly one of command or entrypoint")
        if self.command is not None and self.args:
            raise _FieldError("args", "only with entrypoint (a command carries its own arguments)")
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise _FieldError("max_gpus", f"must be >= min_gpus ({self.min_gpus}), got {self.max_gpus}")
        if self.kind == "elastic":
            for name, default in (("restartable", False), ("grace_s", DEFAULT_GRACE_S)):
                if getattr(self, name) != default:  # (a stored spec carries the defaults)
                    raise _FieldError(name, "only with kind: command (an elastic job is resized in place)")
        else:
            if self.entrypoint is not None:
                raise _FieldError("entrypoint", "kind: command runs a program: give command")
            if not self.restartable and self.max_gpus not in (None, self.min_gpus):
                raise _FieldError("max_gpus", f"a command job that is not restartable runs on exactly min_gpus "
                                              f"({self.min_gpus}) GPUs, got {self.max_gpus}")
            reserved = sorted(set(self.env) & set(GANG_ENV))
            if reserved:
                raise _FieldError("env", f"{reserved[0]}: set by coddl for each process of a command job")
        if self.shares_gpu:
            if self.min_gpus != 1:
                raise _FieldError("min_gpus", f"a job sharing a GPU (gpu_fraction < 1 or shareable) runs on one GPU: "
                                              f"min_gpus must be 1, got {self.min_gpus}")
            if self.max_gpus not in (None, 1):
                raise _FieldError("max_gpus", f"a job sharing a GPU (gpu_fraction < 1 or shareable) runs on one GPU: "
                                              f"max_gpus must be 1, got {self.max_gpus}")
        elif self.gpu_memory_gb is not None:
            raise _FieldError("gpu_memory_gb", "only for a job sharing a GPU (gpu_fraction < 1 or shareable: true); "
                                               "a whole-GPU job has all of its GPU's memory")
        if (self.steps is None) == (self.epochs is None):
            raise _FieldError("steps", "give exactly one of steps or epochs")
        if self.epochs is not None and self.steps_per_epoch is None:
            raise _FieldError("steps_per_epoch", "required with epochs (the scheduler plans in steps)")
        if self.steps is not None and self.steps_per_epoch is not None:
            raise _FieldError("steps_per_epoch", "only with epochs")
        if self.epochs is not None and self.epochs * self.steps_per_epoch > MAX_STORE_INT:
            raise _FieldError("steps_per_epoch", f"epochs × steps_per_epoch = {self.epochs * self.steps_per_epoch} "
                                                 f"steps, more than the store holds ({MAX_STORE_INT})")
        return self

    # ------------------------------------------------------------------ derived
    @property
    def shares_gpu(self) -> bool:
        """The job may run beside others on one GPU (``JobSpec.shares_gpu``)."""
        return self.gpu_fraction < 1.0 or self.shareable

    @property
    def total_steps(self) -> int:
        """The work the scheduler plans with, in optimizer steps at the job's global batch."""
        return self.steps if self.steps is not None else self.epochs * self.steps_per_epoch

    def entry_and_args(self) -> tuple[str, tuple[str, ...]]:
        """What a worker runs: a script path or ``module:function``, and its argv after it (for a
        command job: the program and its arguments)."""
        if self.entrypoint is not None:
            return self.entrypoint, tuple(self.args)
        if self.kind == "command":
            return self.command[0], tuple(self.command[1:])
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
        user submitted from): the server's workers do not run in the user's directory. A command job's
        words are left as written (which of them is a path is the program's business)."""
        if self.command is None or self.kind == "command":
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
        rigid = self.kind == "command" and not self.restartable
        return JobSpec(job_id=job_id, arrival=arrival, requested_gpus=self.min_gpus, total_work=float(left),
                       model=model, min_gpus=self.min_gpus, max_gpus=self.min_gpus if rigid or self.shares_gpu
                       else self.max_gpus, user=owner, gpu_fraction=self.gpu_fraction, shareable=self.shareable,
                       gpu_memory_gb=self.gpu_memory_gb)


class _FieldError(ValueError):
    """A cross-field check that blames one field (pydantic would blame the whole model)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def script_argv(argv: list[str]) -> tuple[str, list[str]]:
    """Split ``[python [-u] SCRIPT.py ARGS...]`` into the script and its arguments."""
    i = 0
    if _PYTHON.fullmatch(Path(argv[0]).name):
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            if argv[i] == "-m":
                raise ValueError("'python -m MODULE' is not supported; use entrypoint: 'module:function'")
            if argv[i] not in ("-u", "-O", "-B"):
                raise ValueError(f"unsupported interpreter option {short(argv[i])}")
            i += 1
    if i >= len(argv):
        raise ValueError("names no script to run")
    script = argv[i]
    if not script.endswith(".py"):
        raise ValueError(f"must run a Python script (python SCRIPT.py ARGS...), got {short(script)}")
    return script, argv[i + 1:]


_UNION_TAG = re.compile(r"^(str|int|float|bool|none|list\[.*\]|dict\[.*\]|function-\w+\[.*\])$")
_TYPE_NAMES = {"dict": "a mapping", "list": "a list", "NoneType": "nothing (null)", "str": "text", "bool": "a boolean",
               "int": "an integer", "float": "a number"}


def describe(err: ErrorDetails, fields: Iterable[str]) -> tuple[str, str]:
    """(field, message) for one pydantic error of a model with ``fields``, in the one-line style of
    the CLI. Inputs are quoted through ``short``: a message is one line, whatever the input was."""
    loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and _UNION_TAG.match(p)))
    kind = err["type"]
    got = short(err.get("input"))
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return loc, "required"
    if kind == "extra_forbidden":
        return loc, f"unknown field (valid fields: {', '.join(fields)})"
    if kind == "value_error":
        cause = ctx.get("error")
        if isinstance(cause, _FieldError):
            return cause.field, cause.message
        return loc, str(cause) if cause is not None else err["msg"]
    if kind in ("greater_than_equal", "greater_than"):
        op = ">=" if kind == "greater_than_equal" else ">"
        return loc, f"must be {op} {ctx.get('ge', ctx.get('gt'))}, got {got}"
    if kind == "less_than_equal":
        why = " (the largest integer the store holds)" if ctx.get("le") == MAX_STORE_INT else ""
        return loc, f"must be <= {ctx.get('le')}{why}, got {got}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return loc, f"must be an integer, got {got}"
    if kind == "string_type":
        return loc, f"must be text, got {got}"
    msg = err["msg"]
    return loc, f"{msg[0].lower()}{msg[1:]}, got {got}"


M = TypeVar("M", bound=BaseModel)


def _model_at(model: type[BaseModel], path: tuple[str | int, ...]) -> type[BaseModel]:
    """The model whose fields hold the last step of ``path`` (an error's location less its field):
    nested models, and the values of their lists and mappings, are followed, so that an unknown
    field lists the valid fields of the mapping it is in (a study's ``space.LR``, not the study's)."""
    at: Any = model
    for part in path:
        if isinstance(at, type) and issubclass(at, BaseModel):
            field = at.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return at
            at = field.annotation
        else:  # a list's or a mapping's values (unwrapping X | None first)
            args = [a for a in typing.get_args(at) if a is not type(None)]
            at = args[-1] if args else None
        while typing.get_origin(at) in (typing.Union, types.UnionType) and len(typing.get_args(at)) == 2 \
                and type(None) in typing.get_args(at):
            at = next(a for a in typing.get_args(at) if a is not type(None))
    return at if isinstance(at, type) and issubclass(at, BaseModel) else model


def validate(model: type[M], data: Any, source: str, what: str = "job", context: dict | None = None) -> M:
    """Validate decoded JSON/YAML against ``model`` (``context=STORED`` for a spec read back from the
    store); raises SpecError with ``source: field: problem``."""
    if not isinstance(data, dict):
        kind = _TYPE_NAMES.get(type(data).__name__, type(data).__name__)
        raise SpecError(f"{source}: expected a mapping of {what} fields, got {kind}")
    try:
        return model.model_validate(data, context=context)
    except ValidationError as e:
        err = e.errors()[0]
        field, message = describe(err, _model_at(model, tuple(err["loc"])[:-1]).model_fields)
        raise SpecError(f"{source}: {field}: {message}" if field else f"{source}: {message}", field or None) from None


def parse_job(data: Any, source: str = "job") -> JobFile:
    """Validate a decoded job (a mapping); raises SpecError with ``source: field: problem``."""
    return validate(JobFile, data, source)


def _text_at(path: tuple[str | int, ...]) -> bool:
    """Where a job file's plain YAML scalars are text as written: the text fields, the words of
    command and args, and env values (``VERSION: 1.10`` is "1.10", not 1.1)."""
    if len(path) == 1:
        return path[0] in ("name", "model", "entrypoint", "user", "command", "kind")
    return len(path) == 2 and path[0] in ("command", "args", "env")


def read_job_file(p: Path, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> tuple[Any, dict[str, int]]:
    """A job file's YAML as Python values, and the line of each field path (``env.LR``), or SpecError:
    no larger than the server would take as a request, UTF-8, and plain YAML (``coddl.runtime.yaml_safe``)."""
    try:
        return read_yaml_file(p, max_bytes, "a job file", "a mapping of job fields", _text_at)
    except YamlFileError as e:
        raise SpecError(str(e), dotted(e.path) or None) from None


def load_job(path: Path | str) -> JobFile:
    """Read and validate a job YAML file; relative script paths are taken from the current directory."""
    p = Path(path)
    data, lines = read_job_file(p)
    try:
        job = parse_job(data, str(p))
    except SpecError as e:
        line = None if e.field is None else lines.get(e.field)
        if line is None:
            raise
        raise SpecError(f"{p}: line {line}: {str(e)[len(str(p)) + 2:]}", e.field) from None
    job = job.with_absolute_paths(Path(os.getcwd()))
    if job.command is not None and job.kind == "elastic":
        script, _ = script_argv(job.command)
        if not Path(script).is_file():
            raise SpecError(f"{p}: command: no such script {script}")
    return job
