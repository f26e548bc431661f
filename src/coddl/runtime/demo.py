"""``coddl demo``: the real system end to end on this machine in under three minutes.

A server (local executor, 4 logical GPUs) runs in-process; six small real training jobs from
``examples/`` (MLPs and a CNN on synthetic data) arrive over ~40 s through the HTTP API. The policy
re-divides the GPUs as they arrive and finish — running jobs shrink to make room and grow again when
others leave — while a live table shows every job's share and progress. The summary reports each
job's JCT, the resizes and their median latency, all read back from the API.

``--nodes N`` runs the same on a multi-node Ray cluster on this machine (``coddl testbed``, root):
the demo brings up a testbed of N nodes with 2 slots each behind a ``tc``-limited link, runs itself
inside node 0's network namespace with the Ray executor (the server must live in a node, as on a real
cluster, so that workers of every node reach their job's store), and tears the testbed down when it
ends, however it ends. Jobs that span both nodes all-reduce across the limited link.
"""

from __future__ import annotations

import getpass
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coddl.runtime.client import Client, Endpoint
from coddl.runtime.controller import ControllerSettings
from coddl.errors import ConfigError
from coddl.runtime.render import duration, jobs_table
from coddl.runtime.server import DEFAULT_POLICY, HttpServer, Runtime, ServerConfig
from coddl.runtime.spec import JobFile

RESIZES = ("grow", "shrink", "migrate")


@dataclass(frozen=True)
class DemoJob:
    name: str
    script: str
    steps: int
    batch_size: int
    at: float  # seconds after the demo starts
    max_gpus: int = 4


DEMO_JOBS = (
    DemoJob("mlp-long", "train_mlp.py", 500, 128, at=0),
    DemoJob("cnn-a", "train_cnn.py", 60, 64, at=10),
    DemoJob("mlp-b", "train_mlp.py", 200, 128, at=20, max_gpus=2),
    DemoJob("mlp-c", "train_mlp.py", 150, 128, at=30),
    DemoJob("cnn-b", "train_cnn.py", 40, 64, at=40, max_gpus=2),
    DemoJob("mlp-d", "train_mlp.py", 100, 128, at=50),
)


@dataclass(frozen=True)
class DemoResult:
    jobs: list[dict]
    resize_latencies: dict[str, list[float]]  # action → seconds from request to training again
    wall_s: float


def find_examples(given: Path | None = None) -> Path:
    candidates = [given] if given else [Path.cwd() / "examples", Path(__file__).resolve().parents[3] / "examples"]
    for c in candidates:
        if c is not None and (c / "train_mlp.py").is_file() and (c / "train_cnn.py").is_file():
            return c.resolve()
    raise ConfigError("cannot find examples/train_mlp.py and train_cnn.py; run from the coddl checkout "
                      "or pass --examples DIR")


def demo_job(j: DemoJob, examples: Path) -> JobFile:
    return JobFile(name=j.name, command=["python", str(examples / j.script)], model=Path(j.script).stem,
                   min_gpus=1, max_gpus=j.max_gpus, steps=j.steps, batch_size=j.batch_size)


def _gpu_line(jobs: list[dict], node_gpus: list[int]) -> Text:
    """Which job holds each GPU, node by node (``node_gpus``: GPUs per node, in index order)."""
    holder = {g: j["id"] for j in jobs if not j["terminal"] for g in j["gpus"]}
    line = Text("GPUs ")
    g = 0
    for n, count in enumerate(node_gpus):
        if len(node_gpus) > 1:
            line.append(f" n{n} |", style="bold")
        for _ in range(count):
            jid = holder.get(g)
            line.append(f" {g}:{jid if jid is not None else '·'} ", style="bold reverse" if jid is not None else "dim")
            g += 1
    return line


