"""``coddl cluster inspect``: measure a cluster's links and nodes through its executor, write a cluster spec.

Ranks go where the executor would put workers: with the local executor, processes on this host;
with the Ray executor, one Ray actor per rank pinned to a node of the cluster the Ray executor builds
(the same nodes in the same order). Two ranks inside each node measure that node's link; the first
rank of node 0 and of every other node measure the link between them. The measurements are fitted
with the estimator's own all-reduce terms (``perf.linkfit``) and written as a cluster spec that
``coddl cluster show`` prints and ``coddl server start --cluster`` plans on.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from coddl.core.cluster import LinkSpec
from coddl.perf.linkfit import AllreduceSample, fit_links
from coddl.runtime.errors import ConfigError
from coddl.runtime.inspection.bench import run_rank

DEFAULT_SIZES = (4 << 10, 256 << 10, 1 << 20, 4 << 20)


@dataclass
class Inspection:
    """What was measured and what it was fitted to."""

    nodes: list[dict]  # per node: name, slots, device, device_memory_gb, cores, memory_gb
    groups: list[dict]  # per measured group: kind (intra/inter), nodes, ranks, {bytes: seconds}
    links: LinkSpec
    measured: dict[str, bool]
    seconds: float
    executor: str
    extra: dict = field(default_factory=dict)

    def spec(self) -> dict:
        """The cluster spec (the format ``coddl.clusterspec`` reads)."""
        types: dict[str, dict] = {}
        for n in self.nodes:
            mem = n["device_memory_gb"] or round(n["memory_gb"] / max(1, n["slots"]), 1)
            types.setdefault(n["device"], {"speed": 1.0, "memory_gb": mem})
        links = {"intra_node_gbps": self.links.intra_node_gbps, "intra_node_latency_us": self.links.intra_node_latency_us}
        if self.measured["inter"]:
            links |= {"inter_node_gbps": self.links.inter_node_gbps,
                      "inter_node_latency_us": self.links.inter_node_latency_us}
        links = {k: float(f"{v:.4g}") for k, v in links.items()}
        return {"name": "inspected", "gpu_types": types, "links": links,
                "nodes": [{"gpu_type": n["device"], "gpus": n["slots"], "cpus": n["cores"], "memory_gb": n["memory_gb"]}
                          for n in self.nodes]}

    def yaml(self) -> str:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"# coddl cluster inspect ({self.executor} executor), {when}, {self.seconds:.1f} s.",
                 "# Fastest gloo all-reduce seconds per message size, and the ring-priced fit of the links:"]
        for g in self.groups:
            times = ", ".join(f"{b} B {s:.3g} s" for b, s in g["seconds"].items())
            lines.append(f"#   {g['kind']} {'/'.join(g['nodes'])}: {times}")
        if not self.measured["inter"]:
            lines.append("# One node: the inter-node link was not measured (estimator defaults apply).")
        return "\n".join(lines) + "\n" + yaml.safe_dump(self.spec(), sort_keys=False)


def plan_groups(slots_per_node: list[int]) -> tuple[list[tuple[int, int]], list[list[int]], list[str]]:
    """Ranks (node, local index), measured groups (rank lists) and their kinds for nodes with these slots."""
    ranks = [(node, j) for node, slots in enumerate(slots_per_node) for j in range(min(2, slots))]
    index = {r: i for i, r in enumerate(ranks)}
    groups, kinds = [], []
    for node, slots in enumerate(slots_per_node):
        if slots >= 2:
            groups.append([index[(node, 0)], index[(node, 1)]])
            kinds.append("intra")
    for node in range(1, len(slots_per_node)):
        groups.append([index[(0, 0)], index[(node, 0)]])
        kinds.append("inter")
    return ranks, groups, kinds


def _assemble(executor: str, names: list[str], slots: list[int], ranks, groups, kinds, results: list[dict],
              started: float) -> Inspection:
    by_rank = {r["rank"]: r for r in results}
    nodes = []
    for i, name in enumerate(names):
        facts = by_rank[next(k for k, (node, _) in enumerate(ranks) if node == i)]["facts"]
        nodes.append({"name": name, "slots": slots[i], **{k: facts[k] for k in
                                                             ("device", "device_memory_gb", "cores", "memory_gb")}})
    samples, measured_groups = [], []
    for gi, (members, kind) in enumerate(zip(groups, kinds)):
        sizes = by_rank[members[0]]["medians"][gi].keys()
        seconds = {int(s): max(float(by_rank[m]["medians"][gi][s]) for m in members) for s in sizes}
        span = sorted({ranks[m][0] for m in members})
        measured_groups.append({"kind": kind, "nodes": [names[n] for n in span], "ranks": members, "seconds": seconds})
        for size, sec in seconds.items():
            samples.append(AllreduceSample(size, len(members), len(span), 2 if kind == "intra" else 1, sec))
    links, measured = fit_links(samples)
    return Inspection(nodes, measured_groups, links, measured, time.monotonic() - started, executor)


def _store(host: str):  # noqa: ANN202 - a torch TCPStore
    import torch.distributed as dist

    return dist.TCPStore(host, 0, None, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=60))


def inspect_local(slots: int = 2, sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5) -> Inspection:
    """This host as the local executor sees it: one node of ``slots`` slots; its loopback link."""
    import socket

    if slots < 2:
        raise ConfigError("--gpus: inspection needs at least 2 slots to measure a link")
    started = time.monotonic()
    ranks, groups, kinds = plan_groups([slots])
    store = _store("127.0.0.1")
    ctx = mp.get_context("spawn")
    with ctx.Pool(len(ranks)) as pool:
        jobs = [pool.apply_async(run_rank, (r, len(ranks), "127.0.0.1", store.port, groups, list(sizes), reps))
                for r in range(len(ranks))]
        results = [j.get(timeout=300) for j in jobs]
    return _assemble("local", [socket.gethostname() or "localhost"], [slots], ranks, groups, kinds, results, started)


def inspect_ray(address: str, sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5, connect_timeout_s: float = 15.0,
                progress: Callable[[str], None] = lambda _: None) -> Inspection:
    """The Ray cluster at ``address``, node by node as the Ray executor orders them."""
    from coddl.runtime.executors.ray import _import_ray, ray_cluster
    from coddl.runtime.executors.ray_connect import connect, split_address
    from coddl.runtime.inspection.bench import InspectionRank

    split_address(address)
    ray = _import_ray(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    started = time.monotonic()
    connect(ray, address, connect_timeout_s)
    try:
        cluster, node_ids = ray_cluster(ray)
        slots = [n.gpus for n in cluster.nodes]
        ranks, groups, kinds = plan_groups(slots)
        store = _store("0.0.0.0")
        host = ray.util.get_node_ip_address()
        actor = ray.remote(InspectionRank)
        actors = [actor.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_ids[node], soft=False))
                  .remote() for node, _ in ranks]
        progress(f"{len(ranks)} ranks on {len(slots)} nodes, {len(groups)} links")
        results = ray.get([a.run.remote(r, len(ranks), host, store.port, groups, list(sizes), reps)
                           for r, a in enumerate(actors)], timeout=300)
        for a in actors:
            ray.kill(a)
        return _assemble("ray", [n.name for n in cluster.nodes], slots, ranks, groups, kinds, results, started)
    finally:
        ray.shutdown()


def write_spec(inspection: Inspection, path: Path) -> None:
    """Write the spec and read it back through the spec reader, so what is written is what loads."""
    from coddl.clusterspec import load_cluster

    path.write_text(inspection.yaml())
    load_cluster(path)
