"""Command jobs on a real server: a torchrun-style gloo script (``tests/elastic/gang_script.py``) that
knows nothing of coddl runs as a gang with torchrun's environment, as its owner's account and in its
job directory; being restartable, the scheduler shrinks it by restart when another job arrives (every
rank stops at one step on SIGTERM, the new gang resumes from the script's own checkpoint) and it
finishes; a rigid one is cancelled with SIGTERM and its ranks stop cleanly.

On a root server each gang runs in a network namespace of its own: while it trains, neither root on
the host nor another account reaches its ``TCPStore`` on ``MASTER_PORT`` (the same attempts reach a
``TCPStore`` on the host's loopback), and once the gang has stopped its namespace is gone. An elastic
job there gets the same: its workers' collectives listen in a namespace of the job's own, which the
host cannot reach, and it trains to its end with its store served inside it."""

from __future__ import annotations

import datetime
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from runtime_live import Server, netns_identity, readable, tiny_job, wait_for, wait_netns_gone

from coddl.runtime.restart_cost import COLD_START_S

pytestmark = pytest.mark.slow

SCRIPT = readable(Path(__file__).resolve().parents[1] / "elastic" / "gang_script.py")
STEPS = 400


def starts(job_dir: Path) -> list[dict]:
    path = job_dir / "starts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


ROOT = os.geteuid() == 0
HOST_NETNS = os.stat("/proc/self/ns/net").st_ino
# a plain connection as another account (nobody), with the system's Python (no torch to import)
SYSTEM_PYTHON = "/usr/bin/python3"
CONNECT = ("import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()\n"
           "except OSError as e:\n    sys.exit(f'refused: {e}')")
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
CAN_RUN_AS_NOBODY = ROOT and bool(shutil.which("setpriv")) and os.access(SYSTEM_PYTHON, os.X_OK)


def reaches_store(port: int) -> bool:
    """Root on the host, as a TCPStore client of 127.0.0.1:``port`` (a store there has no authentication)."""
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=2))
        store.set("intruder", "was here")
        return True
    except (RuntimeError, ValueError):  # DistNetworkError / DistStoreError: nothing, or not a store
        return False


def nobody_connects(port: int) -> bool:
    r = subprocess.run((*AS_NOBODY, SYSTEM_PYTHON, "-c", CONNECT, str(port)), capture_output=True, text=True,
                       timeout=60, cwd="/")
    assert r.returncode == 0 or "refused:" in r.stderr, r.stderr  # it ran, and either connected or not
    return r.returncode == 0


def assert_own_network(ranks: list[dict]) -> tuple[int, int]:
    """Every rank of one gang in one namespace of the gang's own, with only lo; returns its inode and
    cookie (see ``runtime_live.netns_identity``)."""
    assert len({(s["netns"], s["netns_cookie"]) for s in ranks}) == 1, ranks
    ino = ranks[0]["netns"]
    assert ino != HOST_NETNS and all(s["interfaces"] == ["lo"] for s in ranks), ranks
    return ino, ranks[0]["netns_cookie"]


def command_job(name: str, steps: int, **fields) -> dict:  # noqa: ANN003
    return {"name": name, "kind": "command", "command": [sys.executable, str(SCRIPT)], "steps": steps,
            "model": "tiny", "env": {"STEPS": str(steps), "STEP_S": "0.05"}, "grace_s": 30, **fields}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("command") / "state", gpus=2, policy="max-min")
    yield s
    s.cleanup()


