"""What confining a worker costs at start-up: the time from ``WorkerPool.launch`` until the job's first
line of code runs, for an unconfined worker and for each kind of confinement, in the same run, from
the same warm pool. Prints JSON (medians and 90th percentiles, milliseconds).

- ``none``: the worker forked from the warm pool, as with ``--unsafe-no-isolation``;
- ``sandbox``: user, mount, PID and IPC namespaces, the state directory hidden, the filesystem made
  read-only, a keeper process and PID 1 of the job — what a server that is not root does;
- ``account`` (only as root): the same without the user namespace, plus the switch to another uid
  (65534 here) and the Python installation shown through a private /root — what a root server does.
- ``account+netns`` (only as root): ``account`` in a fresh network namespace of its own, made for each
  launch and counted in its time — what a root server does for a command job's gang (its first rank;
  the other ranks only join it).

Launches alternate between the kinds so that load on the machine falls on all of them alike; the
load average is printed too.

    python benchmarks/isolation_cost.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from coddl.elastic.pool import WorkerPool
from coddl.elastic.sandbox import Confinement
from coddl.elastic.worker import WorkerSpec
from coddl.runtime.isolation import installation
from coddl.runtime.netns import Networks

FIRST_LINE = "import os, time\nopen(os.environ['STAMP'], 'w').write(repr(time.monotonic()))\n"


def launch_ms(pool: WorkerPool, script: Path, job_dir: Path, confinement: Confinement | None, run: int) -> float:
    """Milliseconds from the launch until the script's first line ran (it writes the monotonic clock,
    which every namespace shares)."""
    stamp = job_dir / f"stamp-{run}"
    spec = WorkerSpec(entry=str(script), env={"STAMP": str(stamp)}, cwd=str(job_dir),
                      log_path=str(job_dir / "logs" / "w.log"), confinement=confinement)
    t0 = time.monotonic()
    p = pool.launch(spec)
    p.join(60)
    if p.exitcode != 0:
        raise RuntimeError(f"worker exited {p.exitcode}: {(job_dir / 'logs' / 'w.log').read_text()[-2000:]}")
    return 1000 * (float(stamp.read_text()) - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="launches of each kind")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    pool = WorkerPool()
    warm_s = pool.warm()
    with tempfile.TemporaryDirectory(prefix="coddl-isolation-") as tmp:
        state = Path(tmp) / "state"
        hide = (str(state), tempfile.gettempdir())
        kinds: dict[str, Confinement | None] = {
            "none": None,
            "sandbox": Confinement(job_dir=str(state / "jobs" / "sandbox"), hide=hide, expose=installation()),
        }
        if os.geteuid() == 0:
            kinds["account"] = Confinement(job_dir=str(state / "jobs" / "account"), hide=hide, expose=installation(),
                                           uid=65534, gid=65534, account="nobody")
            kinds["account+netns"] = replace(kinds["account"], job_dir=str(state / "jobs" / "account+netns"))
        networks = Networks()
        dirs = {k: state / "jobs" / k for k in kinds}
        for d in dirs.values():
            d.mkdir(parents=True)
            (d / "first_line.py").write_text(FIRST_LINE)  # the job's own directory is all a sandbox shows of /tmp
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for run in range(args.runs + 1):
            for kind, c in kinds.items():
                t0 = time.monotonic()
                if kind == "account+netns":
                    path, ino = networks.join(str(run))
                    c = replace(c, network=str(run), netns=path, netns_ino=ino)
                made_ms = 1000 * (time.monotonic() - t0)
                ms = made_ms + launch_ms(pool, dirs[kind] / "first_line.py", dirs[kind], c, run)
                networks.release(str(run))
                if run:  # the first of each kind warms caches
                    times[kind].append(ms)
    base = statistics.median(times["none"])
    print(json.dumps({
        "benchmark": "isolation_cost",
        "what": "launch → first line of the job's code, per worker, warm pool",
        "runs": args.runs, "cpu_count": os.cpu_count(), "platform": platform.platform(), "uid": os.geteuid(),
        "pool_warm_s": round(warm_s, 2),
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "start_ms": {k: {"median": round(statistics.median(v), 1),
                         "p90": round(sorted(v)[int(0.9 * (len(v) - 1))], 1)} for k, v in times.items()},
        "extra_ms_over_none": {k: round(statistics.median(v) - base, 1) for k, v in times.items() if k != "none"},
    }, indent=2))


if __name__ == "__main__":
    main()
