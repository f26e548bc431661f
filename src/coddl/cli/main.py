"""``coddl``: the command-line entry point. Each command group lives in its own module."""

from __future__ import annotations

import typer

from coddl.cli.policies import policies_cmd
from coddl.cli.simulate import simulate_cmd

app = typer.Typer(help="coddl: elastic GPU-cluster scheduling for deep-learning training, and its simulator.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.command("simulate")(simulate_cmd)
app.command("policies")(policies_cmd)


def _mount() -> None:
    from coddl.cli import trace

    app.add_typer(trace.app, name="trace", help="inspect, convert and export traces")


_mount()


def main() -> None:
    app()