def test_a_restartable_command_job_is_shrunk_by_restart_and_finishes(srv):
    bob = srv.client(srv.token("bob"))
    a = srv.submit(command_job("torchrun-style", STEPS, restartable=True, min_gpus=1, max_gpus=2), bob)
    job_dir = srv.state_dir / "jobs" / str(a)
    first = wait_for(lambda: len(s := starts(job_dir)) == 2 and s, 120, "two ranks")
    for s in first:
        e = s["env"]
        assert e["WORLD_SIZE"] == "2" and e["LOCAL_RANK"] == e["RANK"] and e["MASTER_ADDR"] == "127.0.0.1"
        assert s["sum"] == 1.0 and s["cwd"] == str(job_dir)
        if os.geteuid() == 0:  # a root server runs it as bob's account
            assert pwd.getpwuid(s["uid"]).pw_name == srv.account("bob")
    assert sorted(s["env"]["CUDA_VISIBLE_DEVICES"] for s in first) == ["0", "1"]
    if ROOT:  # its rendezvous is its own: reachable by its two ranks (they met), by nobody on the host
        first_ns = assert_own_network(first)
        port = int(first[0]["env"]["MASTER_PORT"])
        assert not reaches_store(port), "root on the host wrote to the gang's TCPStore"
        if CAN_RUN_AS_NOBODY and port not in listening_ports(os.getpid()):  # else the port is another's now
            assert not nobody_connects(port), "another account connected to the gang's MASTER_PORT"
    # max-min: one GPU each, so a shrinks; the visitor stays until a's restart on one GPU has been seen
    # (on a loaded machine, starting Python and torch may take longer than a short visitor would run)
    b = srv.submit(tiny_job("visitor", steps=100_000, max_gpus=1))
    shrunk = wait_for(lambda: [s for s in starts(job_dir) if s["env"]["WORLD_SIZE"] == "1"], 120,
                      "the restart on one GPU")[0]
    assert shrunk["env"]["TORCHELASTIC_RESTART_COUNT"] == "1", starts(job_dir)
    if ROOT:  # the restart got a fresh namespace; the first one went with its gang
        assert assert_own_network([shrunk]) != first_ns
        wait_netns_gone(first_ns, 30, "the first gang's network namespace to go")
        assert not reaches_store(int(shrunk["env"]["MASTER_PORT"]))
    term = [(job_dir / f"term-{r}.txt").read_text().splitlines()[0].split() for r in (0, 1)]
    assert term[0] == term[1] == ["2", str(shrunk["from_step"])], term  # stopped together, resumed there
    assert srv.admin.delete(f"/jobs/{b}").status_code == 202  # then a grows back (a restart at two) and finishes
    done = srv.wait_job(a, lambda v: v["status"] == "finished", 240, "finished")
    assert json.loads((job_dir / "ckpt.json").read_text())["step"] == STEPS
    sizes = [int(s["env"]["WORLD_SIZE"]) for s in starts(job_dir) if s["env"]["RANK"] == "0"]
    assert sizes[:2] == [2, 1], sizes
    assert sizes[-1] == 2 and starts(job_dir)[-1]["from_step"] >= shrunk["from_step"], sizes
    assert [e["action"] for e in done["events"] if e["kind"] == "applied"][:3] == ["start", "shrink", "grow"]
    network = [e["detail"] for e in done["events"] if e["kind"] == "network"]
    assert len(network) == 1 and ("own network namespace" in network[0]) == ROOT, network  # one node throughout
    if ROOT:
        last = assert_own_network([s for s in starts(job_dir) if s["env"]["TORCHELASTIC_RESTART_COUNT"] ==
                                   starts(job_dir)[-1]["env"]["TORCHELASTIC_RESTART_COUNT"]])
        wait_netns_gone(last, 30, "the last gang's network namespace to go")
    # each restart was timed (SIGTERM to the new gang) and the scheduler charged the mean from then on:
    # the ranks stop at once on SIGTERM, far below the 30 s grace the first resize was charged
    restarts = [e["latency_s"] for e in done["events"] if e["kind"] == "applied" and e["action"] in ("shrink", "grow")]
    charged = [e["detail"] for e in done["events"] if e["kind"] == "restart-cost"]
    assert len(charged) == len(restarts) >= 2, charged
    for n, detail in enumerate(charged, 1):
        mean = sum(restarts[:n]) / n
        assert detail.startswith(f"{mean + COLD_START_S:.2f} s per resize: {mean:.2f} s from SIGTERM"), (detail, restarts)
    assert max(restarts) < 30


