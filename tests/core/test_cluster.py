import pytest

from coddl.core import Cluster


def test_for_gpus_makes_full_nodes_and_a_remainder():
    c = Cluster.for_gpus(20, 8)
    assert [n.gpus for n in c.nodes] == [8, 8, 4]
    assert c.total_gpus == 20
    assert c.node_of_gpu[7] == 0 and c.node_of_gpu[8] == 1 and c.node_of_gpu[19] == 2
    assert list(c.node_first_gpu) == [0, 8, 16]


def test_homogeneous_switches_and_capacity():
    c = Cluster.homogeneous(4, 2, nodes_per_switch=2)
    assert list(c.node_switch_index) == [0, 0, 1, 1]
    assert c.capacity_by_type == {"V100": 8}


def test_empty_cluster_is_rejected():
    with pytest.raises(ValueError):
        Cluster.for_gpus(0)
