"""Policy registry: name → class, and parsing of ``name:key=value,...`` specs from the CLI.

Adding a policy touches one file: a module in ``coddl/policies/`` whose class carries ``@register``
is found by scanning the package, so neither this registry nor the engine changes. A third-party
package adds one the same way from outside the tree, by naming its module under the
``coddl.policies`` entry-point group in its own ``pyproject.toml``::

    [project.entry-points."coddl.policies"]
    my-policy = "my_package.my_policy"

Loading the module runs its ``@register``; the entry point's name is only a label.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import pkgutil
import typing
from typing import Any

from coddl.policies.base import Policy

_REGISTRY: dict[str, type[Policy]] = {}
ENTRY_POINT_GROUP = "coddl.policies"
_loaded = False


class PolicySpecError(ValueError):
    """A policy name or parameter the user typed is not valid; the message lists the valid ones."""


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make ``cls`` available under ``cls.name``. Two different classes claiming one
    name is an error, not a silent override (a plug-in must not replace a built-in by accident)."""
    held = _REGISTRY.get(cls.name)
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise PolicySpecError(f"policy name {cls.name!r} is taken by {held.__module__}.{held.__qualname__}; "
                              f"{cls.__module__}.{cls.__qualname__} must use another")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    """Import every module of this package, then every module named under the entry-point group
    (once per process: registration is a side effect of the import)."""
    global _loaded
    if _loaded:
        return
    import coddl.policies as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{package.__name__}.{info.name}")
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(ep.value.partition(":")[0])
        except ImportError as e:  # a broken plug-in names itself instead of hiding every policy
            raise PolicySpecError(f"policy plug-in {ep.name!r} ({ep.value}) cannot be imported: {e}") from None
    _loaded = True


def available() -> dict[str, type[Policy]]:
    _load()
    return dict(sorted(_REGISTRY.items()))


def _convert(field: dataclasses.Field, typ: Any, raw: str, policy: str) -> Any:
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
    hints = typing.get_type_hints(cls.Params)  # resolves ``from __future__ import annotations`` strings
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
        values[key] = _convert(fields[key], hints[key], raw.strip(), name)
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
