"""Rich views of what the API returns (plain JSON dicts), shared by the CLI and the demo."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable

from rich import box
from rich.cells import cell_len
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


def number(value: Any, spec: str) -> str:
    """``value`` formatted, or '-' for none and '?' for something that is not a number (a damaged row)."""
    if value is None:
        return "-"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return "?"


def _progress(j: dict[str, Any]) -> str:
    pct = 100.0 * j["steps_done"] / j["total_steps"] if j["total_steps"] else 0.0
    return f"{j['steps_done']}/{j['total_steps']} ({pct:.0f}%)"


# (title, justify, cell) in display order, and the order in which columns give way on a narrow terminal
_JOB_COLUMNS: tuple[tuple[str, str, Callable[[dict[str, Any], float], Any]], ...] = (
    ("id", "right", lambda j, _now: str(j["id"])),
    ("name", "left", lambda j, _now: Text(j["name"])),  # Text: a name is never read as markup
    ("user", "left", lambda j, _now: Text(j["owner"])),
    ("status", "left", lambda j, _now: status_text(j)),
    ("GPUs", "left", lambda j, _now: gpus_text(j)),
    ("progress", "right", lambda j, _now: _progress(j)),
    ("loss", "right", lambda j, _now: number(j["loss"], ".4f")),
    ("steps/s", "right", lambda j, _now: "-" if j["terminal"] else number(j["steps_per_s"], ".1f")),
    ("resizes", "right", lambda j, _now: str(j["resizes"])),
    ("time", "right", lambda j, now: duration(elapsed(j, now))),
)
_GIVE_WAY = ("resizes", "steps/s", "loss", "time", "GPUs", "progress", "user")  # id, name, status always stay
_SHRINKABLE = ("name", "user")  # cut with an ellipsis when even the essential columns are too wide
_GAP = "   "


def _cell(value: str | Text, width: int, justify: str) -> Text:
    text = value.copy() if isinstance(value, Text) else Text(value)
    text.truncate(width, overflow="ellipsis", pad=False)
    pad = width - text.cell_len
    return Text(" " * pad) + text if justify == "right" else text + Text(" " * pad)


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None, width: int | None = None) -> Text:
    """The jobs as aligned columns that fit ``width``: the least needed columns give way first, then
    names are cut; ids are never cut (people type them into `coddl show`). Plain ``Text`` rather than
    a Rich ``Table``: a table costs ~1 ms a row, and ``coddl jobs --all`` may list 100,000."""
    now = time.time()
    cells = {title_: [cell(j, now) for j in jobs] for title_, _, cell in _JOB_COLUMNS}
    natural = {t: max([len(t), *(cell_len(c) if isinstance(c, str) else c.cell_len for c in cs)])
               for t, cs in cells.items()}
    natural["GPUs"] = min(natural["GPUs"], 16)  # "64 [0,1,2,…": the count first, the list as room allows
    shown = [t for t, _, _ in _JOB_COLUMNS]

    def total(cols: list[str]) -> int:
        return sum(natural[c] for c in cols) + len(_GAP) * (len(cols) - 1)

    if width is not None:
        for t in _GIVE_WAY:
            if total(shown) <= width:
                break
            shown.remove(t)
        excess = total(shown) - width
        for t in _SHRINKABLE:
            if excess > 0 and t in shown:
                cut = min(excess, natural[t] - max(len(t), 4))
                natural[t] -= cut
                excess -= cut
    justify = {t: j for t, j, _ in _JOB_COLUMNS}
    gap = Text(_GAP)
    header = gap.join(_cell(t, natural[t], justify[t]) for t in shown)
    header.stylize("bold")
    lines = [header, Text("─" * total(shown))]
    lines += [gap.join(_cell(cells[t][i], natural[t], justify[t]) for t in shown) for i in range(len(jobs))]
    if title:
        lines.insert(0, Text(title, style="italic"))
    out = Text("\n").join(lines)
    out.no_wrap, out.overflow = True, "ellipsis"
    return out


def _clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a damaged row: show that, not a traceback
        return "?"


def _words(value: Any) -> str:
    return " ".join(str(w) for w in value) if isinstance(value, list) else str(value)


def _runs(spec: dict[str, Any]) -> tuple[str, str]:
    """(what the job runs, its model and GPU range) from a stored spec; a spec an earlier version
    stored differently (or a damaged one) shows '?' where a field is missing, never an error."""
    if spec.get("command"):
        what = _words(spec["command"])
    else:
        what = " ".join([str(spec.get("entrypoint", "?")), _words(spec.get("args") or [])]).strip()
    model = f"{spec.get('model', '?')}; GPUs {spec.get('min_gpus', '?')}…{spec.get('max_gpus') or 'any'}"
    return what, model


def job_view(job: dict[str, Any]) -> Group:
    what, model = _runs(job["spec"] if isinstance(job.get("spec"), dict) else {})
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    losses = [s["loss"] for s in job.get("samples", []) if isinstance(s["loss"], (int, float))]
    rows = [
        ("job", f"{job['id']} {job['name']} (user {job['owner']})"),
        ("status", status_text(job)),
        ("runs", what),
        ("model", model),
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
        head.add_row(k, v if isinstance(v, Text) else Text(v))  # Text: a message is never read as markup
    events = Table(title="events", title_justify="left")
    for col in ("time", "event", "action", "GPUs", "latency", "detail"):
        events.add_column(col)
    for e in job.get("events", []):
        gpus = e["gpus_after"]
        events.add_row(_clock(e["at"]), e["kind"], e["action"] or "",
                       "" if gpus is None else f"{list(e['gpus_before'] or [])} → {gpus}" if e["gpus_before"] is not None
                       else str(gpus),
                       "" if e["latency_s"] is None else f"{e['latency_s']:.2f}s", Text(e["detail"] or ""))
    return Group(head, events)


def _floor(belief: dict[str, Any]) -> str:
    """The device's compute floor, where the job's one-GPU steps showed one (profiles stored before
    the floor existed have no such field)."""
    floor = belief.get("t_floor_s") or 0.0
    return f" (never under {floor * 1e3:.3g} ms, the device's floor)" if floor > 0 else ""


def profile_view(job_id: int, p: dict[str, Any]) -> Group:
    """``coddl profile``: the job's one-GPU rows, the belief and the curve it is planned on."""
    b = p["belief"]
    batch = f"global batch {p['global_batch']}" if p.get("global_batch") else f"local batch {p['local_batch']}"
    head = Text(f"job {job_id}: {p['profile'][0]['param_bytes'] / 1e6:.3g} MB of gradients per step, {batch}; "
                f"one-GPU step {b['t_ref_s'] * 1e3:.3g} ms at local batch {b['b_ref']:.3g}"
                f"{_floor(b)}, fixed share "
                f"{b['fixed_share']:.2f}, communication efficiency {b['comm_efficiency']:.3g}, overlap γ "
                f"{b['overlap_gamma']:.2f}; {b['measured_steps']} measured multi-GPU rows folded in; more than "
                f"{p['useful_gpus']} GPUs would not make it faster")
    rows = Table(title="measured (profile format)", title_justify="left")
    for col in ("GPUs", "placement", "local batch", "steps/s"):
        rows.add_column(col, justify="right")
    for r in [*p["profile"], *p["measured"]]:
        rows.add_row(str(r["gpus"]), "+".join(str(g) for g in r["placement"]), f"{r['local_batch']:.4g}",
                     f"{r['steps_per_s']:.4g}")
    curve = Table(title="planned curve", title_justify="left")
    curve.add_column("GPUs", justify="right")
    curve.add_column("steps/s", justify="right")
    curve.add_column("speed-up", justify="right")
    n = len(p["curve"])
    for k, r in enumerate(p["curve"], start=1):
        if k <= 8 or k & (k - 1) == 0 or k in (n, p["useful_gpus"]):  # a big cluster's curve in powers of two
            curve.add_row(str(k), f"{r:.4g}", f"{r / p['curve'][0]:.2f}×")
    return Group(head, rows, curve)


