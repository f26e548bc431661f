"""The what-if replay as ONE self-contained HTML file: tables, and plots embedded as base64 PNG, with
no reference to anything outside the file — it can be mailed, archived or opened offline.

The plots are the simulator's own (``sim.report``: JCT CDF, utilisation over time) drawn into memory,
plus one of the teams' average JCT and queueing per run.
"""

from __future__ import annotations

import base64
import io
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from jinja2 import Environment, PackageLoader, select_autoescape  # noqa: E402

from coddl.policies.registry import make_policy  # noqa: E402
from coddl.sim.replay import RECORDED, SAME, ReplayResult, best_for_team  # noqa: E402
from coddl.sim.run import queued_label  # noqa: E402
from coddl.sim.report import plot_jct_cdf, plot_utilisation  # noqa: E402

MAX_TEAMS_PLOTTED = 12


def png(draw: Callable[[io.BytesIO], None]) -> str:
    """A plot drawn by ``draw(file)`` as a data: URI."""
    buf = io.BytesIO()
    draw(buf)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def plot_teams(path: io.BytesIO | Path, rr: ReplayResult) -> None:
    """Average JCT and queueing of the teams with the most recorded GPU-hours, one bar per run."""
    teams = list(rr.teams)[:MAX_TEAMS_PLOTTED]
    runs = list(rr.results)
    fig, axes = plt.subplots(1, 2, figsize=(11, 1.2 + 0.45 * len(teams) * max(1, len(runs)) ** 0.5), sharey=True)
    y = np.arange(len(teams))
    h = 0.8 / len(runs)
    cmap = plt.get_cmap("tab20")
    for ax, what, title in ((axes[0], "avg_jct", "average JCT (hours)"), (axes[1], "avg_queueing", "average queueing (hours)")):
        for i, run in enumerate(runs):
            v = [getattr(rr.teams[t][run], what) / 3600 for t in teams]
            ax.barh(y + i * h - 0.4 + h / 2, v, height=h, label=run, color="black" if run == RECORDED else cmap(i % 20))
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, teams)
    axes[0].invert_yaxis()
    axes[1].legend(loc="lower right", fontsize=8)
    fig.suptitle("per team (account), as recorded and under each policy")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def _hours(s: float) -> str:
    return f"{s / 3600:.2f}"


def _change(new: float, old: float) -> tuple[str, str]:
    """(text, css class) of a relative change; lower is better."""
    if old <= 0:
        return "n/a", ""
    c = new / old - 1.0
    return f"{c:+.0%}", "better" if c < -SAME else "worse" if c > SAME else "same"


def _date(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def render(rr: ReplayResult, generated_by: str) -> str:
    env = Environment(loader=PackageLoader("coddl.sim", "templates"), autoescape=select_autoescape(["html"]))
    env.filters["hours"] = _hours
    env.filters["pct"] = lambda x: f"{x:.1%}"
    h = rr.history
    recorded = rr.summaries[0]
    elastic = {p: make_policy(p).elastic for p in rr.config.policies}
    elastic.update({queued_label(p): e for p, e in elastic.items()})
    teams = []
    for team, stats in rr.teams.items():
        base = stats[RECORDED]
        best = best_for_team(stats)
        runs = [(run, s, *_change(s.avg_jct, base.avg_jct)) for run, s in stats.items()]
        teams.append({"name": team, "base": base, "runs": runs, "best": best, "best_stats": stats[best],
                      "best_change": _change(stats[best].avg_jct, base.avg_jct)})
    rows = [(s, *_change(s.avg_jct, recorded.avg_jct)) for s in rr.summaries]
    best_avg = min(s.avg_jct for s in rr.summaries[1:])
    end = max(j.end for j in h.jobs)
    return env.get_template("replay.html").render(
        h=h, rr=rr, rows=rows, best_avg=best_avg, teams=teams, elastic=elastic, recorded=RECORDED,
        span=f"{_date(h.origin)} to {_date(end)}", cluster=rr.prepared.cluster, same=SAME,
        quotas=rr.config.queues, queues=_queue_rows(rr),
        generated_by=generated_by,
        plots={
            "jct": png(lambda f: plot_jct_cdf(f, rr.results)),
            "util": png(lambda f: plot_utilisation(f, rr.results)),
            "teams": png(lambda f: plot_teams(f, rr)),
        },
    )


def _queue_rows(rr: ReplayResult) -> list[dict]:
    """One row per queue that had jobs: its quota, and per run its attainment and borrowed GPU-hours."""
    if not rr.queues:
        return []
    runs = list(rr.queues)
    rows = []
    for i, base in enumerate(rr.queues[RECORDED]):
        if base.jobs:
            rows.append({"name": base.queue, "quota": base.nominal_gpus, "jobs": base.jobs,
                         "runs": [(run, rr.queues[run][i]) for run in runs]})
    return rows


def write_html(path: Path, rr: ReplayResult, generated_by: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(rr, generated_by), encoding="utf-8")
