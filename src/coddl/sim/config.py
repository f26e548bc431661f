"""Every setting of a simulation run, serialisable to config.json so a run can be reproduced."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


class ConfigError(ValueError):
    """A config file or flag the user gave is not valid (one line; the CLI exits 2)."""


# How the simulator charges a job's throughput: by GPU count and type from the measured curves, or
# also by placement (nodes spanned, types mixed) with the analytic estimator (sim/estimator_rate.py).
RATE_MODELS = ("curves", "estimator")


@dataclass
class SimConfig:
    trace: str = "philly"
    vc: str | None = None
    jobs: int | None = None  # keep the first N jobs of the trace
    gpus: int = 64
    gpus_per_node: int = 8
    cluster: str | None = None  # a cluster-spec file; overrides gpus/gpus_per_node
    policies: list[str] = field(default_factory=lambda: ["fifo", "srtf", "max-min"])
    seed: int = 1
    reconfig: str = "zero"
    curves: str | None = None  # a curve CSV (model,num_gpus,time_per_iter_s); default: CoDDL curves
    rate: str | None = None  # a RATE_MODELS entry; None: "estimator" with a cluster spec, else "curves"
    allow_mixing: bool = False  # one job may span GPU types (it balances its per-GPU batch to speed)
    version: str = ""

    @property
    def rate_model(self) -> str:
        rate = self.rate or ("estimator" if self.cluster else "curves")
        if rate not in RATE_MODELS:
            raise ConfigError(f"rate: unknown rate model {rate!r}; valid: {', '.join(RATE_MODELS)}")
        return rate

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def load(path: str | Path) -> "SimConfig":
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{p}: no such file") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p.name}:{e.lineno}: not valid JSON: {e.msg}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p.name}: expected a JSON object of settings")
        known = {f.name: f for f in fields(SimConfig)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(f"{p.name}: {unknown[0]}: unknown setting; valid: {', '.join(known)}")
        cfg = SimConfig(**raw)
        if not isinstance(cfg.policies, list) or not all(isinstance(x, str) for x in cfg.policies):
            raise ConfigError(f"{p.name}: policies: expected a list of policy specs")
        for name in ("gpus", "gpus_per_node", "seed"):
            if not isinstance(getattr(cfg, name), int):
                raise ConfigError(f"{p.name}: {name}: expected an integer, got {getattr(cfg, name)!r}")
        if not isinstance(cfg.allow_mixing, bool):
            raise ConfigError(f"{p.name}: allow_mixing: expected true or false, got {cfg.allow_mixing!r}")
        return cfg
