"""``coddl token create|list|revoke``: API tokens, through the server (an admin token) or, with
``--offline``/``--database``, directly in the store — for an operator setting up users before the
server runs. A token is printed once, on stdout alone, so ``$(coddl token create alice)`` captures it."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from coddl.cli.errors import err_console, fail

app = typer.Typer(help="API tokens: create (optionally expiring), list, revoke", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
console = Console()

ServerOpt = typer.Option(None, "--server", envvar="CODDL_SERVER", help="server URL (default: from the state dir)")
TokenOpt = typer.Option(None, "--token", envvar="CODDL_TOKEN", help="an admin's API token (default: from the state dir)")
StateOpt = typer.Option(None, "--state-dir", envvar="CODDL_STATE_DIR", help="state directory (default ~/.coddl)")
OfflineOpt = typer.Option(False, "--offline", help="write to the store directly, not through the server")
DatabaseOpt = typer.Option(None, "--database", help="SQLAlchemy URL of the store to use directly (implies --offline)")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """``90m``, ``12h``, ``30d``, ``2w`` in seconds; raises ValueError with the accepted forms."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"--expires: expected a duration like 90m, 12h, 30d or 2w, got {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


class _Offline:
    """The same three operations on the store itself."""

    def __init__(self, store: Any, by: str) -> None:  # noqa: ANN401 - a Store (imported lazily)
        self.store, self.by = store, by

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        now = time.time()
        return [t.as_json(now) for t in self.store.list_tokens(user)]

    def create_token(self, user: str, admin: bool = False, expires_in_s: float | None = None) -> dict[str, Any]:
        token, view = self.store.issue_token(user, admin, None if expires_in_s is None else time.time() + expires_in_s)
        return {"token": token, **view.as_json(time.time())}

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        from coddl.runtime.store import LastAdmin

        if self.store.get_token(token_id) is None:
            raise fail(f"token {token_id}: no such token")
        try:
            return self.store.revoke_token(token_id, self.by).as_json(time.time())
        except LastAdmin as e:
            raise fail(str(e)) from None


@contextmanager
def _tokens(server: str | None, token: str | None, state_dir: Path | None, offline: bool,
            database: str | None) -> Iterator[Any]:
    if offline or database:
        import getpass

        from coddl.runtime.paths import default_state_dir
        from coddl.runtime.store import Store

        store = Store(database) if database else Store.for_state_dir(state_dir or default_state_dir())
        try:
            yield _Offline(store, getpass.getuser())
        finally:
            store.close()
        return
    from coddl.cli.server import client_session

    with client_session(server, token, state_dir) as c:
        yield c


@app.command("create")
def create(user: str = typer.Argument(..., help="who the token is for"),
           admin: bool = typer.Option(False, "--admin", help="may see and cancel every user's jobs, manage tokens"),
           expires: Optional[str] = typer.Option(None, "--expires", help="lifetime, e.g. 12h, 30d, 2w (default: never)"),
           server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt,
           offline: bool = OfflineOpt, database: Optional[str] = DatabaseOpt) -> None:
    """Create an API token (printed once; only its hash is stored)."""
    from coddl.runtime.spec import user_name_problem

    problem = user_name_problem(user)
    if problem is not None:
        raise fail(f"USER: {problem}")
    try:
        lifetime = None if expires is None else parse_duration(expires)
    except ValueError as e:
        raise fail(str(e)) from None
    with _tokens(server, token, state_dir, offline, database) as t:
        made = t.create_token(user, admin, lifetime)
    typer.echo(made["token"])
    until = f", expires {time.strftime('%Y-%m-%d %H:%M', time.localtime(made['expires_at']))}" if made["expires_at"] else ""
    err_console.print(f"token {made['id']} ({made['fingerprint']}) for {user}{' (admin)' if admin else ''}{until}",
                      markup=False)


@app.command("list")
def list_(user: Optional[str] = typer.Option(None, "--user", help="only this user's tokens"),
          server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt,
          offline: bool = OfflineOpt, database: Optional[str] = DatabaseOpt) -> None:
    """Every token: user, role, fingerprint, created, expires, state (admin only)."""
    from coddl.runtime.render import tokens_table

    with _tokens(server, token, state_dir, offline, database) as t:
        rows = t.tokens(user)
    console.print(tokens_table(rows) if rows else "no tokens")


@app.command("revoke")
def revoke(token_id: int = typer.Argument(..., metavar="ID", help="the token's id (see `coddl token list`)"),
           server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt,
           offline: bool = OfflineOpt, database: Optional[str] = DatabaseOpt) -> None:
    """Revoke a token: it stops working at once and stays listed as revoked (admin only)."""
    with _tokens(server, token, state_dir, offline, database) as t:
        row = t.revoke_token(token_id)
    console.print(f"token {row['id']} ({row['fingerprint']}, {row['user']}) revoked", markup=False)
