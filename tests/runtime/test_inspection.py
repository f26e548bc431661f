"""Cluster inspection: which ranks measure which link; a spec applied to the executor's cluster only
when it describes the same shape; on the two-node testbed, the inspected inter-node bandwidth is the
tc limit's, and the written spec is what ``coddl cluster show`` prints and the server accepts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from testbed_live import BANDWIDTH_MBIT

from coddl.core.cluster import Cluster, LinkSpec, Node
from coddl.core.clusterspec import load_cluster
from coddl.runtime.calibrated import with_spec
from coddl.runtime.errors import ConfigError
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
