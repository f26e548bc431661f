"""The multi-node testbed: namespaces wired to a bridge with ``tc`` on each node's link, measured to be
really limited; ``coddl testbed up/down`` starting and removing a two-node Ray cluster; a real training
job across both nodes whose all-reduce crosses the limited link; ``coddl cluster inspect`` recovering
the link's rate."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_live import EXAMPLES, Server
from testbed_live import BANDWIDTH_MBIT, coddl, leftovers, skip_reason

from coddl.clusterspec import load_cluster
from coddl.runtime.executors.ray_connect import requires_token
from coddl.runtime.testbed.cluster import TestbedSpec
from coddl.runtime.testbed.netns import (NO_NETEM, LinkLimit, TestbedError, Wiring, inside, namespace_pids,
                                       netem_available, parse_delay, parse_rate, tear_down)
from coddl.runtime.testbed.probe import measure

STEPS = 12

# the rates measured here are the machine's own: other tests beside them would starve the link's traffic
pytestmark = pytest.mark.alone


def link_bytes(ns: str) -> tuple[int, int]:
    """Bytes node ``ns`` has sent and received on its link (eth0) so far."""
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "eth0"], capture_output=True, text=True).stdout
    link = json.loads(out)[0]["stats64"]
    return int(link["tx"]["bytes"]), int(link["rx"]["bytes"])


needs_netns = pytest.mark.skipif(skip_reason() is not None, reason=f"no network-namespace testbed: {skip_reason()}")


@pytest.fixture
def wiring():
    w = Wiring(f"cdtw{os.getpid()}", 2)
    try:
        w.build()
        yield w
    finally:
        tear_down(w.prefix)
        assert leftovers(w.prefix) == []


@needs_netns
def test_the_link_between_two_namespaces_is_limited_to_the_tc_rate(wiring):
    """Goodput is payload: ~95% of the metered rate with 1500-byte frames. Unlimited, a veth pair carries
    gigabits per second even on a loaded machine, so 50 Mbit/s is far below it."""
    free = measure(wiring.node(0), wiring.node(1), wiring.address(1), total_bytes=4 << 20)
    wiring.shape(LinkLimit(rate_bps=50e6))
    limited = measure(wiring.node(0), wiring.node(1), wiring.address(1), total_bytes=3 << 20)
    back = measure(wiring.node(1), wiring.node(0), wiring.address(0), total_bytes=3 << 20)
    assert 0.75 * 50e6 <= limited.goodput_bps <= 1.05 * 50e6, limited
    assert 0.75 * 50e6 <= back.goodput_bps <= 1.05 * 50e6, back
    assert free.goodput_bps >= 3 * 50e6, free
    assert "tbf" in wiring.shaping(0) and "rate 50Mbit" in wiring.shaping(0)


@needs_netns
def test_the_link_adds_the_netem_delay_to_each_round_trip(wiring):
    if not netem_available():
        pytest.skip(NO_NETEM)
    wiring.shape(LinkLimit(rate_bps=None, delay_s=0.005))
    rtt = measure(wiring.node(0), wiring.node(1), wiring.address(1), total_bytes=2 << 20).rtt_s
    assert 0.0095 <= rtt <= 0.030, rtt  # one shaper per direction: 2 × 5 ms, plus a loaded machine's slack


@needs_netns
def test_nothing_is_left_after_tear_down(wiring):
    with inside(wiring.node(1)):
        sleeper = subprocess.Popen(["sleep", "300"])
    assert namespace_pids(wiring.node(1)) == [sleeper.pid]
    assert tear_down(wiring.prefix) == [wiring.node(0), wiring.node(1), wiring.switch]
    assert sleeper.wait(timeout=10) == -9
    assert leftovers(wiring.prefix) == [] and tear_down(wiring.prefix) == []  # and again: idempotent


def test_bad_rates_delays_and_sizes_are_named():
    # past 1000gbit, tbf's burst (a millisecond of the rate) no longer fits its 32 bits: tc failed
    # after the namespaces were built
    for bad in ("1gigabit", "0mbit", "-5mbit", "fast", "", "1001gbit", "99999999999999999999gbit"):
        with pytest.raises(ValueError, match="expected a positive rate up to 1000gbit such as 1gbit"):
            parse_rate(bad)
    for bad in ("2 fortnights", "-1ms", "5", "61s", "60001ms"):
        with pytest.raises(ValueError, match="expected a delay up to 60s such as 2ms"):
            parse_delay(bad)
    assert (parse_rate("1gbit"), parse_rate("100mbit"), parse_rate("2mbps")) == (1e9, 1e8, 16e6)
    assert (parse_rate("1000gbit"), parse_delay("60s")) == (1e12, 60.0)
    assert (parse_delay("2ms"), parse_delay("500us"), parse_delay("0")) == (0.002, 0.0005, 0.0)
    with pytest.raises(TestbedError, match="--nodes: expected 2 to 200 nodes, got 1"):
        TestbedSpec(nodes=1)
    # Ray refused 1e20 GPUs per node only once the namespaces were up
    for slots in ({"gpus_per_node": 0}, {"gpus_per_node": 1025}, {"cpus_per_node": 10**20}):
        with pytest.raises(TestbedError, match="^--gpus-per-node and --cpus-per-node must be 1 to 1024$"):
            TestbedSpec(**slots)
    assert TestbedSpec(gpus_per_node=1024, cpus_per_node=1024).gpus_per_node == 1024
    for name in ("é", "--", "a/b", "", "x" * 21):
        with pytest.raises(TestbedError, match="^--name: expected up to 20 letters, digits or '-'"):
            TestbedSpec(prefix=name)


@needs_netns
def test_a_testbed_that_fails_to_come_up_says_why_in_one_line_and_leaves_nothing():
    """Without netem the namespaces are built before shaping fails, so this exercises the clean-up."""
    name = f"cdtf{os.getpid()}"
    args, expected = ((("--delay", "2ms"), "no netem qdisc") if not netem_available()
                      else (("--bandwidth", "1gigabit"), "expected a positive rate up to 1000gbit such as 1gbit"))
    r = coddl("testbed", "up", "--name", name, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert expected in r.stderr.strip().splitlines()[-1]
    assert leftovers(name) == []


@pytest.mark.slow
def test_two_ray_nodes_come_up_in_their_namespaces(testbed):
    script = "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR'); " \
             "print(sorted((n['NodeManagerAddress'], n['Resources'].get('GPU')) for n in ray.nodes() if n['Alive']))"
    r = subprocess.run(["ip", "netns", "exec", testbed.node_ns(1), sys.executable, "-c", script,
                        testbed.ray_address], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **testbed.node_env()})
    assert r.stdout.strip() == "[('10.231.0.1', 2.0), ('10.231.0.2', 2.0)]", r.stderr[-2000:]
    assert len(namespace_pids(testbed.node_ns(1))) >= 2  # a raylet and its helpers live in node 1
    # its Ray wants the token, which only root can read: a job in a node cannot take the cluster over
    token = Path(testbed.node_env()["RAY_AUTH_TOKEN_PATH"])
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700 and stat.S_IMODE(token.stat().st_mode) == 0o600
    with inside(testbed.node_ns(1)):
        assert requires_token(testbed.ray_address)


@pytest.mark.slow
def test_a_training_job_spans_both_nodes_over_the_limited_link(testbed, tmp_path):
    """examples/train_mlp.py on 3 workers: 2 GPUs per node, so 2 in node 0 and 1 in node 1. Whatever the all-reduce algorithm,
    node 1's rank must receive the sum of node 0's gradients and send its own: at least the gradient
    bytes cross the link each way every step, so a step cannot be faster than bytes × 8 / rate."""
    grad_bytes = 1_585_162 * 4
    with inside(testbed.node_ns(0)):  # the server, its HTTP port and its job stores live in node 0
        srv = Server(tmp_path / "state", gpus=None, policy="max-min",
                     extra=("--executor", "ray", "--ray-address", testbed.ray_address), env=testbed.node_env())
        try:
            nodes = srv.admin.get("/cluster").json()["nodes"]
            assert [len(n["gpus"]) for n in nodes] == [2, 2]
            job = {"name": "mlp-across", "command": ["python", str(EXAMPLES / "train_mlp.py")], "steps": STEPS,
                   "batch_size": 96, "min_gpus": 3, "max_gpus": 3, "model": "mlp"}
            before = link_bytes(testbed.node_ns(1))
            job_id = srv.submit(job)
            started = time.monotonic()
            done = srv.wait_job(job_id, lambda j: j["status"] == "finished", 240, "finished")
            elapsed = time.monotonic() - started
            assert done["steps_done"] == STEPS
            sent, received = (a - b for a, b in zip(link_bytes(testbed.node_ns(1)), before))
            assert {s["world_size"] for s in done["samples"]} == {3}
            assert min(sent, received) >= STEPS * grad_bytes, (sent, received)  # the all-reduce crossed the link
            assert elapsed >= 0.9 * STEPS * grad_bytes * 8 / (BANDWIDTH_MBIT * 1e6)  # at no more than its rate
            assert "tbf" in testbed.wiring.shaping(1)
        finally:
            srv.cleanup()


@pytest.mark.slow
def test_inspection_on_the_testbed_recovers_the_tc_limit(testbed, tmp_path):
    """200 Mbit/s is 0.025 GB/s; the fit must land within 20% (tc meters frames, gloo moves payload)."""
    out = tmp_path / "inspected.yaml"
    r = subprocess.run(["ip", "netns", "exec", testbed.node_ns(0), sys.executable, "-m", "coddl.cli", "cluster",
                        "inspect", "--executor", "ray", "--ray-address", testbed.ray_address, "--out", str(out)], capture_output=True, text=True, timeout=240,
                       env={**os.environ, **testbed.node_env(), "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-3000:]
    cluster = load_cluster(out)
    rate_gbps = BANDWIDTH_MBIT / 8 / 1000
    assert 0.8 * rate_gbps <= cluster.links.inter_node_gbps <= 1.2 * rate_gbps, cluster.links
    assert cluster.links.intra_node_gbps >= 4 * cluster.links.inter_node_gbps  # loopback inside a node
    assert [(n.gpus, n.gpu_type) for n in cluster.nodes] == [(2, "cpu"), (2, "cpu")]
    assert all(n.cpus >= 1 and n.memory_gb > 0 for n in cluster.nodes)
    assert "inter 10.231.0.1/" in out.read_text()  # the raw times are kept as comments
    shown = subprocess.run([sys.executable, "-m", "coddl.cli", "cluster", "show", str(out)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0 and f"inter-node {cluster.links.inter_node_gbps:g} GB/s" in " ".join(shown.stdout.split())
