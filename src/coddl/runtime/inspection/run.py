"""``coddl cluster inspect``: measure a cluster's links and nodes through its executor, write a cluster spec.

Ranks go where the executor would put workers: with the local executor, processes on this host;
with the Ray executor, processes on the nodes of the cluster the Ray executor builds (the same nodes in
the same order), forked by one Ray actor per node pinned there; every node's actor starts at once. Two
ranks inside each node measure that node's link; the first rank of node 0 and of every other node
measure the link between them. The measurements are fitted with the estimator's own all-reduce terms
(``perf.linkfit``) and written as a cluster spec that ``coddl cluster show`` prints and ``coddl server
start --cluster`` plans on. Each step's seconds (``Phases``) go to the spec's header and the command's
last line.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from coddl.core.cluster import LinkSpec
from coddl.errors import ConfigError
from coddl.runtime.inspection.bench import ready, run_node
from coddl.runtime.inspection.rendezvous import StoreServer

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
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step (``Phases``), in order

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

    def timing(self) -> str:
        """``9.8 s: connect 1.2, ranks up 4.1, ...``: the whole and its steps."""
        return f"{self.seconds:.1f} s" + (": " + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items())
                                          if self.phases else "")

    def yaml(self) -> str:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"# coddl cluster inspect ({self.executor} executor), {when}, {self.timing()}.",
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


class Phases:
    """How long each step of an inspection took, in order, each from the end of the one before."""

    def __init__(self, since: float | None = None) -> None:
        """``since``: when the command started (``time.time()``), to count its start-up; else now."""
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic() - (max(0.0, time.time() - since) if since is not None else 0.0)
        if since is not None:
            self.mark("start-up")

    def mark(self, name: str, first: tuple[str, float] | None = None) -> None:
        """End step ``name`` now; ``first``, a named part at its start that the ranks timed, is split off it."""
        now = time.monotonic()
        took, self._last = now - self._last, now
        if first is not None:
            part = min(took, first[1])
            self.seconds[first[0]] = part
            took -= part
        self.seconds[name] = took

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def _assemble(executor: str, names: list[str], slots: list[int], ranks, groups, kinds, results: list[dict],
              phases: Phases) -> Inspection:
    from coddl.perf.linkfit import AllreduceSample, fit_links  # scipy: the callers import it while ranks start

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
    phases.mark("fit")
    return Inspection(nodes, measured_groups, links, measured, phases.total, executor, phases=dict(phases.seconds))


def _node_ranks(ranks: list[tuple[int, int]], nodes: int) -> list[list[int]]:
    """The ranks of each node, in order."""
    return [[k for k, (node, _) in enumerate(ranks) if node == i] for i in range(nodes)]


def _measured(results: list[list[dict]]) -> tuple[list[dict], tuple[str, float]]:
    """The ranks' results of every node, and the longest any rank took to meet the others."""
    flat = [r for node in results for r in node]
    return flat, ("rendezvous", max(r["seconds"]["rendezvous"] for r in flat))


def inspect_local(slots: int = 2, sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5,
                  since: float | None = None) -> Inspection:
    """This host as the local executor sees it: one node of ``slots`` slots; its loopback link."""
    import socket

    if slots < 2:
        raise ConfigError("--gpus: inspection needs at least 2 slots to measure a link")
    phases = Phases(since)
    ranks, groups, kinds = plan_groups([slots])
    store = StoreServer("127.0.0.1")
    try:
        with mp.get_context("spawn").Pool(1) as pool:
            started = pool.apply_async(ready)
            import coddl.perf.linkfit  # noqa: F401 - scipy for the fit, imported while the ranks start
            devices = started.get(timeout=300)
            if 0 < devices < slots:  # NCCL refuses two ranks of a communicator on one GPU
                raise ConfigError(f"--gpus {slots}: this host has {devices} GPUs")
            phases.mark("ranks up")
            job = pool.apply_async(run_node, (list(range(len(ranks))), len(ranks),
                                              ("127.0.0.1", store.port, store.authkey), groups, list(sizes), reps))
            results, met = _measured([job.get(timeout=300)])
            phases.mark("measured", met)
    finally:
        store.close()
    return _assemble("local", [socket.gethostname() or "localhost"], [slots], ranks, groups, kinds, results, phases)


def inspect_ray(address: str, sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5, connect_timeout_s: float = 15.0,
                since: float | None = None) -> Inspection:
    """The Ray cluster at ``address``, node by node as the Ray executor orders them: one actor per node
    imports torch and forks that node's ranks (all nodes start at once)."""
    phases = Phases(since)
    from coddl.runtime.executors.ray_connect import import_ray, ray_cluster
    from coddl.runtime.executors.ray_connect import connect, split_address
    from coddl.runtime.inspection.bench import InspectionNode

    split_address(address)
    ray = import_ray(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    phases.mark("imports")
    connect(ray, address, connect_timeout_s)
    try:
        cluster, node_ids = ray_cluster(ray)
        phases.mark("connect")
        slots = [n.gpus for n in cluster.nodes]
        ranks, groups, kinds = plan_groups(slots)
        actor = ray.remote(InspectionNode)
        # An actor that reserves no GPU gets CUDA_VISIBLE_DEVICES="" from Ray and would measure gloo on the
        # CPU; reserving the node's GPUs would wait for a running server's node agents to let go of them.
        # So Ray is told to leave the variable alone: the ranks see every GPU of their node.
        sees_gpus = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}
        actors = [actor.options(num_cpus=0, runtime_env=sees_gpus,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
                  .remote() for node_id in node_ids]
        started = [a.ready.remote() for a in actors]
        store = StoreServer("0.0.0.0")
        rendezvous = (ray.util.get_node_ip_address(), store.port, store.authkey)
        import coddl.perf.linkfit  # noqa: F401 - scipy for the fit, imported while the nodes start
        try:
            ray.get(started, timeout=300)
            phases.mark("ranks up")
            results = ray.get([a.run.remote(node_ranks, len(ranks), rendezvous, groups, list(sizes), reps)
                               for a, node_ranks in zip(actors, _node_ranks(ranks, len(slots)))], timeout=300)
            results, met = _measured(results)
            phases.mark("measured", met)
        finally:
            store.close()
        for a in actors:
            ray.kill(a)
    finally:
        ray.shutdown()
    phases.mark("shutdown")
    return _assemble("ray", [n.name for n in cluster.nodes], slots, ranks, groups, kinds, results, phases)


def write_spec(inspection: Inspection, path: Path) -> None:
    """Write the spec and read it back through the spec reader, so what is written is what loads."""
    from coddl.clusterspec import load_cluster

    path.write_text(inspection.yaml())
    load_cluster(path)
