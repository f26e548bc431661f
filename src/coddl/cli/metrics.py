"""``coddl metrics token``: the read-only token a Prometheus server scrapes ``/metrics`` with."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from coddl.cli.errors import err_console

app = typer.Typer(help="Prometheus metrics of the live cluster", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)


@app.command("token")
def metrics_token(
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", envvar="CODDL_STATE_DIR",
                                             help="state directory (default ~/.coddl)"),
    database: Optional[str] = typer.Option(None, "--database", help="SQLAlchemy URL (default: the state dir's)"),
) -> None:
    """Create the metrics token (printed once; it replaces the previous one). It reads /metrics and
    nothing else: put it in Prometheus's `authorization: {credentials_file: ...}`."""
    from coddl.runtime.metrics import create_metrics_token
    from coddl.runtime.paths import default_state_dir
    from coddl.runtime.store import Store, sqlite_url

    sd = state_dir or default_state_dir()
    store = Store(database) if database else Store.for_state_dir(sd)
    try:
        typer.echo(create_metrics_token(store))
    finally:
        store.close()
    err_console.print(f"metrics token stored in {database or sqlite_url(sd)} (any earlier one no longer works)")
