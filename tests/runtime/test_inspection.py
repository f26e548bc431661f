"""Cluster inspection: which ranks measure which link; a spec applied to the executor's cluster only
when it describes the same shape. Inspection on the two-node testbed is in ``test_testbed``."""

from __future__ import annotations

import pytest
from runtime_live import coddl

from coddl.core.cluster import Cluster, LinkSpec, Node
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


def test_a_bad_cluster_spec_stops_the_server_before_it_starts(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("gpu_types: {cpu: {}}\nnodes:\n  - {gpu_type: cpu, gpus: -2}\n")
    r = coddl("server", "start", "--cluster", str(spec), "--state-dir", str(tmp_path / "state"), "--port", "0",
              timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == "error: --cluster: bad.yaml: nodes[0].gpus: expected a positive integer, got -2"
