"""Hand-computed pins of the fabric (``coddl.perf.fabric``) beside those in test_model.py: the
cluster spec's links read with the default algorithm, a shared device through the all-reduce's
seconds, and the checks' messages."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import LinkSpec
from coddl.perf.fabric import Fabric

M = 1e8


def test_a_cluster_spec_s_links_are_priced_with_rings_and_25_mb_buckets_by_default():
    f = Fabric.of(LinkSpec(40.0, 5.0, 3.0, 30.0, 1.2))
    assert (f.algorithm, f.bucket_mb) == ("ring", 25.0)
    assert f == Fabric(40.0, 5.0, 3.0, 30.0, "ring", 25.0, 1.2)


def test_workers_on_half_a_device_pay_twice_the_intra_node_seconds():
    fab = Fabric(10.0, 1.0, 5.0, 20.0, "ring")
    full = 2 * 3 / 4 * M / 10e9 + 2 * 3 * 4 * 5e-6  # ring of 4 inside a node, 4 buckets
    assert fab.allreduce_seconds(M, 4, 1, 4, 0.5)[0] == pytest.approx(2 * full)
    assert fab.allreduce_seconds(M, 4, 1, 4)[0] == pytest.approx(full)


def test_the_checks_name_the_algorithms_and_the_field():
    with pytest.raises(ValueError, match=r"^unknown all-reduce algorithm 'nccl'; use one of ring, hierarchical, "
                                         r"tree, auto$"):
        Fabric(algorithm="nccl")  # type: ignore[arg-type]
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=rf"^fabric: inter_latency_us must be a non-negative number, got {bad}$"):
            Fabric(inter_latency_us=bad)
    assert Fabric(intra_latency_us=0.0, inter_latency_us=0.0).weights[2:].tolist() == [0.0, 0.0]
