"""Link bandwidth and latency from timed all-reduces (an alpha-beta fit on the estimator's own terms).

The estimator prices an all-reduce as ``Fabric.terms(...) @ weights``, with weights (1/B_intra,
1/B_inter, L_intra, L_inter). A measured all-reduce of M bytes on a placement is one row of the same
linear system, so the link parameters that best explain the measurements are a non-negative least
squares fit of those weights — the inspected cluster is priced exactly as its measurements were.
Measurements are weighted by 1/time so that small (latency-bound) and large (bandwidth-bound)
messages count alike rather than the largest dominating.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from coddl.core.cluster import LinkSpec
from coddl.perf.fabric import Fabric


@dataclass(frozen=True)
class AllreduceSample:
    """One measured all-reduce: message bytes, ranks, nodes they span, most ranks on one node, seconds."""

    nbytes: int
    gpus: int
    nodes: int
    max_per_node: int
    seconds: float


def fit_links(samples: list[AllreduceSample], default: LinkSpec = LinkSpec()) -> tuple[LinkSpec, dict[str, bool]]:
    """The ring-priced link parameters that best fit ``samples``; a level with no samples keeps
    ``default``'s values. Returns the links and which levels were measured."""
    if not samples:
        return default, {"intra": False, "inter": False}
    biggest = max(s.nbytes for s in samples) / 1e6
    fabric = Fabric(algorithm="ring", bucket_mb=max(biggest, 1e-6))  # one all-reduce = one message
    cols = np.array([[s.nbytes, s.gpus, s.nodes, s.max_per_node] for s in samples], dtype=float)
    x = fabric.terms(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3])
    y = np.array([s.seconds for s in samples])
    scale = 1.0 / y
    fitted = dict(intra_node_gbps=default.intra_node_gbps, inter_node_gbps=default.inter_node_gbps,
                  intra_node_latency_us=default.intra_node_latency_us,
                  inter_node_latency_us=default.inter_node_latency_us)
    measured = {}
    for level, (bw, lat) in (("intra", (0, 2)), ("inter", (1, 3))):
        rows = x[:, bw] > 0
        measured[level] = bool(rows.any())
        if not rows.any():
            continue
        a = x[rows][:, [bw, lat]] * scale[rows, None]
        w, _ = nnls(a, y[rows] * scale[rows])
        per_byte = w[0] if w[0] > 0 else float(np.min(y[rows] / x[rows, bw]))  # all latency: bound it by the data
        fitted[f"{level}_node_gbps"] = float(1e-9 / per_byte)
        fitted[f"{level}_node_latency_us"] = float(w[1] * 1e6)
    return LinkSpec(**fitted, two_node_factor=default.two_node_factor), measured
