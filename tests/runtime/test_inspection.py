"""Cluster inspection: which ranks measure which link; the store where ranks meet; the local and the Ray
inspection end to end, each saying where its time went; a spec applied to the executor's cluster only
when it describes the same shape. Inspection on the two-node testbed (the fitted rate of a tc-limited
link) is in ``test_testbed``."""

from __future__ import annotations

import datetime
import re
import threading
import time

import pytest
from ray_cluster import loopback_cluster
from runtime_live import coddl

from coddl.clusterspec import load_cluster
from coddl.core.cluster import Cluster, LinkSpec, Node
from coddl.runtime.calibrated import with_spec
from coddl.errors import ConfigError
from coddl.runtime.inspection.run import plan_groups


def test_two_ranks_per_node_measure_it_and_node_0_pairs_with_every_other_node():
    ranks, groups, kinds = plan_groups([2, 1, 4])
    assert ranks == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)]
    assert groups == [[0, 1], [3, 4], [0, 2], [0, 3]]
    assert kinds == ["intra", "intra", "inter", "inter"]


def test_a_spec_applies_to_the_executors_cluster_only_if_it_has_the_same_shape():
    live = Cluster(nodes=(Node("10.0.0.1/ab", 2, "ray", cpus=3), Node("10.0.0.2/cd", 2, "ray", cpus=5)))
    spec = Cluster.homogeneous(2, 2, gpu_type="cpu", links=LinkSpec(inter_node_gbps=0.025))
    merged = with_spec(live, spec, "c.yaml")
    assert [n.name for n in merged.nodes] == ["10.0.0.1/ab", "10.0.0.2/cd"] and [n.cpus for n in merged.nodes] == [3, 5]
    assert {n.gpu_type for n in merged.nodes} == {"cpu"} and merged.links.inter_node_gbps == 0.025
    with pytest.raises(ConfigError, match=r"c.yaml: describes 1 node\(s\) with \[4\] GPUs, but the executor's "
                                          r"cluster has 2 node\(s\) with \[2, 2\] GPUs"):
        with_spec(live, Cluster.homogeneous(1, 4), "c.yaml")


def test_a_bad_cluster_spec_stops_the_server_before_it_starts(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("gpu_types: {cpu: {}}\nnodes:\n  - {gpu_type: cpu, gpus: -2}\n")
    r = coddl("server", "start", "--cluster", str(spec), "--state-dir", str(tmp_path / "state"), "--port", "0",
              timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == "error: --cluster: bad.yaml: nodes[0].gpus: expected a positive integer, got -2"


def test_the_rendezvous_store_serves_gloos_operations_to_clients_with_its_key_only():
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    from coddl.runtime.inspection.rendezvous import StoreServer, connect

    server = StoreServer("127.0.0.1")
    try:
        a, b = (connect("127.0.0.1", server.port, server.authkey, timeout_s=5) for _ in range(2))
        threading.Timer(0.2, b.set, ("late", "value")).start()
        assert a.get("late") == b"value"  # waits for the key, as TCPStore's get does
        assert a.add("n", 2) == 2 and b.add("n", 3) == 5 and a.get("n") == b"5"
        assert a.compare_set("c", "", "first") == b"first" and b.compare_set("c", "other", "x") == b"first"
        assert a.check(["late", "n"]) and not a.check(["late", "missing"]) and a.num_keys() == 3
        assert b.delete_key("c") and not b.delete_key("c")
        b.set_timeout(datetime.timedelta(seconds=0.2))
        with pytest.raises(TimeoutError, match="rendezvous: no key"):
            b.get("never")
        with pytest.raises(AuthenticationError):
            Client(("127.0.0.1", server.port), authkey=b"not the key")
    finally:
        server.close()


def test_the_local_inspection_says_where_its_time_went(tmp_path):
    out = tmp_path / "local.yaml"
    r = coddl("cluster", "inspect", "--out", str(out), "--sizes-kib", "4,256", "--reps", "2", timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = ["start-up", "ranks up", "rendezvous", "measured", "fit"]
    line = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"inspected in [\d.]+ s: " + ", ".join(rf"{s} [\d.]+" for s in steps), line), line
    assert out.read_text().startswith("# coddl cluster inspect (local executor), ")
    assert line.split(": ", 1)[1] in out.read_text().splitlines()[0]  # the spec's header keeps the steps
    assert load_cluster(out).links.intra_node_gbps > 0


@pytest.mark.slow
def test_the_ray_inspection_forks_each_nodes_ranks_and_takes_seconds(tmp_path):
    """Two Ray nodes on loopback: one actor per node, its second rank forked from it. The bound is
    generous (the README has the measured figures); a minute means actors or imports queue again."""
    out = tmp_path / "ray.yaml"
    with loopback_cluster() as (address, env):
        started = time.monotonic()
        r = coddl("cluster", "inspect", "--executor", "ray", "--ray-address", address, "--out", str(out), env=env,
                  timeout=240)
        took = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    assert took < 60, f"the Ray inspection took {took:.0f} s:\n{r.stdout[-1000:]}"
    steps = ["start-up", "imports", "connect", "ranks up", "rendezvous", "measured", "shutdown", "fit"]
    line = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"inspected in [\d.]+ s: " + ", ".join(rf"{s} [\d.]+" for s in steps), line), line
    cluster = load_cluster(out)
    assert [(n.gpus, n.gpu_type) for n in cluster.nodes] == [(2, "cpu"), (2, "cpu")]
    header = out.read_text().splitlines()
    assert header[0].startswith("# coddl cluster inspect (ray executor), ") and line.split(": ", 1)[1] in header[0]
    assert sum(h.startswith("#   intra 127.0.0.1/") for h in header) == 2  # both nodes' ranks met and measured
    assert any(h.startswith("#   inter 127.0.0.1/") for h in header)


def test_each_rank_of_a_node_gets_its_own_gpu():
    """NCCL refuses two ranks of one communicator on one device: a node's ranks take its GPUs in turn."""
    from coddl.runtime.inspection.bench import rank_device

    assert [rank_device(i, 4) for i in range(4)] == [0, 1, 2, 3]
    assert [rank_device(i, 2) for i in range(5)] == [0, 1, 0, 1, 0]
    assert rank_device(3, 0) == 0  # no device count: never a division by zero
