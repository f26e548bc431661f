"""A job script for the hostile-job suite (``test_hostile.py``), run as a real job on a real server.

ROLE=victim: trains like ``tiny_job`` and publishes its store's address (not its key) in its job
directory, so that the test can tell the attacker where to knock.

ROLE=attacker: inside ``elastic.session()`` (a well-formed job), tries everything a job must not be
able to do — read the server's admin token, database, token digests, another user's spec, logs and
checkpoint, write into another job's directory, use the server's credentials, signal the server,
reach the worker pool's fork server, write to another job's coordination store — and writes what
happened to ``attacks.json`` in its job directory. Each entry: ``{"succeeded": bool, "detail": str}``;
an attack that raises counts as failed. It also leaves ``cwd-marker`` in its working directory.

Paths and addresses come from the environment: STATE (the server's state directory), VICTIM (its
job id), VICTIM_STORE (host:port), SERVER_PID, SERVER_URL, SERVER_TMP (the server's TMPDIR).
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import socket
import sqlite3
import time

import torch
from torch import nn

import coddl.elastic as elastic


def victim() -> None:
    with open(os.path.join(os.environ["CODDL_JOB_DIR"], "store.txt"), "w") as f:
        f.write(os.environ["CODDL_STORE_ADDR"])
    steps = int(os.environ.get("STEPS", "100"))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=gen)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    with elastic.session() as s:
        model = nn.Linear(8, 1)
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.05))
        for xb, yb in s.batches(data, global_batch=32, steps=steps):
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            time.sleep(float(os.environ.get("STEP_S", "0.05")))
            s.step(loss)
            if s.rank == 0 and s.steps_done % 20 == 0:
                print(f"victim step {s.steps_done} loss {loss.item():.4f}", flush=True)


def _attempt(results: dict, name: str, attack) -> None:  # noqa: ANN001 - a callable returning (bool, str)
    try:
        succeeded, detail = attack()
    except Exception as e:  # noqa: BLE001 - an attack that raises did not succeed
        succeeded, detail = False, f"{type(e).__name__}: {e}"
    results[name] = {"succeeded": bool(succeeded), "detail": str(detail)[:300]}


def _http_get(url: str, token: str) -> int:
    import httpx

    return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5).status_code


def attacker() -> dict:
    state = os.environ["STATE"]
    victim_dir = os.path.join(state, "jobs", os.environ["VICTIM"])
    server_pid = int(os.environ["SERVER_PID"])
    url = os.environ["SERVER_URL"]
    results: dict = {}

    def read(path: str):  # noqa: ANN202
        with open(path, "rb") as f:
            data = f.read()
        return len(data) > 0, f"read {len(data)} bytes of {path}"

    def admin_token():  # noqa: ANN202
        token = json.loads(open(os.path.join(state, "client.json")).read())["token"]
        return _http_get(f"{url}/jobs", token) == 200, "client.json's token works against the API"

    def query(sql: str):  # noqa: ANN202
        db = sqlite3.connect(f"file:{os.path.join(state, 'coddl.db')}?mode=ro", uri=True, timeout=2)
        rows = db.execute(sql).fetchall()
        return len(rows) > 0, f"{len(rows)} rows"

    def server_credentials():  # noqa: ANN202
        found = [v for k, v in os.environ.items() if "TOKEN" in k]
        try:
            with open(f"/proc/{server_pid}/environ", "rb") as f:
                found += [kv.split(b"=", 1)[1].decode() for kv in f.read().split(b"\0") if b"TOKEN=" in kv]
        except OSError:
            pass
        working = [t for t in found if _http_get(f"{url}/jobs", t) == 200]
        return bool(working), f"{len(found)} tokens found in the environment, {len(working)} accepted"

    def signal_server():  # noqa: ANN202
        os.kill(server_pid, 0)
        return True, f"may signal pid {server_pid}"

    def fork_server():  # noqa: ANN202
        sockets = glob.glob(os.path.join(os.environ["SERVER_TMP"], "pymp-*", "listener-*"))
        errors = []
        for path in sockets:
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(path)
                    return True, f"connected to {path}"
                except OSError as e:
                    errors.append(f"{path}: {e}")
        return False, "; ".join(errors) or "no fork-server socket in sight"

    def write_dir():  # noqa: ANN202
        with open(os.path.join(victim_dir, "planted-by-attacker"), "w") as f:
            f.write("x")
        return True, "wrote into the victim's job directory"

    def victim_store():  # noqa: ANN202
        import torch.distributed as dist

        host, port = os.environ["VICTIM_STORE"].rsplit(":", 1)
        outcomes = []
        try:  # the store speaking torch's TCPStore protocol would take this write
            store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=3))
            store.set("generation", "999")
            store.set("progress", "garbage")
            return True, "TCPStore client wrote 'generation' and 'progress'"
        except Exception as e:  # noqa: BLE001
            outcomes.append(f"TCPStore client: {type(e).__name__}")
        from coddl.elastic.kvstore import KVClient

        try:  # our own protocol, without the victim's key
            KVClient(host, int(port), os.urandom(32), datetime.timedelta(seconds=3)).set("generation", "999")
            return True, "a client without the key wrote 'generation'"
        except Exception as e:  # noqa: BLE001
            outcomes.append(f"KVClient with a wrong key: {type(e).__name__}")
        with socket.create_connection((host, int(port)), timeout=3) as s:  # and plain garbage
            s.sendall(os.urandom(4096))
        return False, "; ".join(outcomes)

    _attempt(results, "read_admin_token", admin_token)
    _attempt(results, "read_database", lambda: read(os.path.join(state, "coddl.db")))
    _attempt(results, "read_token_digests", lambda: query("SELECT digest FROM tokens"))
    _attempt(results, "read_other_users_spec", lambda: query("SELECT spec FROM jobs WHERE owner != 'mallory'"))
    _attempt(results, "read_other_users_logs", lambda: read(os.path.join(victim_dir, "logs", "w0.log")))
    _attempt(results, "read_other_users_checkpoint", lambda: read(os.path.join(victim_dir, "checkpoint.pt")))
    _attempt(results, "write_other_jobs_directory", write_dir)
    _attempt(results, "use_the_servers_credentials", server_credentials)
    _attempt(results, "signal_the_server", signal_server)
    _attempt(results, "reach_the_fork_server", fork_server)
    _attempt(results, "write_other_jobs_store", victim_store)
    return results


def main() -> None:
    if os.environ["ROLE"] == "victim":
        victim()
        return
    with elastic.session() as s:
        results = attacker()
        with open(os.path.join(os.environ["CODDL_JOB_DIR"], "attacks.json"), "w") as f:
            json.dump(results, f, indent=1)
        with open("cwd-marker", "w") as f:  # relative: should land in the job's directory
            f.write("here")
        print(json.dumps(results), flush=True)
        model = nn.Linear(2, 1)
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for xb in s.batches(torch.zeros(8, 2), global_batch=4, steps=1):
            model(xb).sum().backward()
            s.step()


if __name__ == "__main__":
    main()
