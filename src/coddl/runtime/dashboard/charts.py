"""Small inline SVG charts drawn on the server: GPUs held over time (stacked steps) and a line per
series (throughput). No charting library in the browser, no script needed to see them, and they
print; the page's Content-Security-Policy can forbid inline styles because only SVG attributes are used."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from markupsafe import Markup, escape

W, H = 760, 220  # viewBox; the SVG scales to its box
LEFT, RIGHT, TOP, BOTTOM = 46, 150, 10, 26
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#393b79", "#ad494a", "#637939")
OTHERS = "#b9b9b9"
SPARSE = 40  # series with at most this many points get a dot per point


def colour(job_id: int) -> str:
    return PALETTE[job_id % len(PALETTE)]


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    points: list[tuple[float, float]]  # (Unix time, value), a step function (holds until the next point)


def _x(t: float, t0: float, t1: float) -> float:
    return LEFT + (W - LEFT - RIGHT) * (t - t0) / max(t1 - t0, 1e-9)


def _y(v: float, top: float) -> float:
    return H - BOTTOM - (H - TOP - BOTTOM) * v / max(top, 1e-9)


def _levels(points: list[tuple[float, float]], times: list[float]) -> list[float]:
    """The step function's value at each of ``times`` (both in time order), in one sweep."""
    out, v, i = [], 0.0, 0
    for t in times:
        while i < len(points) and points[i][0] <= t:
            v = points[i][1]
            i += 1
        out.append(v)
    return out


def _frame(t0: float, t1: float, top: float, legend: list[Series], title: str) -> list[str]:
    parts = [f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>"]
    for frac in (0.0, 0.5, 1.0):
        y = _y(top * frac, top)
        parts.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        label = f"{top * frac:.3g}"
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#555">{label}</text>')
    for t, anchor in ((t0, "start"), ((t0 + t1) / 2, "middle"), (t1, "end")):
        clock = datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")
        parts.append(f'<text x="{_x(t, t0, t1):.1f}" y="{H - 8}" text-anchor="{anchor}" font-size="11" '
                     f'fill="#555">{clock} UTC</text>')
    for i, s in enumerate(legend[:12]):
        y = TOP + 6 + 15 * i
        parts.append(f'<rect x="{W - RIGHT + 10}" y="{y}" width="10" height="10" fill="{s.colour}"/>')
        parts.append(f'<text x="{W - RIGHT + 25}" y="{y + 9}" font-size="11" fill="#333">{escape(s.label[:20])}</text>')
    return parts


def stacked_steps(series: list[Series], t0: float, t1: float, capacity: int, title: str) -> Markup:
    """GPUs held over [t0, t1], one band per series stacked in order, the y axis up to ``capacity``."""
    times = sorted({t0, t1, *(t for s in series for t, _ in s.points if t0 < t < t1)})
    parts = _frame(t0, t1, capacity, series, title)
    base = [0.0] * len(times)
    for s in series:
        level = _levels(s.points, times)
        top = [b + v for b, v in zip(base, level)]
        if any(level):
            upper = " ".join(f"{_x(a, t0, t1):.1f},{_y(v, capacity):.1f} {_x(b, t0, t1):.1f},{_y(v, capacity):.1f}"
                             for a, b, v in zip(times, times[1:] + [t1], top))
            lower = " ".join(f"{_x(b, t0, t1):.1f},{_y(v, capacity):.1f} {_x(a, t0, t1):.1f},{_y(v, capacity):.1f}"
                             for a, b, v in reversed(list(zip(times, times[1:] + [t1], base))))
            parts.append(f'<polygon points="{upper} {lower}" fill="{s.colour}" fill-opacity="0.85">'
                         f"<title>{escape(s.label)}</title></polygon>")
        base = top
    parts.append("</svg>")
    return Markup("".join(parts))


def lines(series: list[Series], t0: float, t1: float, title: str) -> Markup:
    """One polyline per series over [t0, t1] (points outside are dropped); sparse series get a dot
    per point, so a job's first report shows before there is a line to draw."""
    top = max((v for s in series for t, v in s.points if t0 <= t <= t1), default=0.0) * 1.1 or 1.0
    parts = _frame(t0, t1, top, series, title)
    for s in series:
        xy = [(_x(t, t0, t1), _y(v, top)) for t, v in s.points if t0 <= t <= t1]
        if len(xy) > 1:
            parts.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}" fill="none" '
                         f'stroke="{s.colour}" stroke-width="1.8"><title>{escape(s.label)}</title></polyline>')
        if len(xy) <= SPARSE:
            parts.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{s.colour}"/>' for x, y in xy)
    parts.append("</svg>")
    return Markup("".join(parts))
