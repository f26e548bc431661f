"""``coddl queue list|set|delete|apply``: the teams' queues on a running server (changes need an admin
token; the scheduler takes them at its next decision, and the store keeps them across restarts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from coddl.cli.errors import fail
from coddl.cli.server import ServerOpt, StateOpt, TokenOpt, client_session

app = typer.Typer(help="teams' queues: quotas, cohorts, borrowing and lending limits, members", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
console = Console()

_LIMIT = "GPUs (or cores); 'none' for no limit"


def queues_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="queues")
    for col in ("queue", "cohort", "quota", "in use", "borrowed", "limits (borrow/lend)", "weight", "running",
                "waiting", "members"):
        t.add_column(col, justify="left" if col in ("queue", "cohort", "members", "limits (borrow/lend)") else "right")
    for q in rows:
        def lim(v: int | None) -> str:
            return "-" if v is None else str(v)

        members = ", ".join([*q.get("users", []), *(f"account {a}" for a in q.get("accounts", []))])
        t.add_row(q["name"] + (" (the rest)" if q["implicit"] else ""), q["cohort"] or "-", str(q["quota_gpus"]),
                  str(q["gpus"]), str(q["borrowed_gpus"]),
                  f"{lim(q['borrowing_limit_gpus'])} / {lim(q['lending_limit_gpus'])}", f"{q['weight']:g}",
                  str(q["running"]), str(q["waiting"]), members or ("everyone else" if q["name"] == "default" else ""))
    return t


@app.command("list")
def list_(server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Every queue: its quota, what it holds and borrows now, its jobs running and waiting."""
    with client_session(server, token, state_dir) as c:
        console.print(queues_table(c.queues()))


def _amount(text: str | None, option: str) -> Any:  # noqa: ANN401 - None, "none" or an int
    if text is None:
        return ...
    if text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise fail(f"{option}: expected a whole number or 'none', got {text!r}") from None
    return value


@app.command("set")
def set_(name: str = typer.Argument(..., help="the queue (created if it does not exist)"),
         nominal_gpus: Optional[str] = typer.Option(None, "--nominal-gpus", help="the team's own GPUs"),
         cohort: Optional[str] = typer.Option(None, "--cohort", help="its cohort ('none': none)"),
         borrowing_limit_gpus: Optional[str] = typer.Option(None, "--borrowing-limit-gpus", help=_LIMIT),
         lending_limit_gpus: Optional[str] = typer.Option(None, "--lending-limit-gpus", help=_LIMIT),
         nominal_cpus: Optional[str] = typer.Option(None, "--nominal-cpus", help="its own cores ('none': the GPU "
                                                                                 "quota's share)"),
         weight: Optional[float] = typer.Option(None, "--weight", help="fair-sharing weight of the borrowed part"),
         users: Optional[str] = typer.Option(None, "--users", help="comma-separated users (replaces the list)"),
         accounts: Optional[str] = typer.Option(None, "--accounts", help="comma-separated accounts (replaces the list)"),
         server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Create a queue or change the settings given (admin only); the others stay as they are."""
    changes = {"nominal_gpus": _amount(nominal_gpus, "--nominal-gpus"),
               "borrowing_limit_gpus": _amount(borrowing_limit_gpus, "--borrowing-limit-gpus"),
               "lending_limit_gpus": _amount(lending_limit_gpus, "--lending-limit-gpus"),
               "nominal_cpus": _amount(nominal_cpus, "--nominal-cpus"),
               "cohort": ... if cohort is None else (None if cohort.lower() == "none" else cohort),
               "weight": ... if weight is None else weight,
               "users": ... if users is None else [u.strip() for u in users.split(",") if u.strip()],
               "accounts": ... if accounts is None else [a.strip() for a in accounts.split(",") if a.strip()]}
    with client_session(server, token, state_dir) as c:
        current = next((q for q in c.queues() if q["name"] == name and not q["implicit"]), None)
        settings = {k: current[k] for k in changes if current is not None and k in current}
        settings.update({k: v for k, v in changes.items() if v is not ...})
        rows = c.put_queue(name, settings)
    console.print(queues_table(rows))


@app.command("delete")
def delete(name: str = typer.Argument(..., help="the queue; its users fall back to 'default'"),
           server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Delete a queue (admin only)."""
    with client_session(server, token, state_dir) as c:
        console.print(queues_table(c.delete_queue(name)))


@app.command("apply")
def apply(file: Path = typer.Argument(..., help="a queue file (YAML)"), server: Optional[str] = ServerOpt,
          token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Replace every queue with a queue file's (admin only); checked here first, line by line."""
    from coddl.queues.config import dump_queues, load_queues
    from coddl.queues.model import QueueError

    try:
        queues = load_queues(file)
    except QueueError as e:
        raise fail(str(e)) from None
    with client_session(server, token, state_dir) as c:
        console.print(queues_table(c.put_queues(dump_queues(queues))))
