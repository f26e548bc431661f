"""Every setting of a simulation run, serialisable to config.json so a run can be reproduced.

One validation path: the command-line flags and a config file both become a ``SimConfig`` through
pydantic, so a wrong type (``"jobs": "ten"``), an unknown setting or an unknown model name is one
``ConfigError`` line naming the file and the setting, never a traceback.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from coddl.core.cluster import MAX_GPUS, MAX_GPUS_PER_NODE
from coddl.errors import ConfigError


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    trace: str = "philly"
    vc: str | None = None
    jobs: int | None = Field(default=None, ge=1)  # keep the first N jobs of the trace
    gpus: int = Field(default=64, ge=1, le=MAX_GPUS)
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)
    cluster: str | None = None  # a cluster-spec file; overrides gpus/gpus_per_node
    policies: list[str] = Field(default_factory=lambda: ["fifo", "srtf", "max-min"], min_length=1)
    seed: int = Field(default=1, ge=0)  # numpy's generators take non-negative seeds
    reconfig: Literal["zero", "in-place", "restart"] = "zero"  # sim/reconfig.py
    # grow a job only when the time it saves exceeds its restart cost under ``reconfig`` (policies/restarts.py);
    # off: resizes are decided as if free, as the reproductions assume
    charge_restarts: bool = False
    curves: str | None = None  # a curve CSV (model,num_gpus,time_per_iter_s); default: CoDDL curves
    # how a job's throughput is charged: by GPU count and type from the measured curves, or also by
    # placement with the analytic estimator (sim/estimator_rate.py); None: "estimator" with a
    # cluster spec, else "curves"
    rate: Literal["curves", "estimator"] | None = None
    allow_mixing: bool = False  # one job may span GPU types (it balances its per-GPU batch to speed)
    oversized: Literal["skip", "cap", "fail"] = "skip"  # jobs larger than the cluster (sim/fit.py)
    model_draw: Literal["seeded", "coddl-authors"] = "seeded"  # for trace jobs naming no model (sim/workload.py)
    queues: str | None = None  # a queue file: each policy also runs over these queues (coddl.queues)
    # many jobs per GPU (placement/sharing.py): exclusive, pack or aware[:min_retained=F]
    sharing: str = "exclusive"
    # which jobs may share: those whose spec says so, or also every trace job asking for one GPU
    shared_jobs: Literal["declared", "one-gpu"] = "declared"
    version: str = ""

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, specs: list[str]) -> list[str]:
        from coddl.policies.registry import make_policy

        for spec in specs:
            make_policy(spec)  # a PolicySpecError names the policy and the valid ones
        return specs

    @field_validator("sharing")
    @classmethod
    def _known_sharing(cls, rule: str, info: ValidationInfo) -> str:
        from coddl.placement.sharing import SharingRule
        from coddl.policies.registry import make_policy

        parsed = SharingRule.parse(rule)  # a SharingRuleError names the valid rules
        for spec in info.data.get("policies", ()):  # absent when a policy was refused already
            parsed.check_policy(make_policy(spec))
        return rule

    @property
    def rate_model(self) -> str:
        return self.rate or ("estimator" if self.cluster else "curves")

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), indent=2, sort_keys=True)

    @staticmethod
    def build(source: str = "", **settings: Any) -> "SimConfig":
        """A config from keyword settings (the CLI's flags), validated like a file; ``source``
        prefixes the error message (a file name; none for flags)."""
        return _validated(settings, source)

    @staticmethod
    def load(path: str | Path) -> "SimConfig":
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{p}: no such file") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p.name}:{e.lineno}: not valid JSON: {e.msg}") from None
        except (IsADirectoryError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: cannot read a config file ({type(e).__name__})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p.name}: expected a JSON object of settings")
        return _validated(raw, p.name)


def _validated(raw: dict[str, Any], source: str) -> SimConfig:
    try:
        return SimConfig.model_validate(raw)
    except ValidationError as e:
        raise _first_error(source, e) from None


def _choices(field: str) -> list[str]:
    """The values a Literal setting takes, in declaration order."""
    annotation = SimConfig.model_fields[field].annotation
    literals = [annotation] if typing.get_origin(annotation) is Literal else typing.get_args(annotation)
    return [str(v) for lit in literals if typing.get_origin(lit) is Literal for v in typing.get_args(lit)]


def _first_error(source: str, err: ValidationError) -> ConfigError:
    e = err.errors()[0]
    field = ".".join(str(x) for x in e["loc"]) or "(top level)"
    where = f"{source}: {field}" if source else field
    got = e.get("input")
    if e["type"] == "extra_forbidden":
        return ConfigError(f"{where}: unknown setting; valid: {', '.join(SimConfig.model_fields)}")
    if e["type"] == "value_error":  # a validator's own message (e.g. an unknown policy)
        return ConfigError(f"{where}: {e['ctx']['error']}")
    if e["type"] == "literal_error":
        return ConfigError(f"{where}: unknown value {got!r}; valid: {', '.join(_choices(e['loc'][0]))}")
    shown = repr(got) if isinstance(got, str) else got
    msg = e["msg"][0].lower() + e["msg"][1:]
    return ConfigError(f"{where}: {msg}, got {shown}")
