"""The real system's commands: ``server start``/``stop``, ``submit``, ``jobs``, ``show``, ``profile``, ``logs``,
``cancel``, ``cluster status`` and ``demo`` (``token`` is ``coddl.cli.tokens``). ``register(app)`` adds
them to the ``coddl`` app.

Client commands find the server and token from ``--server``/``--token``, ``CODDL_SERVER``/
``CODDL_TOKEN`` or the state directory's ``client.json`` (see ``coddl.runtime.client``). User
mistakes (a bad job file, a bad option) exit 2 with one line; a request the server refuses exits 1
with the server's one-line reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from coddl.cli.errors import err_console, fail

console = Console()

ServerOpt = typer.Option(None, "--server", envvar="CODDL_SERVER", help="server URL (default: from the state dir)")
TokenOpt = typer.Option(None, "--token", envvar="CODDL_TOKEN", help="API token (default: from the state dir)")
StateOpt = typer.Option(None, "--state-dir", envvar="CODDL_STATE_DIR", help="state directory (default ~/.coddl)")


@contextmanager
def client_session(server: str | None, token: str | None, state_dir: Path | None) -> Iterator:
    """A client of the running server; a refusal (401/403/404/409, unreachable) becomes one red line
    and exit code 1."""
    from coddl.runtime.client import Client, ClientError, resolve

    try:
        with Client(resolve(server, token, state_dir)) as c:
            yield c
    except ClientError as e:
        err_console.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(1) from None


def server_start(
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs (slots) of the local executor (default 8); "
                                                            "a Ray cluster's are its nodes'"),
    executor: str = typer.Option("local", "--executor", help="local | ray"),
    cluster: Optional[Path] = typer.Option(None, "--cluster",
                                           help="cluster spec of this cluster (coddl cluster inspect): device types "
                                                "and calibrated links for the scheduler"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="HOST:PORT of the Ray cluster (ray executor)"),
    ray_connect_timeout_s: float = typer.Option(15.0, "--ray-connect-timeout-s",
                                                help="give up on an unreachable Ray address after this long"),
    policy: str = typer.Option("afs-p", "--policy", help="scheduling policy, e.g. afs-p or max-min (see `coddl policies`)"),
    sharing: Optional[str] = typer.Option(None, "--sharing",
                                          help="jobs that ask for part of a GPU (gpu_fraction < 1, shareable): pack "
                                               "them several to a GPU (pack, the default), only where the co-location "
                                               "model says each keeps enough of its speed (aware[:min_retained=F]), or "
                                               "one GPU each (exclusive, the default for a policy that assigns CPU "
                                               "cores)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
    port: int = typer.Option(8470, "--port", help="port to listen on (0: any free port)"),
    state_dir: Optional[Path] = StateOpt,
    database: Optional[str] = typer.Option(None, "--database", help="SQLAlchemy URL (default: SQLite in the state dir)"),
    checkpoint_s: float = typer.Option(30.0, "--checkpoint-s", help="seconds between a job's periodic checkpoints"),
    period_s: float = typer.Option(5.0, "--period-s", help="how often the policy re-runs with corrected throughputs"),
    job_inspection: bool = typer.Option(True, "--job-inspection/--no-job-inspection",
                                        help="time each elastic job's first steps and plan it on its own profile "
                                             "with the estimator (off: curves by model name, one correction factor)"),
    max_body_kib: int = typer.Option(256, "--max-body-kib", min=1, help="largest request body accepted (413 beyond)"),
    too_large: str = typer.Option("refuse", "--too-large",
                                  help="a job needing more GPUs than the cluster has: refuse (422) or hold (queued "
                                       "with the reason, for a server restarted on a larger cluster)"),
    lease_s: float = typer.Option(15.0, "--lease-s",
                                  help="how long the database stays this server's after it stops renewing "
                                       "(a paused VM); then another server may take over"),
    unsafe_no_isolation: bool = typer.Option(
        False, "--unsafe-no-isolation",
        help="run jobs with the server's own privileges: any job can read the tokens, the database and every "
             "other job (only for a single-user machine that cannot sandbox)"),
    unsafe_ray_without_auth: bool = typer.Option(
        False, "--unsafe-ray-without-auth",
        help="with --executor ray: accept a Ray cluster without token authentication although jobs are isolated; "
             "any job that reaches the cluster can then run code on its nodes as their Ray account"),
    queues: Optional[Path] = typer.Option(None, "--queues", help="a queue file (teams, quotas, cohorts): replaces the "
                                                                 "stored queues (`coddl queue` changes them live)"),
    account_prefix: str = typer.Option("coddl-", "--account-prefix",
                                       help="as root: the prefix of the Unix account created for each job owner "
                                            "(coddl-alice); give each installation on one host its own"),
) -> None:
    """Run the scheduler, its workers and the REST API until `coddl server stop` or ^C (jobs resume on the next start)."""
    import logging

    from coddl.placement.sharing import SharingRuleError
    from coddl.policies.registry import PolicySpecError
    from coddl.queues.model import QueueError
    from coddl.runtime.controller import ControllerSettings
    from coddl.errors import ConfigError
    from coddl.runtime.executors.driver import ExecutorSettings
    from coddl.runtime.lease import LeaseLost
    from coddl.runtime.limits import ApiLimits
    from coddl.runtime.paths import default_state_dir
    from coddl.runtime.server import ServerConfig, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        limits = ApiLimits(max_body_bytes=max_body_kib * 1024, too_large=too_large)  # type: ignore[arg-type]
    except ValueError as e:
        raise fail(f"--too-large / --max-body-kib: {e}") from None
    config = ServerConfig(state_dir=state_dir or default_state_dir(), gpus=gpus, executor=executor,
                          ray_address=ray_address, ray_connect_timeout_s=ray_connect_timeout_s, policy=policy, sharing=sharing,
                          host=host, port=port, database=database,
                          controller=ControllerSettings(period_s=period_s, job_inspection=job_inspection),
                          workers=ExecutorSettings(checkpoint_s=checkpoint_s), limits=limits, lease_s=lease_s,
                          isolate=not unsafe_no_isolation, queues=queues, cluster_spec=cluster,
                          account_prefix=account_prefix)
    if unsafe_no_isolation:
        err_console.print("[bold red]warning:[/bold red] --unsafe-no-isolation: every job runs with the server's "
                          "privileges and can read its tokens, its database and every other job")
    if unsafe_ray_without_auth:
        import os

        from coddl.runtime.executors.ray import UNSAFE_WITHOUT_AUTH

        os.environ[UNSAFE_WITHOUT_AUTH] = "1"  # read by the Ray executor; never passed on to a job
        err_console.print("[bold red]warning:[/bold red] --unsafe-ray-without-auth: a Ray cluster without token "
                          "authentication lets any job that reaches it run code on its nodes as their Ray account",
                          soft_wrap=True)
    if executor == "ray" and not unsafe_no_isolation:
        err_console.print("[yellow]warning:[/yellow] on Ray, elastic jobs and command gangs across nodes run in the "
                          "hosts' network: other jobs can reach their collectives, and such a gang's MASTER_PORT",
                          soft_wrap=True)
    try:
        serve(config, announce=console.print, step=_startup_step)
    except (ConfigError, PolicySpecError, QueueError) as e:
        raise fail(str(e)) from None
    except SharingRuleError as e:
        raise fail(f"--sharing: {e}") from None
    except LeaseLost as e:
        err_console.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(1) from None


@contextmanager
def _startup_step(what: str) -> Iterator[None]:
    """One step of the server's start-up: a spinner while it runs, then a line with its duration."""
    import time

    t0 = time.perf_counter()
    with console.status(f"{what}…"):
        yield
    console.print(f"[green]✓[/green] {escape(what)} [dim]({time.perf_counter() - t0:.1f} s)[/dim]")