def test_a_rigid_command_job_runs_at_its_size_and_a_cancel_stops_it_with_sigterm(srv):
    bob = srv.client(srv.token("bob"))
    c = srv.submit(command_job("rigid", 100_000, min_gpus=2), bob)
    job_dir = srv.state_dir / "jobs" / str(c)
    wait_for(lambda: len(starts(job_dir)) == 2, 120, "two ranks")
    assert bob.delete(f"/jobs/{c}").status_code == 202
    srv.wait_job(c, lambda v: v["terminal"], 120, "cancelled")  # in the store at once; the ranks stop after
    files = [job_dir / f"term-{r}.txt" for r in (0, 1)]
    wait_for(lambda: all(f.exists() and f.read_text().endswith("\n") for f in files), 60, "both ranks to stop")
    term = [f.read_text().split() for f in files]
    assert term[0] == term[1] and term[0][0] == "2", term  # both ranks saw SIGTERM and stopped at one step
    assert srv.job(c)["status"] == "cancelled"
    if ROOT:
        wait_netns_gone(assert_own_network(starts(job_dir)), 30, "the cancelled gang's network namespace to go")


def test_the_intruders_reach_a_store_in_the_hosts_network():
    """The attempts above are real: a TCPStore on the host's loopback is reached by both."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert reaches_store(store.port) and store.get("intruder") == b"was here"
    if CAN_RUN_AS_NOBODY:
        assert nobody_connects(store.port)


def test_a_command_job_sees_nothing_of_the_server(srv):
    """The isolation of every job holds for a program too: the state directory shows only its own job."""
    token = json.loads((srv.state_dir / "client.json").read_text())["token"]
    probe = ('cat "$STATE/client.json"; head -c 16 "$STATE/coddl.db"; echo; ls "$STATE" "$STATE/jobs"; '
             'env | grep -c TOKEN; echo "cwd=$PWD"; echo probed')
    j = srv.submit({"name": "probe", "kind": "command", "command": ["bash", "-c", probe], "steps": 1, "model": "tiny",
                    "env": {"STATE": str(srv.state_dir)}}, srv.client(srv.token("mallory")))
    assert srv.wait_job(j, lambda v: v["terminal"], 120, "ended")["status"] == "finished"
    log = (srv.state_dir / "jobs" / str(j) / "logs" / "rank0.log").read_text()
    assert "probed" in log and token not in log and "SQLite" not in log, log
    assert f"cwd={srv.state_dir / 'jobs' / str(j)}" in log
    listed = log.split("jobs:")[1].split("\n0\n")[0].split()  # what `ls STATE/jobs` showed
    assert listed == [str(j)], log


def listening_ports(pid: int) -> set[int]:
    """The TCP ports listening in the network namespace of process ``pid`` (its /proc/PID/net/tcp)."""
    ports = set()
    for name in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{name}") as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A":  # LISTEN
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(not ROOT, reason="a network namespace per job needs a root server")
def test_an_elastic_jobs_collectives_are_its_own_on_a_root_server(srv):
    bob = srv.client(srv.token("bob"))
    j = srv.submit(tiny_job("elastic", steps=150, min_gpus=2, max_gpus=2), bob)
    running = srv.wait_job(j, lambda v: v["steps_done"] >= 5 and len(v["workers"]) == 2 and v, 120, "training")
    pids = [w["pid"] for w in running["workers"]]
    inos = {os.stat(f"/proc/{pid}/ns/net").st_ino for pid in pids}
    assert len(inos) == 1 and HOST_NETNS not in inos, inos  # both workers, one namespace, not the host's
    ns = netns_identity(next(iter(inos)))
    ports = listening_ports(pids[0])  # gloo's listeners and the job's store, in there
    assert ports, "nothing listens in the job's namespace"
    for port in ports - listening_ports(os.getpid()):  # a port also in use on the host is another's there
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    done = srv.wait_job(j, lambda v: v["terminal"], 180, "the end")
    assert done["status"] == "finished" and done["steps_done"] == 150, done["message"]
    wait_netns_gone(ns, 30, "the job's network namespace to go")
