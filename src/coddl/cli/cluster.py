"""``coddl cluster show SPEC``: check a cluster spec and print what it describes; ``coddl cluster inspect``:
measure the cluster and write one."""

from __future__ import annotations

import atexit
import gc
import os
import time
from itertools import groupby
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from coddl.cli.errors import fail, user_errors
from coddl.clusterspec import load_cluster
from coddl.core.cluster import Cluster

app = typer.Typer(help="inspect cluster specs", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)
console = Console()


def render_cluster(cluster: Cluster, title: str | None = None) -> Table:
    """One row per run of identical consecutive nodes, totals and links in the caption."""
    table = Table(title=title)
    for col in ("nodes", "count", "GPU", "GPUs/node", "speed", "GPU GB", "CPUs/node", "mem GB", "switches"):
        table.add_column(col, justify="left" if col in ("nodes", "GPU") else "right", no_wrap=col == "nodes")
    shape = lambda n: (n.gpus, n.gpu_type, n.cpus, n.memory_gb)  # noqa: E731
    for (gpus, gpu_type, cpus, mem), run in groupby(cluster.nodes, key=shape):
        nodes = list(run)
        t = cluster.gpu_type_of(gpu_type)
        names = nodes[0].name if len(nodes) == 1 else f"{nodes[0].name}…{nodes[-1].name}"
        table.add_row(names, str(len(nodes)), gpu_type, str(gpus), f"{t.speed:g}", f"{t.memory_gb:g}", str(cpus),
                      f"{mem:g}", str(len(set(n.switch for n in nodes))))
    links = cluster.links
    switches = len(set(n.switch for n in cluster.nodes))
    n = len(cluster.nodes)
    table.caption = (f"{cluster.total_gpus} GPUs on {n} node{'s' if n != 1 else ''}, {switches} switch"
                     f"{'es' if switches != 1 else ''}; links: intra-node {links.intra_node_gbps:g} GB/s, "
                     f"{links.intra_node_latency_us:g} µs; inter-node {links.inter_node_gbps:g} GB/s, "
                     f"{links.inter_node_latency_us:g} µs"
                     + (f"; two-node all-reduces ×{links.two_node_factor:g}" if links.two_node_factor != 1.0 else ""))
    return table


@app.callback()
def cluster() -> None:
    """Inspect cluster specs (a group even with one command, so ``coddl cluster show`` reads right)."""


@app.command("show")
def show(spec: Path = typer.Argument(..., help="cluster spec: YAML, or a Tiresias CSV")) -> None:
    """Validate SPEC and print its nodes, GPU types and links."""
    with user_errors():
        cluster = load_cluster(spec)
    console.print(render_cluster(cluster, title=str(spec)))


@app.command("inspect")
def inspect(out: Path = typer.Option(Path("cluster.yaml"), "--out", help="where to write the cluster spec"),
            executor: str = typer.Option("local", "--executor", help="local | ray"),
            ray_address: Optional[str] = typer.Option(None, "--ray-address", help="HOST:PORT of the Ray cluster"),
            gpus: int = typer.Option(2, "--gpus", help="slots of the local executor to measure with"),
            sizes_kib: str = typer.Option("4,256,1024,4096", "--sizes-kib", help="all-reduce message sizes, KiB"),
            reps: int = typer.Option(5, "--reps", min=1, max=100, help="timed all-reduces per size (the fastest counts)")) -> None:
    """Measure each node (device, cores, memory) and each link (gloo all-reduces within and between nodes)
    through the executor; fit link bandwidth and latency; write a cluster spec to OUT and print it."""
    from coddl.errors import ConfigError
    from coddl.runtime.inspection.run import inspect_local, inspect_ray, write_spec

    since = _process_started()
    # torch and Ray are loaded below: the interpreter's last garbage collection at exit would walk all of
    # their objects (0.6 s on the testbed's machine); frozen, it leaves them to the process's end
    atexit.register(gc.freeze)
    try:
        sizes = tuple(int(s) * 1024 for s in sizes_kib.split(","))
        if not sizes or min(sizes) <= 0:
            raise ValueError
    except ValueError:
        raise fail(f"--sizes-kib: expected positive whole KiB separated by commas, got {sizes_kib!r}") from None
    try:
        with console.status("inspecting the cluster: gloo all-reduces within and between nodes"):
            if executor == "local":
                result = inspect_local(gpus, sizes, reps, since=since)
            elif executor == "ray":
                if not ray_address:
                    raise ConfigError("--executor ray needs --ray-address HOST:PORT")
                result = inspect_ray(ray_address, sizes, reps, since=since)
            else:
                raise ConfigError(f"--executor must be local or ray, got {executor!r}")
        with user_errors():
            write_spec(result, out)
    except ConfigError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{out}: cannot write the cluster spec ({e.strerror})") from None
    with user_errors():
        console.print(render_cluster(load_cluster(out), title=f"{out} (inspected in {result.seconds:.1f} s)"))
    console.print(f"inspected in {result.timing()}", style="dim", highlight=False)


def _process_started() -> float | None:
    """When this command's process started (``time.time()``), so that its start-up counts too: its start
    in clock ticks since boot and the time since boot, from /proc (psutil's boot time is whole seconds)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            since_boot = float(f.read().split()[0])
        return time.time() - max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
