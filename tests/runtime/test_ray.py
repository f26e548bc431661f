"""The same job end to end on the Ray executor: a real two-node Ray cluster on loopback (token auth
on, 2 logical GPUs per node), ``coddl server start --executor ray``, one node agent per node; command
jobs there (a gang on one node, in its own network namespace on a root server, cancelled with
SIGTERM; a gang across both nodes, with torchrun's per-node ranks); and a server without the
cluster's token refused with one line."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from ray_cluster import loopback_cluster
from runtime_live import Server, tiny_job, wait_for, wait_netns_gone
from test_command_jobs import assert_own_network, command_job, reaches_store, starts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    with loopback_cluster({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}) as c:
        yield c


@pytest.fixture(scope="module")
def ray_server(ray_cluster, tmp_path_factory):
    address, env = ray_cluster
    srv = Server(tmp_path_factory.mktemp("ray") / "state", gpus=None, policy="max-min",
                 extra=("--executor", "ray", "--ray-address", address), env=env)
    yield srv
    srv.cleanup()


def test_a_job_runs_end_to_end_on_the_ray_executor(ray_server):
    srv = ray_server
    cluster = srv.admin.get("/cluster").json()
    assert cluster["executor"] == "ray" and cluster["total_gpus"] == 4
    assert [len(n["gpus"]) for n in cluster["nodes"]] == [2, 2]

    job_id = srv.submit(tiny_job("on-ray", steps=120, max_gpus=4, step_s=0.05))
    running = srv.wait_job(job_id, lambda j: len(j["workers"]) == 4, 180, "four workers")
    assert {w["node"] for w in running["workers"]} == {n["name"] for n in cluster["nodes"]}  # it spans both nodes
    job = srv.wait_job(job_id, lambda j: j["status"] == "finished", 240, "finished")
    assert job["steps_done"] == 120
    losses = [s["loss"] for s in job["samples"] if s["loss"] is not None]
    assert losses[-1] < 0.5 * losses[0]
    # it trained on all four GPUs; once inspected, its own curve (a fixed sleep per step: more GPUs do not
    # help) may rightly shrink it, and whether that comes before the end depends on the machine's load
    sizes = {s["world_size"] for s in job["samples"]}
    assert 4 in sizes and sizes <= {1, 2, 3, 4}, sizes
    shrinks = [e for e in job["events"] if e["kind"] == "planned" and e["action"] == "shrink"]
    assert sizes == {4} or shrinks, job["events"]
    # its first steps were inspected on the Ray nodes as on the local executor: a profile of its own
    profile = srv.admin.get(f"/jobs/{job_id}/profile")
    assert profile.status_code == 200, profile.text
    assert profile.json()["profile"] and any(e["kind"] == "inspected" for e in job["events"])


def test_command_jobs_run_on_the_ray_executor(ray_server):
    srv = ray_server
    bob = srv.client(srv.token("bob"))
    pair = srv.submit(command_job("pair", 100_000, min_gpus=2), bob)
    job_dir = srv.state_dir / "jobs" / str(pair)
    ranks = wait_for(lambda: len(s := starts(job_dir)) == 2 and s, 180, "two ranks")
    for s in ranks:  # one node: torchrun's single-node environment, meeting on loopback
        e = s["env"]
        assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"]) == ("2", "2", "127.0.0.1"), e
        assert e["LOCAL_RANK"] == e["RANK"] and e["TORCHELASTIC_RESTART_COUNT"] == "0" and s["sum"] == 1.0
    assert len({s["env"]["MASTER_PORT"] for s in ranks}) == 1
    if os.geteuid() == 0:  # the node's agent gave the gang its own network namespace
        ns = assert_own_network(ranks)
        assert not reaches_store(int(ranks[0]["env"]["MASTER_PORT"]))
    assert bob.delete(f"/jobs/{pair}").status_code == 202
    files = [job_dir / f"term-{r}.txt" for r in (0, 1)]
    wait_for(lambda: all(f.exists() and f.read_text().endswith("\n") for f in files), 60, "both ranks to stop")
    term = [f.read_text().split() for f in files]
    assert term[0] == term[1] and term[0][0] == "2", term  # SIGTERM reached both; they stopped at one step
    if os.geteuid() == 0:
        wait_netns_gone(ns, 30, "the gang's network namespace to go")

    wide = srv.submit(command_job("wide", 20, min_gpus=4), bob)  # both nodes: the hosts' network
    done = srv.wait_job(wide, lambda v: v["terminal"], 180, "the wide gang's end")
    assert done["status"] == "finished", done["message"]
    ranks = sorted(starts(srv.state_dir / "jobs" / str(wide)), key=lambda s: int(s["env"]["RANK"]))
    assert [s["env"]["GROUP_RANK"] for s in ranks] == ["0", "0", "1", "1"], ranks
    assert [s["env"]["LOCAL_RANK"] for s in ranks] == ["0", "1", "0", "1"]
    assert {s["env"]["LOCAL_WORLD_SIZE"] for s in ranks} == {"2"} and ranks[0]["sum"] == 6.0
    assert len({(s["env"]["MASTER_ADDR"], s["env"]["MASTER_PORT"]) for s in ranks}) == 1
    network = [e["detail"] for e in done["events"] if e["kind"] == "network"]
    assert network and "spans 2 nodes" in network[0], network


def test_a_server_without_the_clusters_token_is_refused_with_one_line(ray_cluster, tmp_path):
    """The cluster refuses the connection, which Ray retries until the connect timeout (with
    RAY_AUTH_MODE=token and no token, Ray itself refuses at once: the same line)."""
    address, cluster_env = ray_cluster
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update({k: v for k, v in cluster_env.items() if not k.startswith("RAY_AUTH")})
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "server", "start", "--executor", "ray", "--ray-address",
                        address, "--ray-connect-timeout-s", "3", "--state-dir", str(tmp_path), "--port", "0"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the Ray cluster at {address} ") and last.endswith(
        "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the cluster's token"), last
