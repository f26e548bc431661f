"""Rich views of what the API returns (plain JSON dicts), shared by the CLI and the demo."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

STATUS_STYLE = {"queued": "yellow", "running": "green", "suspended": "magenta", "finished": "blue",
                "failed": "red", "cancelled": "dim"}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def status_text(job: dict[str, Any]) -> Text:
    status = job["status"]
    label = "cancelling" if job.get("cancel_requested") and not job.get("terminal") else status
    return Text(label, style=STATUS_STYLE.get(status, ""))


def elapsed(job: dict[str, Any], now: float | None = None) -> float:
    end = job["finished_at"] if job["finished_at"] is not None else (now or time.time())
    return end - job["submitted_at"]


def gpus_text(job: dict[str, Any]) -> str:
    gpus = job.get("gpus") or []
    return f"{len(gpus)} [{','.join(str(g) for g in gpus)}]" if gpus else "0"


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    t = Table(title=title)
    for col, justify in (("id", "right"), ("name", "left"), ("user", "left"), ("status", "left"),
                         ("GPUs", "left"), ("progress", "right"), ("loss", "right"), ("steps/s", "right"),
                         ("resizes", "right"), ("time", "right")):
        t.add_column(col, justify=justify, no_wrap=True)
    now = time.time()
    for j in jobs:
        pct = 100.0 * j["steps_done"] / j["total_steps"] if j["total_steps"] else 0.0
        t.add_row(str(j["id"]), j["name"], j["owner"], status_text(j), gpus_text(j),
                  f"{j['steps_done']}/{j['total_steps']} ({pct:.0f}%)",
                  "-" if j["loss"] is None else f"{j['loss']:.4f}",
                  "-" if j["steps_per_s"] is None or j["terminal"] else f"{j['steps_per_s']:.1f}",
                  str(j["resizes"]), duration(elapsed(j, now)))
    return t


def _clock(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def job_view(job: dict[str, Any]) -> Group:
    spec = job["spec"]
    what = " ".join(spec["command"]) if spec.get("command") else " ".join([spec["entrypoint"], *spec.get("args", [])])
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    losses = [s["loss"] for s in job.get("samples", []) if s["loss"] is not None]
    rows = [
        ("job", f"{job['id']} {job['name']} (user {job['owner']})"),
        ("status", status_text(job)),
        ("runs", what),
        ("model", f"{spec['model']}; GPUs {spec['min_gpus']}…{spec.get('max_gpus') or 'any'}"),
        ("GPUs now", gpus_text(job)),
        ("progress", f"{job['steps_done']}/{job['total_steps']} steps"),
        ("loss", f"{losses[0]:.4f} → {losses[-1]:.4f} ({len(losses)} reports)" if losses else "-"),
        ("submitted", _clock(job["submitted_at"])),
        ("started", _clock(job["started_at"])),
        ("ended", f"{_clock(job['finished_at'])} (JCT {duration(elapsed(job))})" if job["finished_at"] else "-"),
        ("resizes", str(job["resizes"])),
    ]
    if job.get("message"):
        rows.append(("message", job["message"]))
    for k, v in rows:
        head.add_row(k, v)
    events = Table(title="events", title_justify="left")
    for col in ("time", "event", "action", "GPUs", "latency", "detail"):
        events.add_column(col)
    for e in job.get("events", []):
        gpus = e["gpus_after"]
        events.add_row(_clock(e["at"]), e["kind"], e["action"] or "",
                       "" if gpus is None else f"{list(e['gpus_before'] or [])} → {gpus}" if e["gpus_before"] is not None
                       else str(gpus),
                       "" if e["latency_s"] is None else f"{e['latency_s']:.2f}s", e["detail"] or "")
    return Group(head, events)


def cluster_view(c: dict[str, Any]) -> Group:
    head = Text(f"{c['executor']} executor, policy {c['policy']}: {c['gpus_in_use']}/{c['total_gpus']} GPUs in use; "
                + ", ".join(f"{n} {s}" for s, n in sorted(c["jobs"].items())))
    t = Table()
    for col in ("node", "GPU type", "CPUs", "GPUs (job holding each)"):
        t.add_column(col)
    for n in c["nodes"]:
        cells = []
        for g in n["gpus"]:
            holder = str(g["job"]) if g["job"] is not None else ("x" if g["busy"] else "·")
            cells.append(f"{g['gpu']}:{holder}")
        t.add_row(n["name"], n["gpu_type"], str(n["cpus"]), "  ".join(cells))
    return Group(head, t, Text("· free   x another user's job", style="dim"))
