"""Start a two-node Ray cluster on loopback (2 logical GPUs per node) in this process, print its
address, and keep it up until stdin closes; then shut it down. Tests run it as a subprocess through
``loopback_cluster`` so that Ray's environment and processes stay out of the test process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping


def _ray_processes(temp: str) -> list[int]:
    """Processes whose command line names this cluster's Ray directory (its GCS, raylets, workers)."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and temp in (d / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(d.name))
        except OSError:  # gone meanwhile
            pass
    return pids


@contextmanager
def loopback_cluster(env: Mapping[str, str] = {}, start_s: float = 180) -> Iterator[tuple[str, dict[str, str]]]:
    """This script's cluster, with ``env`` added to Ray's (e.g. token authentication): its address and
    the environment a driver needs for it. Shut down on leaving, and whatever of it is still running
    then is killed (AssertionError if anything was left once the script had stopped)."""
    temp = tempfile.mkdtemp(prefix="crs", dir="/tmp")  # Ray's socket paths must stay short
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", **env, "RAY_TMPDIR": temp}
    proc = subprocess.Popen([sys.executable, __file__], env={**os.environ, **env}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    timer = threading.Timer(start_s, proc.kill)
    timer.start()
    address = proc.stdout.readline().strip()
    timer.cancel()
    left: list[int] = []
    try:
        assert address.startswith("127.0.0.1:"), "the Ray cluster did not start"
        yield address, env
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 20
        while (left := _ray_processes(temp)) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in [proc.pid, *left]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"Ray processes left running after the cluster's shutdown: {left}"


def main() -> None:
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 2, "num_gpus": 2, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    print(cluster.address, flush=True)
    sys.stdin.read()
    cluster.shutdown()


if __name__ == "__main__":
    main()
