"""``coddl``: the command-line entry point. Each command group lives in its own module."""

from __future__ import annotations

import typer

from coddl.cli import cluster, estimate, experiment, metrics, queues, server, study, testbed, tokens, trace
from coddl.cli.policies import policies_cmd
from coddl.cli.replay import replay_cmd
from coddl.cli.simulate import simulate_cmd

app = typer.Typer(help="coddl: elastic GPU-cluster scheduling for deep-learning training, and its simulator.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.command("simulate")(simulate_cmd)
app.command("policies")(policies_cmd)
app.command("replay")(replay_cmd)
app.add_typer(trace.app, name="trace", help="inspect, convert and export traces")
app.add_typer(cluster.app, name="cluster", help="cluster specs and the live cluster")
app.add_typer(experiment.app, name="experiment", help="reproduce published comparisons")
app.add_typer(metrics.app, name="metrics", help="Prometheus metrics of the live cluster")
app.add_typer(estimate.app, name="estimate", help="throughput estimation: calibrate, predict, accuracy")
server.register(app)
app.add_typer(tokens.app, name="token")
app.add_typer(testbed.app, name="testbed")
app.add_typer(study.app, name="study")
app.add_typer(queues.app, name="queue", help="teams' queues: quotas, cohorts, limits, members (admins change them)")


def main() -> None:
    app()