def cluster_view(c: dict[str, Any]) -> Group:
    head = Text(f"{c['executor']} executor, policy {c['policy']}: {c['gpus_in_use']}/{c['total_gpus']} GPUs in use; "
                + ", ".join(f"{n} {s}" for s, n in sorted(c["jobs"].items())))
    t = Table()
    for col in ("node", "GPU type", "CPUs", "GPUs (job holding each)"):
        t.add_column(col)
    for n in c["nodes"]:
        cells = []
        for g in n["gpus"]:
            seen = g.get("jobs") or ([g["job"]] if g["job"] is not None else [])
            hidden = max(0, g.get("tenants", len(seen)) - len(seen))
            holder = "+".join([*map(str, seen), *(["x"] * hidden)]) if g["busy"] else "·"
            cells.append(f"{g['gpu']}:{holder}")
        t.add_row(n["name"], n["gpu_type"], str(n["cpus"]), "  ".join(cells))
    return Group(head, t, Text("· free   x another user's job   a+b jobs sharing one GPU", style="dim"))


def _date(ts: float | None) -> str:
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return "?"


def tokens_table(tokens: list[dict[str, Any]]) -> Table:
    """API tokens as ``GET /tokens`` returns them: never the token, its digest's first characters."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, justify in (("id", "right"), ("user", "left"), ("role", "left"), ("fingerprint", "left"),
                         ("created", "left"), ("expires", "left"), ("state", "left")):
        t.add_column(col, justify=justify, no_wrap=col in ("id", "fingerprint"))
    styles = {"active": "green", "expired": "yellow", "revoked": "red"}
    for k in tokens:
        state = k["state"] + (f" by {k['revoked_by']}" if k["state"] == "revoked" and k.get("revoked_by") else "")
        t.add_row(str(k["id"]), Text(k["user"]), "admin" if k["admin"] else "user", k["fingerprint"],
                  _date(k["created_at"]), _date(k["expires_at"]) if k["expires_at"] else "never",
                  Text(state, style=styles.get(k["state"], "")))
    return t
