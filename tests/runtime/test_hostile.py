"""Hostile jobs on a real server: a job must reach nothing of the server and nothing of other users.

Two real servers, each with a victim job of user bob and an attacker job of user mallory
(``hostile_job.py``, which tries every attack and reports each outcome):

- ``root``: the server runs as root (as in CI), so jobs run as their owners' dedicated accounts, in a
  sandbox that hides the state directory;
- ``unprivileged``: the server runs as an ordinary account (created here), so jobs share its uid and
  are kept apart by user namespaces alone.

The server process is given an admin token in ``CODDL_TOKEN``, as an operator's shell might, to see
that no worker inherits it. The suite ends with the server's own operations: a second server on the
same state directory is refused, and ``coddl server stop`` stops the first one gracefully.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from runtime_live import Server, coddl, readable, wait_for

pytestmark = pytest.mark.slow

HOSTILE = readable(Path(__file__).resolve().parent / "hostile_job.py")
ATTACKS = ("read_admin_token", "read_database", "read_token_digests", "read_other_users_spec",
           "read_other_users_logs", "read_other_users_checkpoint", "write_other_jobs_directory",
           "use_the_servers_credentials", "signal_the_server", "reach_the_fork_server", "write_other_jobs_store")
SERVER_ACCOUNT = f"cdsrv{os.urandom(3).hex()}"  # the unprivileged server's, created here and removed


def unprivileged_python(user: str) -> tuple[str, ...] | str:
    """An interpreter command running as ``user`` that imports coddl, or why there is none."""
    pw = pwd.getpwnam(user)
    setpriv = ("setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--", "env",
               f"PYTHONPATH={os.pathsep.join(p for p in sys.path if p)}")
    for python in dict.fromkeys((sys.executable, shutil.which("python3") or "", "/usr/bin/python3")):
        if not python or not os.path.exists(python):
            continue
        r = subprocess.run([*setpriv, python, "-c", "import torch, coddl.runtime.server"], capture_output=True,
                           timeout=120, cwd="/")
        if r.returncode == 0:
            return (*setpriv, python)
    from coddl.elastic.sandbox import _untraversable

    closed = sorted({b for p in sys.path if p and (b := _untraversable(p))})
    return (f"no Python interpreter that {user} may run can import coddl: "
            + (f"{', '.join(closed)} (mode 0700 or so) keeps other accounts out of the installation" if closed
               else "its installation is not readable by other accounts"))


def start_pair(root: Path, elsewhere: Path) -> dict[str, Server | str]:
    """The two servers (started side by side: each spends seconds importing torch); a server that
    cannot run here is replaced by the reason, and its tests skip with it. The unprivileged one lives
    in ``elsewhere`` (pytest's own temp dirs are private to root)."""
    servers: dict[str, Server | str] = {}
    (root / "root").mkdir()
    admin = coddl("token", "create", "operator", "--admin", "--offline", "--state-dir",
                  str(root / "root" / "state")).stdout.strip()
    assert admin, "could not create the operator's token"
    servers["root"] = Server(root / "root" / "state", gpus=3, env={"CODDL_TOKEN": admin}, wait=False)
    if os.geteuid() != 0:
        servers["unprivileged"] = "the test runs unprivileged: the root server above is then the unprivileged one"
    else:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", SERVER_ACCOUNT],
                       capture_output=True)
        python = unprivileged_python(SERVER_ACCOUNT)
        if isinstance(python, str):
            servers["unprivileged"] = python
        else:
            home = elsewhere / "unprivileged"
            for p in (home, home / "tmp", home / "state"):
                p.mkdir(parents=True)
            pw = pwd.getpwnam(SERVER_ACCOUNT)
            for p in (home, home / "tmp", home / "state"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            own = coddl("token", "create", "operator", "--admin", "--offline", "--state-dir", str(home / "state"),
                        prefix=python)
            servers["unprivileged"] = Server(home / "state", gpus=3, python=python, wait=False,
                                             env={"CODDL_TOKEN": own.stdout.strip(), "HOME": str(home)})
    for name, s in servers.items():
        if isinstance(s, Server):
            try:
                s.ready()
            except AssertionError as e:
                if "cannot confine jobs" not in str(e):
                    raise
                servers[name] = f"this kernel does not let an unprivileged server sandbox jobs: {str(e)[-300:]}"
    return servers


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    elsewhere = Path(tempfile.mkdtemp(prefix="coddl-hostile-"))
    os.chmod(elsewhere, 0o755)
    pair = start_pair(tmp_path_factory.mktemp("hostile"), elsewhere)
    yield pair
    for s in pair.values():
        if isinstance(s, Server):
            s.cleanup()
    shutil.rmtree(elsewhere, ignore_errors=True)
    if os.geteuid() == 0:
        wait_for(lambda: subprocess.run(["userdel", SERVER_ACCOUNT], capture_output=True).returncode in (0, 6), 30,
                 f"the account {SERVER_ACCOUNT} removed")  # 6: no such account (it could not be created)


VICTIM_STEPS = 200


def attack(servers: dict[str, Server]) -> dict[str, dict]:
    """On every server at once: bob's victim trains; once it has a checkpoint, mallory's attacker and a
    job that runs the CLI to mint itself an admin token; then everything must end well for bob."""
    victims, users = {}, {}
    for name, srv in servers.items():
        users[name] = srv.client(srv.token("bob")), srv.client(srv.token("mallory"))
        victims[name] = srv.submit({"name": "victim", "command": ["python", str(HOSTILE)], "steps": VICTIM_STEPS,
                                    "max_gpus": 1, "model": "tiny", "env": {"ROLE": "victim", "STEP_S": "0.05"}},
                                   users[name][0])
    attackers = {}
    for name, srv in servers.items():
        job_dir = srv.state_dir / "jobs" / str(victims[name])
        wait_for(lambda: (job_dir / "checkpoint.pt").is_file() and (job_dir / "store.txt").is_file(), 120,
                 "the victim's checkpoint and store address")
        env = {"ROLE": "attacker", "STATE": str(srv.state_dir), "VICTIM": str(victims[name]),
               "VICTIM_STORE": (job_dir / "store.txt").read_text(), "SERVER_PID": str(srv.proc.pid),
               "SERVER_URL": srv.url, "SERVER_TMP": str(srv.tmp)}
        mallory = users[name][1]
        attackers[name] = (
            srv.submit({"name": "attacker", "command": ["python", str(HOSTILE)], "steps": 1, "max_gpus": 1,
                        "model": "tiny", "env": env}, mallory),
            srv.submit({"name": "mint", "entrypoint": "coddl.cli.main:main", "steps": 1, "max_gpus": 1,
                        "args": ["token", "create", "mallory-admin", "--admin", "--offline", "--state-dir",
                                 str(srv.state_dir)]},
                       mallory))
    out = {}
    for name, srv in servers.items():
        attacker, cli = attackers[name]
        for j in (attacker, cli):
            srv.wait_job(j, lambda v: v["terminal"], 180, "ended")
        attacked = srv.state_dir / "jobs" / str(attacker)
        results = json.loads((attacked / "attacks.json").read_text()) if (attacked / "attacks.json").is_file() else {}
        victim = wait_for(lambda: (v := srv.job(victims[name]))["terminal"] and v, 240, "the victim's end")
        db = sqlite3.connect(f"file:{srv.state_dir / 'coddl.db'}?mode=ro", uri=True)
        try:
            minted = db.execute("SELECT count(*) FROM tokens WHERE user = 'mallory-admin'").fetchone()[0]
        finally:
            db.close()
        out[name] = {"results": results, "victim": victim, "attacker_dir": attacked, "minted": minted,
                     "bob": users[name][0]}
    return out


@pytest.fixture(scope="module")
def attacks(servers) -> dict[str, dict]:
    return attack({name: s for name, s in servers.items() if isinstance(s, Server)})


MODES = ("root", "unprivileged")


def outcome(servers, attacks, mode: str) -> dict:
    if isinstance(servers[mode], str):
        pytest.skip(servers[mode])
    return attacks[mode]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_hostile_job_cannot(servers, attacks, mode, attack):
    got = outcome(servers, attacks, mode)["results"]
    assert attack in got, f"the attacker did not report {attack!r}: {got}"
    assert not got[attack]["succeeded"], f"{attack} succeeded: {got[attack]['detail']}"


@pytest.mark.parametrize("mode", MODES)
def test_a_job_cannot_mint_a_token_through_the_cli_entry_point(servers, attacks, mode):
    got = outcome(servers, attacks, mode)
    assert got["minted"] == 0, "a job created a token in the server's database"


@pytest.mark.parametrize("mode", MODES)
def test_the_victim_trained_on_unharmed_and_its_directory_is_its_owners(servers, attacks, mode):
    got = outcome(servers, attacks, mode)
    victim = got["victim"]
    assert victim["status"] == "finished" and victim["steps_done"] == VICTIM_STEPS, victim["message"]
    assert "worker-lost" not in [e["kind"] for e in victim["events"]], victim["events"]
    if mode == "root" and os.geteuid() == 0:
        job_dir = servers[mode].state_dir / "jobs" / str(victim["id"])
        st = job_dir.stat()
        assert pwd.getpwuid(st.st_uid).pw_name == servers[mode].account("bob") and st.st_mode & 0o077 == 0
        log = job_dir / "logs" / "w0.log"
        assert log.stat().st_uid == st.st_uid and log.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_jobs_working_directory_is_its_job_directory(servers, attacks, mode):
    got = outcome(servers, attacks, mode)
    assert (got["attacker_dir"] / "cwd-marker").read_text() == "here"


def test_the_state_directory_and_its_secrets_are_private(servers, attacks):
    srv = servers["root"]
    state = srv.state_dir
    assert state.stat().st_mode & 0o777 == 0o700
    for name in ("coddl.db", "client.json", "server.json", "server.lock"):
        assert (state / name).stat().st_mode & 0o077 == 0, name


def test_a_second_server_on_the_same_state_directory_is_refused(servers, attacks):
    srv = servers["root"]
    r = coddl("server", "start", "--port", "0", "--state-dir", str(srv.state_dir), timeout=300)  # a loaded machine
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"another coddl server (pid {srv.proc.pid}" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_server_stop_checkpoints_the_jobs_and_leaves_no_worker(servers, attacks):
    srv = servers["root"]
    job = srv.submit({"name": "long", "command": ["python", str(HOSTILE)], "steps": 5000, "max_gpus": 2,
                      "model": "tiny", "env": {"ROLE": "victim", "STEP_S": "0.05"}}, attacks["root"]["bob"])
    running = srv.wait_job(job, lambda v: v["steps_done"] >= 20 and len(v["workers"]) >= 1, 120, "training")
    workers = [psutil.Process(w["pid"]) for w in running["workers"]]
    family = workers + [c for w in workers for c in w.children(recursive=True)]
    checkpoint = srv.state_dir / "jobs" / str(job) / "checkpoint.pt"
    before = checkpoint.stat().st_mtime if checkpoint.exists() else 0.0
    r = coddl("server", "stop", "--state-dir", str(srv.state_dir), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert srv.proc.wait(timeout=30) == 0
    assert checkpoint.stat().st_mtime > before  # rank 0 wrote one on the way out
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, f"workers left behind: {alive}"
    again = coddl("server", "stop", "--state-dir", str(srv.state_dir))
    assert again.returncode == 1 and "no coddl server is running" in again.stderr