def server_stop(state_dir: Optional[Path] = StateOpt,
                timeout_s: float = typer.Option(120.0, "--timeout-s",
                                                help="how long to wait for the jobs to checkpoint and stop")) -> None:
    """Stop the server of a state directory gracefully (each job checkpoints; they resume at the next start)."""
    import os
    import signal
    import time

    from coddl.runtime.lease import is_locked, lock_holder
    from coddl.runtime.paths import default_state_dir
    from coddl.waiting import WaitTimeout, wait_until

    sd = state_dir or default_state_dir()
    pid = lock_holder(sd)
    if pid is None:
        err_console.print(f"[red]error:[/red] no coddl server is running on {escape(str(sd))}", soft_wrap=True)
        raise typer.Exit(1)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        err_console.print(f"[red]error:[/red] no coddl server is running on {escape(str(sd))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except PermissionError:
        raise fail(f"the server of {sd} (pid {pid}) belongs to another user") from None
    t0 = time.monotonic()
    with console.status(f"stopping the server (pid {pid}): jobs checkpoint and their workers exit…"):
        try:
            wait_until(lambda: not is_locked(sd), timeout_s, "the server did not stop", interval=0.2)
        except WaitTimeout:
            err_console.print(f"[red]error:[/red] the server (pid {pid}) is still stopping after "
                              f"{timeout_s:.0f} s; see its log", soft_wrap=True)
            raise typer.Exit(1) from None
    console.print(f"stopped the server of {sd} (pid {pid}) in {time.monotonic() - t0:.1f} s")


def submit(job_file: Path = typer.Argument(..., help="job YAML"), server: Optional[str] = ServerOpt,
           token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Submit a job file."""
    from coddl.runtime.spec import SpecError, load_job

    try:
        job = load_job(job_file)
    except SpecError as e:
        raise fail(str(e)) from None
    with client_session(server, token, state_dir) as c:
        row = c.submit(job)
    console.print(f"submitted job [bold]{row['id']}[/bold] ({escape(row['name'])}, user {escape(row['owner'])})")
    if row.get("message"):  # held: it can never fit this cluster
        console.print(f"[yellow]{escape(row['message'])}[/yellow]")


def jobs(user: Optional[str] = typer.Option(None, "--user", help="only this user's jobs (admins: anyone's)"),
         status: Optional[str] = typer.Option(None, "--status", help="only these states, e.g. queued,running"),
         limit: int = typer.Option(1000, "--limit", min=1, help="show the newest N jobs"),
         all_: bool = typer.Option(False, "--all", help="show every job, fetched a page at a time"),
         before: Optional[int] = typer.Option(None, "--before", min=1, help="only jobs with a smaller id (older)"),
         server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt,
         state_dir: Optional[Path] = StateOpt) -> None:
    """List your jobs (an admin sees everyone's), oldest first."""
    from coddl.runtime.render import jobs_table

    statuses = tuple(s.strip() for s in status.split(",") if s.strip()) if status else ()
    with client_session(server, token, state_dir) as c:
        rows, more = c.newest_jobs(None if all_ else limit, before, user, statuses)
    console.print(jobs_table(rows, width=console.width) if rows else "no jobs")
    if more:
        err_console.print(f"the newest {len(rows)} shown; older ones: --before {rows[0]['id']}, or --all",
                          markup=False)


def show(job_id: int = typer.Argument(..., metavar="JOB"), server: Optional[str] = ServerOpt,
         token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """One job: its state, progress, loss and history (resizes with their latency)."""
    from coddl.runtime.render import job_view

    with client_session(server, token, state_dir) as c:
        job = c.job(job_id)
    console.print(job_view(job))


def profile(job_id: int = typer.Argument(..., metavar="JOB"),
            out: Optional[Path] = typer.Option(None, "--out", help="also write its measured rows as a profile "
                                                                 "table (.csv, .csv.gz, .parquet) for coddl estimate"),
            server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt,
            state_dir: Optional[Path] = StateOpt) -> None:
    """A job's throughput profile: what its first steps measured, the estimator's belief after the
    measured steps since, and the curve the scheduler plans it on."""
    from coddl.perf.table import ProfileError, ProfileTable, write_profiles
    from coddl.runtime.render import profile_view

    with client_session(server, token, state_dir) as c:
        record = c.profile(job_id)
    console.print(profile_view(job_id, record))
    if out is not None:
        try:
            n = write_profiles(ProfileTable.build([*record["profile"], *record["measured"]]), out)
        except ProfileError as e:
            fail(str(e))
        console.print(f"wrote {n} rows to {escape(str(out))}")


def logs(job_id: int = typer.Argument(..., metavar="JOB"),
         follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
         server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt,
         state_dir: Optional[Path] = StateOpt) -> None:
    """Print a job's worker output, each line tagged with its worker."""
    try:
        with client_session(server, token, state_dir) as c:
            for line in c.logs(job_id, follow):
                typer.echo(line)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def cancel(job_id: int = typer.Argument(..., metavar="JOB"), server: Optional[str] = ServerOpt,
           token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Cancel a job (it stops at its next step)."""
    with client_session(server, token, state_dir) as c:
        row = c.cancel(job_id)
    console.print(f"cancelling job {row['id']} ({row['name']})")


def cluster_status(server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt,
                   state_dir: Optional[Path] = StateOpt) -> None:
    """The live cluster: nodes, which job holds each GPU, jobs by state."""
    from coddl.runtime.render import cluster_view

    with client_session(server, token, state_dir) as c:
        view = c.cluster()
    console.print(cluster_view(view))


def demo(policy: str = typer.Option("afs-p", "--policy", help="scheduling policy"),
         examples: Optional[Path] = typer.Option(None, "--examples", help="directory with train_mlp.py and train_cnn.py"),
         nodes: int = typer.Option(1, "--nodes", min=1, help="2 or more: on a multi-node Ray testbed on this machine "
                                                            "(root; coddl testbed), 2 slots per node"),
         bandwidth: str = typer.Option("200mbit", "--bandwidth", help="with --nodes: each node's link rate (tc units)"),
         ray_address: Optional[str] = typer.Option(None, "--ray-address", help="run on this Ray cluster (HOST:PORT) "
                                                                               "with the Ray executor, from one of its nodes")) -> None:
    """Six real training jobs on 4 logical GPUs, re-divided live as they arrive and finish (< 3 min)."""
    from coddl.policies.registry import PolicySpecError, make_policy
    from coddl.runtime.demo import run_demo, run_on_testbed, summary
    from coddl.errors import ConfigError
    from coddl.runtime.testbed.netns import TestbedError

    try:
        if nodes > 1:
            if ray_address:
                raise ConfigError("--nodes builds its own Ray cluster: give --nodes or --ray-address, not both")
            make_policy(policy)  # a bad policy fails here, before a testbed is built
            code = run_on_testbed(console, nodes, bandwidth, policy, examples)
            if code:
                raise typer.Exit(code)
            return
        result = run_demo(console, policy=policy, examples=examples, ray_address=ray_address)
    except (ConfigError, PolicySpecError, TestbedError, ValueError) as e:
        raise fail(str(e)) from None
    console.print(summary(result))


def register(app: typer.Typer) -> None:
    """Add the real system's commands to ``app``; ``cluster status`` joins an existing ``cluster``
    group (the cluster-spec commands) or becomes ``cluster`` when there is none."""
    server_app = typer.Typer(help="run the coddl server", no_args_is_help=True, add_completion=False,
                             pretty_exceptions_enable=False)
    server_app.command("start")(server_start)
    server_app.command("stop")(server_stop)
    app.add_typer(server_app, name="server")
    for name, fn in (("submit", submit), ("jobs", jobs), ("show", show), ("profile", profile), ("logs", logs),
                     ("cancel", cancel), ("demo", demo)):
        app.command(name)(fn)
    group = next((g for g in app.registered_groups if g.name == "cluster"), None)
    if group is not None and group.typer_instance is not None:
        group.typer_instance.command("status")(cluster_status)
    else:
        app.command("cluster")(cluster_status)
