"""``coddl testbed up|down|measure``: a multi-node Ray cluster on this machine with a limited link between
its nodes (network namespaces, veth pairs, a bridge and ``tc``; root only)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Iterator

import typer
from rich.console import Console

from coddl.cli.errors import fail
from coddl.runtime.testbed import cluster as tb
from coddl.runtime.testbed.netns import LinkLimit, TestbedError, parse_bandwidth, parse_delay, unavailable_reason
from coddl.runtime.testbed.probe import measure

app = typer.Typer(help="a multi-node Ray testbed with a limited link, on this machine (root)", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
console = Console()

NAME = typer.Option(tb.DEFAULT_PREFIX, "--name", help="prefix of the testbed's namespaces (PREFIX-n0, PREFIX-sw, …)")


@contextmanager
def _testbed_errors() -> Iterator[None]:
    try:
        yield
    except (TestbedError, ValueError) as e:
        raise fail(str(e)) from None


def _usable() -> None:
    reason = unavailable_reason()
    if reason:
        raise fail(f"cannot build a testbed here: {reason}")


@app.command("up")
def up_cmd(nodes: int = typer.Option(2, "--nodes", help="Ray nodes, one network namespace each"),
           bandwidth: str = typer.Option("1gbit", "--bandwidth",
                                         help="rate of each node's link, tc units (1gbit, 100mbit); 'none': unlimited"),
           delay: str = typer.Option("0", "--delay", help="one-way delay added on each node's link (2ms); needs netem"),
           gpus_per_node: int = typer.Option(2, "--gpus-per-node", help="logical GPUs (worker slots) per node"),
           cpus_per_node: int = typer.Option(1, "--cpus-per-node", help="Ray CPUs per node"),
           name: str = NAME) -> None:
    """Start the namespaces, the shaped link and a Ray node in each namespace; print how to use it."""
    _usable()
    with _testbed_errors():
        rate = parse_bandwidth(bandwidth)
        spec = tb.TestbedSpec(nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node,
                              link=LinkLimit(rate, parse_delay(delay)), prefix=name)
        with console.status(f"starting {nodes} Ray nodes behind {spec.link.describe()} links"):
            bed = tb.up(spec)
    ns0 = bed.node_ns(0)
    console.print(f"testbed [bold]{name}[/bold] up: {nodes} nodes ({', '.join(bed.node_ns(i) for i in range(nodes))}), "
                  f"links {spec.link.describe()}; Ray at {bed.ray_address}")
    env = " ".join(f"{k}={v}" for k, v in bed.node_env().items() if k in ("GLOO_SOCKET_IFNAME", "RAY_AUTH_MODE",
                                                                             "RAY_AUTH_TOKEN_PATH"))
    console.print(f"run the server in node 0:  ip netns exec {ns0} env {env} "
                  f"coddl server start --executor ray --ray-address {bed.ray_address}", soft_wrap=True)
    console.print(f"tear it down:              coddl testbed down --name {name}", soft_wrap=True)


@app.command("down")
def down_cmd(name: str = NAME) -> None:
    """Kill every process in the testbed's namespaces and delete them (idempotent)."""
    _usable()
    with _testbed_errors():
        removed = tb.down(name)
    console.print(f"removed {len(removed)} namespaces" + (f": {', '.join(removed)}" if removed else ""))


@app.command("measure")
def measure_cmd(name: str = NAME, src: int = typer.Option(0, "--from", help="sending node"),
                dst: int = typer.Option(1, "--to", help="receiving node"),
                megabytes: int = typer.Option(8, "--megabytes", help="bytes sent, MiB")) -> None:
    """Measure TCP goodput and round-trip time between two nodes of a testbed that is up; print JSON."""
    _usable()
    with _testbed_errors():
        bed = tb.load(name)
        if not (0 <= src < bed.spec.nodes and 0 <= dst < bed.spec.nodes and src != dst):
            raise TestbedError(f"--from/--to: expected two different nodes in 0..{bed.spec.nodes - 1}")
        m = measure(bed.node_ns(src), bed.node_ns(dst), bed.node_address(dst), total_bytes=max(2, megabytes) << 20)
    limit = bed.spec.link
    print(json.dumps({"link": {"rate_mbit_s": None if limit.rate_bps is None else limit.rate_bps / 1e6,
                               "delay_ms": limit.delay_s * 1e3}, "measured": m.as_dict()}))
