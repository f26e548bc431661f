"""Policy registry: name → class, and parsing of ``name:key=value,...`` specs from the CLI.

A new policy registers itself with ``@register`` in its own module; the engine never changes.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Any

from coddl.policies.base import Policy

_REGISTRY: dict[str, type[Policy]] = {}
_BUILTIN_MODULES = (
    "coddl.policies.fifo", "coddl.policies.srtf", "coddl.policies.maxmin", "coddl.policies.gavel",
    "coddl.policies.afs_l", "coddl.policies.afs_p", "coddl.policies.srsf", "coddl.policies.tiresias",
    "coddl.policies.gittins", "coddl.policies.optimus", "coddl.policies.themis",
    "coddl.policies.aiturbo",
)
_EXTRA_MODULES: list[str] = []


class PolicySpecError(ValueError):
    """A policy name or parameter the user typed is not valid; the message lists the valid ones."""


def register(cls: type[Policy]) -> type[Policy]:
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    for mod in (*_BUILTIN_MODULES, *_EXTRA_MODULES):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # a policy module not present in this build
            if e.name != mod:
                raise


def available() -> dict[str, type[Policy]]:
    _load()
    return dict(sorted(_REGISTRY.items()))


def _convert(field: dataclasses.Field, raw: str, policy: str) -> Any:
    typ = field.type
    if isinstance(typ, str):
        typ = eval(typ, vars(typing))  # noqa: S307 - annotations of our own dataclasses
    origin = typing.get_origin(typ)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if raw.lower() in ("none", "off", "null"):
            return None
        typ = args[0]
    try:
        if typ is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ in (int, float, str):
            return typ(raw)
        if typing.get_origin(typ) is tuple:
            inner = typing.get_args(typ)[0]
            return tuple(inner(x) for x in raw.split("/") if x)
    except ValueError:
        pass
    else:
        return raw
    raise PolicySpecError(f"{policy}: parameter {field.name}: expected {getattr(typ, '__name__', typ)}, got {raw!r}")


def make_policy(spec: str) -> Policy:
    """Build a policy from ``name`` or ``name:key=value,key=value`` (``preset=NAME`` picks a preset)."""
    name, _, rest = spec.strip().partition(":")
    pols = available()
    if name not in pols:
        raise PolicySpecError(f"unknown policy {name!r}; valid policies: {', '.join(pols)}")
    cls = pols[name]
    fields = {f.name: f for f in dataclasses.fields(cls.Params)}
    values: dict[str, Any] = {}
    pairs = [p for p in rest.split(";") if p] if ";" in rest else [p for p in rest.split("+") if p]
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq:
            raise PolicySpecError(f"{name}: expected key=value, got {pair!r}")
        if key == "preset":
            if raw not in cls.presets:
                valid = ", ".join(cls.presets) or "none"
                raise PolicySpecError(f"{name}: unknown preset {raw!r}; valid presets: {valid}")
            values.update(cls.presets[raw])
            continue
        if key not in fields:
            valid = ", ".join(fields) or "none"
            raise PolicySpecError(f"{name}: unknown parameter {key!r}; valid parameters: {valid}")
        values[key] = _convert(fields[key], raw.strip(), name)
    return cls(cls.Params(**values))


def split_policy_list(text: str) -> list[str]:
    """Split ``fifo,afs-p:slice=3600,tiresias-l:preset=paper+knob=4`` into policy specs: a comma
    starts a new policy unless the next item is a ``key=value`` of the current one."""
    specs: list[str] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if "=" in item and ":" not in item and specs:
            sep = "" if specs[-1].endswith(":") else ("+" if ":" in specs[-1] else ":")
            specs[-1] = f"{specs[-1]}{sep}{item}"
        else:
            specs.append(item)
    return specs
