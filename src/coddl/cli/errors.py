"""User mistakes become one red line and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import typer
from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True, highlight=False)


def user_error_types() -> tuple[type[BaseException], ...]:
    from coddl.placement.sharing import SharingRuleError
    from coddl.policies.registry import PolicySpecError
    from coddl.queues.model import QueueError
    from coddl.errors import ConfigError
    from coddl.traces.model import TraceError

    types: list[type[BaseException]] = [TraceError, ConfigError, PolicySpecError, QueueError, SharingRuleError]
    try:
        from coddl.clusterspec import ClusterSpecError

        types.append(ClusterSpecError)
    except ImportError:  # cluster specs are optional in minimal installs
        pass
    return tuple(types)


def fail(message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except user_error_types() as e:
        raise fail(str(e)) from None
    except FileNotFoundError as e:
        raise fail(f"{e.filename}: no such file") from None
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
