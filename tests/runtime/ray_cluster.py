"""Start a two-node Ray cluster on loopback (2 logical GPUs per node) in this process, print its
address, and keep it up until stdin closes; then shut it down. The runtime's Ray test runs it as a
subprocess so that Ray's environment and processes stay out of the test process."""

from __future__ import annotations

import sys


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
