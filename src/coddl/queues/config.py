"""The queue file (YAML) and the queue requests of the API, validated by pydantic: a mistake is one line
naming the file, the line and the field, e.g.
``queues.yaml: line 7: queues.1.nominal_gpus: must be >= 0, got -2``.

```yaml
queues:
  - name: vision            # 1-64 letters, digits, '.', '_' or '-'
    cohort: lab             # queues of one cohort lend each other what they do not use
    nominal_gpus: 16        # the team's own GPUs, given back within one decision when it wants them
    borrowing_limit_gpus: 8 # at most this many GPUs beyond its quota (default: no limit)
    lending_limit_gpus: 12  # lend at most this many of its unused GPUs (default: all of them)
    nominal_cpus: 96        # default: the GPU quota's share of the cluster's cores
    weight: 2               # fair-sharing weight for the borrowed part (default 1)
    users: [alice, bob]     # coddl users (job owners)
    accounts: [6c71a0]      # trace accounts: Slurm accounts, Philly virtual clusters
  - name: default           # everyone else; its quota is the GPUs no other queue has, unless given
    cohort: lab
```
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from coddl.queues.model import Queue, QueueError, QueueSet
from coddl.runtime.limits import MAX_STORE_INT
from coddl.runtime.spec import SpecError, StoredInput, describe, user_name_problem, validate
from coddl.runtime.text import short
from coddl.runtime.yaml_safe import YamlFileError
from coddl.runtime.yaml_safe import read_file as read_yaml_file

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_QUEUES = 1000
MAX_MEMBERS = 10_000
MAX_FILE_BYTES = 1 << 20


def _amount(description: str) -> Any:
    return Field(None, ge=0, le=MAX_STORE_INT, strict=True, description=description)


def _name_problem(v: str) -> str | None:
    if not _NAME.fullmatch(v):
        return f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, got {short(v)}"
    return None


class QueueFields(StoredInput):
    """A queue's settings (Kueue's ClusterQueue: nominal quota, cohort, borrowing and lending limits,
    fair-sharing weight) and who belongs to it."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="QueueSettings")

    cohort: str | None = Field(None, description="queues of one cohort lend each other their unused quota")
    nominal_gpus: int | None = _amount("the queue's own GPUs (required, except for 'default': the GPUs no "
                                       "other queue has)")
    borrowing_limit_gpus: int | None = _amount("the most GPUs it may borrow beyond its quota (default: no limit)")
    lending_limit_gpus: int | None = _amount("the most of its unused GPUs it lends (default: all)")
    nominal_cpus: int | None = _amount("its own CPU cores (default: its GPU quota's share of the cores)")
    borrowing_limit_cpus: int | None = _amount("the most cores it may borrow (default: no limit)")
    lending_limit_cpus: int | None = _amount("the most of its unused cores it lends (default: all)")
    weight: float = Field(1.0, ge=0, le=1e6, allow_inf_nan=False,
                          description="fair-sharing weight of its part of the borrowed GPUs (0: only what "
                                      "nobody else wants)")
    users: list[str] = Field(default_factory=list, max_length=MAX_MEMBERS, description="its users (job owners)")
    accounts: list[str] = Field(default_factory=list, max_length=MAX_MEMBERS,
                                description="trace accounts that belong to it (Slurm accounts, Philly VCs)")

    @field_validator("cohort")
    @classmethod
    def _cohort(cls, v: str | None) -> str | None:
        problem = None if v is None else _name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"must be a number, got {short(v)}")
        return v

    @field_validator("users", "accounts")
    @classmethod
    def _members(cls, v: list[str]) -> list[str]:
        for name in v:
            problem = user_name_problem(name)
            if problem:
                raise ValueError(problem)
        return v

    def queue(self, name: str) -> Queue:
        return Queue(name=name, nominal_gpus=self.nominal_gpus, cohort=self.cohort,
                     borrowing_limit_gpus=self.borrowing_limit_gpus, lending_limit_gpus=self.lending_limit_gpus,
                     nominal_cpus=self.nominal_cpus, borrowing_limit_cpus=self.borrowing_limit_cpus,
                     lending_limit_cpus=self.lending_limit_cpus, weight=float(self.weight),
                     users=tuple(self.users), accounts=tuple(self.accounts))


class QueueModel(QueueFields):
    model_config = ConfigDict(extra="forbid", frozen=True, title="Queue")

    name: str = Field(description="1-64 letters, digits, '.', '_' or '-'", examples=["vision"])

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = _name_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class QueueFile(StoredInput):
    model_config = ConfigDict(extra="forbid", frozen=True, title="Queues")

    queues: list[QueueModel] = Field(max_length=MAX_QUEUES, description="the queues; users nobody lists are "
                                                                        "in 'default'")


def queue_set(models: list[QueueModel]) -> QueueSet:
    """The queue set of validated queues; QueueError names the queue and the setting at fault."""
    return QueueSet(tuple(m.queue(m.name) for m in models))


def validate_file(data: Any, source: str) -> QueueFile:
    """A decoded queue document validated; SpecError ``source: field: problem`` (an unknown field
    lists the valid fields of the queue it is in)."""
    if not isinstance(data, dict):
        return validate(QueueFile, data, source, what="queue file")  # the 'expected a mapping' error
    try:
        return QueueFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        fields = QueueModel.model_fields if len(err["loc"]) >= 3 and err["loc"][0] == "queues" else QueueFile.model_fields
        field, message = describe(err, fields)
        raise SpecError(f"{source}: {field}: {message}" if field else f"{source}: {message}", field or None) from None


def parse_queues(data: Any, source: str) -> QueueSet:
    """A decoded queue document (``{"queues": [...]}``) as a QueueSet, or QueueError naming the field."""
    try:
        doc = validate_file(data, source)
    except SpecError as e:
        raise QueueError(str(e)) from None
    return queue_set(doc.queues)


def load_queues(path: Path | str) -> QueueSet:
    """Read a queue file; every error is ``FILE: line N: field: problem``."""
    p = Path(path)
    try:
        data, lines = read_yaml_file(p, MAX_FILE_BYTES, "a queue file", "a mapping with a list of queues", _text_at)
    except YamlFileError as e:
        raise QueueError(str(e)) from None
    try:
        doc = validate_file(data, str(p))
    except SpecError as e:
        line = lines.get(e.field or "")
        if line is None and e.field:  # a missing field: the line of the queue it is missing from
            line = lines.get(".".join(e.field.split(".")[:2]) + ".name")
        raise QueueError(f"{p}: line {line}: {str(e)[len(str(p)) + 2:]}" if line else str(e)) from None
    try:
        return queue_set(doc.queues)
    except QueueError as e:
        line = None if e.queue is None else lines.get(f"queues.{e.queue}.{e.field}", lines.get(f"queues.{e.queue}.name"))
        raise QueueError(f"{p}: line {line}: {e}" if line else f"{p}: {e}") from None


def _text_at(path: tuple[str | int, ...]) -> bool:
    """Names are text as written (a user called ``no`` or ``1e3`` stays that name)."""
    return (len(path) == 3 and path[2] in ("name", "cohort")) or (len(path) == 4 and path[2] in ("users", "accounts"))


def dump_queues(queues: QueueSet) -> dict:
    """The queue document of ``queues`` (the implicit ``default`` left out): what ``load_queues`` reads."""
    return {"queues": [{k: v for k, v in q.as_json().items() if v not in (None, [], ())}
                       for q in queues.configured]}

