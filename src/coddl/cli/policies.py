"""``coddl policies``: every registered policy, elastic or rigid, its parameters and presets."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.table import Table

from coddl.policies.registry import available


def policies_cmd() -> None:
    """List the scheduling policies with their parameters."""
    t = Table(title="scheduling policies (set parameters with name:key=value+key=value)")
    for col in ("policy", "kind", "what it does", "parameters (default)", "presets"):
        t.add_column(col)
    for name, cls in available().items():
        params = ", ".join(f"{f.name}={f.default!r}" if f.default is not dataclasses.MISSING else f.name
                           for f in dataclasses.fields(cls.Params)) or "-"
        t.add_row(name, "elastic" if cls.elastic else "rigid", cls.summary, params, ", ".join(cls.presets) or "-")
    Console().print(t)
