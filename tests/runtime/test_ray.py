"""The same job end to end on the Ray executor: a real two-node Ray cluster on loopback (token auth
on, 2 logical GPUs per node), ``coddl server start --executor ray``, one node agent per node; and a
server without the cluster's token refused with one line."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from runtime_live import tiny_job

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    temp = tempfile.mkdtemp(prefix="cr", dir="/tmp")  # Ray's socket paths must stay short
    ray_env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
               "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": temp}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ray_cluster.py"))], env={**os.environ, **ray_env},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    timer = threading.Timer(180, proc.kill)
    timer.start()
    address = proc.stdout.readline().strip()
    timer.cancel()
    try:
        assert address.startswith("127.0.0.1:"), "the Ray cluster did not start"
        yield address, ray_env
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(temp, ignore_errors=True)


def test_a_job_runs_end_to_end_on_the_ray_executor(ray_cluster, server_factory):
    address, env = ray_cluster
    srv = server_factory(gpus=None, policy="max-min", extra=("--executor", "ray", "--ray-address", address), env=env)
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
    assert {s["world_size"] for s in job["samples"]} == {4}


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
