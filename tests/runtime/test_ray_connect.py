"""Starting a server on a Ray address that cannot work ends at once or within the connect timeout, with
one line and exit 2: a malformed address, a port nothing listens on, an address that never answers
(a veth peer without an address inside a network namespace this test creates), and ``--gpus``, which
a Ray cluster does not take. The missing-token case needs a Ray cluster: tests/runtime/test_ray.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from runtime_live import free_port
from typer.testing import CliRunner

from coddl.cli.main import app
from coddl.errors import ConfigError
from coddl.runtime.executors.ray_connect import probe, split_address


@pytest.mark.parametrize("address", ["nohost", "host:", ":6379", "host:0", "host:70000", "host:port"])
def test_a_malformed_address_is_refused(address):
    with pytest.raises(ConfigError, match="--ray-address: expected HOST:PORT"):
        split_address(address)


def test_ipv6_addresses_split():
    assert split_address("[::1]:6379") == ("::1", 6379)


def test_a_port_nothing_listens_on_is_refused_at_once():
    with pytest.raises(ConfigError, match=r"127\.0\.0\.1:\d+: nothing listens there"):
        probe(f"127.0.0.1:{free_port()}", 5.0)


def start(tmp_path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["server", "start", "--state-dir", str(tmp_path), "--port", "0", *args])
    return r.exit_code, " ".join(r.output.split())


def test_gpus_with_the_ray_executor_is_refused(tmp_path):
    code, out = start(tmp_path, "--executor", "ray", "--ray-address", "127.0.0.1:1", "--gpus", "2")
    assert code == 2 and "error: --gpus is the local executor's; a Ray cluster's GPUs are those its nodes" in out


@pytest.mark.parametrize("gpus", ["0", "65537", "99999999999999999999"])  # the last was an OverflowError
def test_gpus_outside_one_node_s_range_is_refused(tmp_path, gpus):
    code, out = start(tmp_path, "--gpus", gpus)
    assert code == 2 and f"error: --gpus must be 1 to 65536 (the local executor is one node), got {gpus}" in out
    assert "Traceback" not in out


NETNS_SETUP = ("ip link set lo up && ip link add va type veth peer name vb && ip addr add 10.99.0.1/24 dev va && "
               "ip link set va up && ip link set vb up && "
               "ip neigh add 10.99.0.2 lladdr 02:00:00:00:00:02 dev va nud permanent")


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                    reason="needs root, unshare and ip to make a private network namespace")
def test_an_address_that_never_answers_gives_up_after_the_connect_timeout(tmp_path):
    """SYNs to 10.99.0.2 leave through a veth whose peer has no address: they are never answered."""
    cmd = (f"{NETNS_SETUP} && exec {sys.executable} -m coddl.cli server start --executor ray "
           f"--ray-address 10.99.0.2:6379 --ray-connect-timeout-s 2 --state-dir {tmp_path} --port 0")
    r = subprocess.run(["unshare", "-n", "sh", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == ("error: cannot reach the Ray cluster at 10.99.0.2:6379: no answer "
                                                 "within 2 s (--ray-connect-timeout-s)")
    assert "Traceback" not in r.stderr
