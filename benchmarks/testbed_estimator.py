"""How well the real system's estimator predicts real jobs on the two-node testbed, before and after one
online correction. Prints JSON (and a markdown table on stderr).

The real system's own path, step by step, with no server in between so that each placement is chosen
here rather than by a policy:

1. ``coddl testbed up``: two network namespaces of 4 worker slots each, a real Ray cluster, the link
   between them limited by ``tc`` (``--rate``); ``coddl cluster inspect`` (Ray) calibrates the links;
2. in node 0, the Ray executor (``RayExecutor``, as ``coddl server start --executor ray`` builds it,
   with the spec applied as ``--cluster`` applies it) runs each job of ``MODELS`` — real elastic jobs
   (``examples/synthetic_job.py``: a dense gradient of PARAMS floats all-reduced over gloo every step,
   a fixed global batch of ``--batch``, compute a sleep of SAMPLE_S per sample standing in for a GPU's
   kernels: this host has two cores, so 8 CPU-bound workers would measure the cores, not the job) —
   first on one GPU with job inspection on, then resized in place through the placements below,
   each measured from the job's progress reports (median steps/s over ``--measure-s`` after
   ``--warmup-s``);
3. the controller's estimator (``runtime.estimation.Estimates``) builds the job's profile from its
   inspection report and predicts every placement (*before*); then, for each measured multi-GPU
   placement in turn, folds that one measurement in with its online correction and predicts the
   others (*after 1*, the mean over every choice of the measured placement, never a hand-picked
   one), against Amdahl's law fitted to the same point and the same one-GPU rate, and linear scaling.

Everything the testbed started is removed at the end (also on failure or Ctrl-C). Needs root and Ray.

    sudo .venv/bin/python benchmarks/testbed_estimator.py [--rate 200mbit] [--measure-s 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from copy import deepcopy
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "examples" / "synthetic_job.py"
TESTBED = "cestb"
NODE_SLOTS = 4
# name → (gradient floats, compute seconds per sample): little, some and much communication per compute
MODELS = {"light": (250_000, 0.004), "medium": (2_000_000, 0.004), "heavy": (6_000_000, 0.002)}
# GPUs of each placement (global indices: node 0 holds 0-3, node 1 holds 4-7)
PLACEMENTS = ((0, 1), (0, 1, 2, 3), (0, 4), (0, 1, 4, 5), (0, 1, 2, 4, 5, 6), (0, 1, 2, 3, 4, 5, 6, 7))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ inside node 0

def per_node(gpus: tuple[int, ...]) -> tuple[int, ...]:
    counts = [sum(1 for g in gpus if g // NODE_SLOTS == n) for n in range(2)]
    return tuple(sorted((c for c in counts if c), reverse=True))


def drain(executor, job_id: str, into: list, inspections: list) -> None:  # noqa: ANN001
    from coddl.runtime.executors.base import ExitEvent, InspectionEvent, ProgressEvent

    for ev in executor.events():
        if getattr(ev, "job_id", None) != job_id:
            continue
        if isinstance(ev, ProgressEvent):
            into.append(ev)
        elif isinstance(ev, InspectionEvent):
            inspections.append(ev.inspection)
        elif isinstance(ev, ExitEvent):
            raise SystemExit(f"job {job_id} ended: {ev.message}")


def measure_job(executor, name: str, params: int, sample_s: float, args, work: Path) -> dict:  # noqa: ANN001
    from coddl.core.allocation import Action, ActionKind, Plan, classify
    from coddl.runtime.executors.base import LaunchSpec

    job_id = name
    env = {"PARAMS": str(params), "SAMPLE_S": str(sample_s), "STEPS": "10000000", "GLOBAL_BATCH": str(args.batch),
           "CODDL_INSPECT": "1"}
    executor.register(LaunchSpec(job_id, str(JOB), (), env, work / name))
    reports: list = []
    inspections: list = []
    old: tuple[int, ...] = ()
    rates: dict[tuple[int, ...], float] = {}
    for gpus in ((0,), *PLACEMENTS):
        kind = ActionKind.START if not old else classify(old, gpus, True)
        executor.apply(Plan([Action(kind, job_id, old, gpus)]))
        old = gpus
        t0 = time.time()
        while True:  # reports from this placement only: the first full window at its world size
            time.sleep(0.2)
            drain(executor, job_id, reports, inspections)
            now = [r for r in reports if r.world_size == len(gpus) and r.at > t0]
            if now and (len(gpus) > 1 or inspections):
                break
            if time.time() - t0 > 300:
                raise SystemExit(f"{name}: no progress on {gpus} within 300 s")
        start = time.time() + args.warmup_s  # the first report here (and, on one GPU, the inspection) is in
        while time.time() < start + args.measure_s:
            time.sleep(0.2)
            drain(executor, job_id, reports, inspections)
        window = [r.steps_per_s for r in reports if r.world_size == len(gpus) and start <= r.at <= start + args.measure_s]
        rates[gpus] = statistics.median(window) if window else float("nan")
        log(f"  {name} on {per_node(gpus)}: {rates[gpus]:.3f} steps/s ({len(window)} reports)")
    executor.cancel(job_id)
    return {"rates": rates, "inspection": inspections[0]}


def predict(cluster, name: str, inspection, measured: dict) -> dict:  # noqa: ANN001
    from coddl.runtime.estimation import Estimates

    est = Estimates(cluster)
    est.inspected(name, name, cluster.nodes[0].gpu_type, inspection)
    types = (cluster.nodes[0].gpu_type,)

    def rate_on(e: Estimates, gpus: tuple[int, ...]) -> float:
        shape = per_node(gpus)
        return e.shape_rate(name, shape, types * len(shape))

    multi = [g for g in PLACEMENTS if measured[g] > 0]
    one = measured[(0,)]
    before = {g: rate_on(est, g) for g in multi}
    after: dict[tuple[int, ...], list[float]] = {g: [] for g in multi}
    amdahl: dict[tuple[int, ...], list[float]] = {g: [] for g in multi}
    worse_near = []
    for chosen in multi:
        e = deepcopy(est)
        e.observe(name, per_node(chosen), measured[chosen])
        e.correct(name)
        # Amdahl's law through the one-GPU rate and the chosen point: rate(k) = one / (s + (1 - s) / k)
        k = len(chosen)
        s = min(1.0, max(0.0, (one / measured[chosen] - 1 / k) / (1 - 1 / k)))
        for g in multi:
            if g == chosen:
                continue
            after[g].append(rate_on(e, g))
            amdahl[g].append(one / (s + (1 - s) / len(g)))
        near = [g for g in multi if g != chosen and len(chosen) / 2 <= len(g) <= 2 * len(chosen)]
        if near:
            b = statistics.mean(abs(before[g] / measured[g] - 1) for g in near)
            a = statistics.mean(abs(rate_on(e, g) / measured[g] - 1) for g in near)
            worse_near.append(a > b)

    def mape(pred: dict) -> float:
        errs = [abs(p / measured[g] - 1) for g, ps in pred.items() for p in (ps if isinstance(ps, list) else [ps])]
        return 100 * statistics.mean(errs)

    return {"before": mape(before), "after_1": mape(after), "amdahl_1": mape(amdahl),
            "linear": mape({g: one * len(g) for g in multi}),
            "worse_near": sum(worse_near) / len(worse_near) if worse_near else 0.0,
            "predicted_before": {str(per_node(g)): round(before[g], 3) for g in multi},
            "measured": {str(per_node(g)): round(measured[g], 3) for g in [(0,), *multi]}}


def inner(args: argparse.Namespace) -> None:
    from coddl.clusterspec import load_cluster
    from coddl.runtime.calibrated import with_spec
    from coddl.runtime.executors.ray import RayExecutor

    executor = RayExecutor(args.address)
    executor.cluster = with_spec(executor.cluster, load_cluster(Path(args.spec)), args.spec)
    links = executor.cluster.links
    log(f"cluster: {[n.gpus for n in executor.cluster.nodes]} slots, inter-node {links.inter_node_gbps:.4g} GB/s, "
        f"intra-node {links.intra_node_gbps:.4g} GB/s")
    out = {}
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            for name, (params, sample_s) in MODELS.items():
                m = measure_job(executor, name, params, sample_s, args, Path(tmp))
                out[name] = {"gradient_mb": params * 4 / 1e6, "sample_ms": sample_s * 1e3,
                             **predict(executor.cluster, name, m["inspection"], m["rates"])}
    finally:
        executor.close()
    print(json.dumps(out))


# ------------------------------------------------------------------------------------ on the host

def outer(args: argparse.Namespace) -> None:
    from coddl.runtime.testbed import cluster as tb
    from coddl.runtime.testbed.netns import LinkLimit, parse_rate, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"cannot build the testbed: {reason}")
    spec = tb.TestbedSpec(nodes=2, gpus_per_node=NODE_SLOTS, cpus_per_node=1,
                          link=LinkLimit(parse_rate(args.rate), 0.0), prefix=TESTBED)
    log(f"testbed: 2 nodes x {NODE_SLOTS} slots, {spec.link.describe()}")
    bed = tb.up(spec)
    try:
        env = [f"{k}={v}" for k, v in bed.node_env().items()]
        ns = ["ip", "netns", "exec", bed.node_ns(0), "env", *env]
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            spec_file = Path(tmp) / "cluster.yaml"
            t0 = time.monotonic()
            subprocess.run([*ns, sys.executable, "-m", "coddl.cli", "cluster", "inspect", "--executor", "ray",
                            "--ray-address", bed.ray_address, "--out", str(spec_file)], check=True,
                           capture_output=True, text=True)
            log(f"cluster inspect: {time.monotonic() - t0:.1f} s")
            r = subprocess.run([*ns, sys.executable, __file__, "--inner", "--address", bed.ray_address,
                                "--spec", str(spec_file), "--batch", str(args.batch), "--warmup-s", str(args.warmup_s),
                                "--measure-s", str(args.measure_s)], capture_output=True, text=True)
            sys.stderr.write(r.stderr[-6000:])
            if r.returncode != 0:
                raise SystemExit(f"the measurement failed ({r.returncode})")
            results = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        tb.down(spec.prefix)
    summary = {"rate": args.rate, "batch": args.batch, "load_average": os.getloadavg()[0], "models": results}
    print(json.dumps(summary, indent=1))
    log("| model | gradient | before | after 1 | Amdahl 1 | linear | worse near |")
    log("|---|---:|---:|---:|---:|---:|---:|")
    for name, m in results.items():
        log(f"| {name} | {m['gradient_mb']:.0f} MB | {m['before']:.1f} | {m['after_1']:.1f} | {m['amdahl_1']:.1f} | "
            f"{m['linear']:.1f} | {100 * m['worse_near']:.0f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="200mbit", help="the inter-node link's rate (tc units)")
    ap.add_argument("--batch", type=int, default=64, help="global batch (fixed whatever the GPUs)")
    ap.add_argument("--warmup-s", type=float, default=4.0)
    ap.add_argument("--measure-s", type=float, default=12.0)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    (inner if args.inner else outer)(args)


if __name__ == "__main__":
    main()