def run_demo(console: Console, policy: str = DEFAULT_POLICY, gpus: int = 4, examples: Path | None = None,
             state_dir: Path | None = None, budget_s: float = 175.0, ray_address: str | None = None) -> DemoResult:
    """Run the demo; whatever is unfinished when ``budget_s`` (start-up included) is up is cancelled.
    With ``ray_address`` the server uses the Ray executor on that cluster (its GPUs, not ``gpus``)."""
    examples = find_examples(examples)
    tmp = None if state_dir is not None else Path(tempfile.mkdtemp(prefix="coddl-demo-"))
    executor = dict(executor="ray", ray_address=ray_address) if ray_address else dict(gpus=gpus)
    config = ServerConfig(state_dir=state_dir or tmp, policy=policy, port=0,
                          controller=ControllerSettings(period_s=5.0), **executor)
    t0 = time.monotonic()
    with console.status("starting the server (warming the worker pool: importing torch once)…"):
        runtime = Runtime(config)
        runtime.start()
        http = HttpServer(runtime.app(), "127.0.0.1", 0)
        http.start()
    client = Client(Endpoint(http.url, runtime.store.create_token(getpass.getuser(), admin=True)))
    node_gpus = [n.gpus for n in runtime.executor.cluster.nodes]
    where = f"{sum(node_gpus)} GPUs" + (f" on {len(node_gpus)} Ray nodes" if ray_address else "")
    console.print(f"server on {http.url} — policy {runtime.scheduler.policy.describe()}, {where} "
                  f"(ready in {time.monotonic() - t0:.1f} s); submitting {len(DEMO_JOBS)} jobs over "
                  f"{DEMO_JOBS[-1].at:.0f} s")
    try:
        jobs = _drive(console, client, examples, node_gpus, budget_s - (time.monotonic() - t0))
        latencies: dict[str, list[float]] = {a: [] for a in RESIZES}
        for j in jobs:
            for e in client.job(j["id"])["events"]:
                if e["kind"] == "applied" and e["action"] in RESIZES:
                    latencies[e["action"]].append(e["latency_s"])
        return DemoResult(jobs, latencies, time.monotonic() - t0)
    finally:
        client.close()
        http.stop()
        runtime.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _drive(console: Console, client: Client, examples: Path, node_gpus: list[int], deadline_s: float) -> list[dict]:
    pending = list(DEMO_JOBS)
    start = time.monotonic()
    jobs: list[dict] = []
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            now = time.monotonic() - start
            while pending and pending[0].at <= now:
                client.submit(demo_job(pending.pop(0), examples))
            jobs = client.jobs()
            live.update(Group(_gpu_line(jobs, node_gpus), jobs_table(jobs, title=f"t = {now:.0f} s", width=console.width)))
            if not pending and jobs and all(j["terminal"] for j in jobs):
                return jobs
            if now > deadline_s:
                for j in jobs:
                    if not j["terminal"]:
                        client.cancel(j["id"])
                console.print(f"[red]demo deadline ({deadline_s:.0f} s) passed: cancelled the unfinished jobs[/red]")
                return client.jobs()
            time.sleep(0.5)


def run_on_testbed(console: Console, nodes: int, bandwidth: str, policy: str, examples: Path | None) -> int:
    """Bring up a testbed of ``nodes`` nodes (2 slots each, links limited to ``bandwidth``), run the
    demo inside node 0 with the Ray executor, and tear the testbed down; the inner demo's exit code.
    Raises TestbedError (one line) where a testbed cannot be built."""
    from coddl.runtime.testbed import cluster as tb
    from coddl.runtime.testbed.netns import LinkLimit, TestbedError, parse_bandwidth, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise TestbedError(f"--nodes {nodes} needs a network-namespace testbed, which cannot be built here: {reason}")
    examples = find_examples(examples)
    try:
        rate = parse_bandwidth(bandwidth)
    except ValueError as e:
        raise TestbedError(f"--bandwidth: {e}") from None
    spec = tb.TestbedSpec(nodes=nodes, gpus_per_node=2, cpus_per_node=1, link=LinkLimit(rate, 0.0),
                          prefix=DEMO_TESTBED)
    with console.status(f"starting {nodes} Ray nodes behind {spec.link.describe()} links (coddl testbed)"):
        bed = tb.up(spec)
    try:
        console.print(f"testbed up: {nodes} nodes, links {spec.link.describe()}, Ray at {bed.ray_address}; "
                      f"the server runs in node 0 ({bed.node_ns(0)})")
        inner = ["ip", "netns", "exec", bed.node_ns(0), "env", *(f"{k}={v}" for k, v in bed.node_env().items()),
                 sys.executable, "-m", "coddl.cli", "demo", "--ray-address", bed.ray_address, "--policy", policy,
                 "--examples", str(examples)]
        return subprocess.run(inner).returncode
    finally:
        with console.status("tearing the testbed down"):
            tb.down(spec.prefix)


DEMO_TESTBED = "coddl-demo"  # the namespaces' prefix of the demo's own testbed


def summary(result: DemoResult) -> Group:
    t = Table(title="demo summary")
    for col in ("job", "status", "JCT", "resizes", "final loss"):
        t.add_column(col, justify="left" if col in ("job", "status") else "right")
    for j in result.jobs:
        jct = j["finished_at"] - j["submitted_at"] if j["finished_at"] else None
        t.add_row(f"{j['id']} {j['name']}", j["status"], duration(jct), str(j["resizes"]),
                  "-" if j["loss"] is None else f"{j['loss']:.4f}")
    lat = result.resize_latencies
    every = [s for v in lat.values() for s in v]
    counts = ", ".join(f"{len(v)} {a}{'s' if len(v) != 1 else ''}" for a, v in lat.items())
    med = f"median resize latency {statistics.median(every):.2f} s" if every else "no resizes"
    line = Text(f"{len(every)} resizes ({counts}); {med} (request → training on the new GPUs); "
                f"wall time {result.wall_s:.0f} s")
    if not (lat["grow"] and lat["shrink"]):
        line.append("\nthis run saw no grow or no shrink of a running job (timing-dependent on a busy machine)",
                    style="yellow")
    return Group(t, line)
