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
    """The link parameters that best fit ``samples``; a level with no samples keeps ``default``'s
    values. Returns the links and which levels were measured.

    Between nodes two algorithms are tried, a ring and ``flat`` (every rank's ring traffic crosses
    its node's NIC, ``perf/fabric.py``), and the one whose fit leaves the smaller residual is kept.
    They price a placement with one rank per node alike, so only samples with several ranks on a
    node tell them apart; without such samples the links stay a ring."""
    if not samples:
        return default, {"intra": False, "inter": False}
    biggest = max(s.nbytes for s in samples) / 1e6
    cols = np.array([[s.nbytes, s.gpus, s.nodes, s.max_per_node] for s in samples], dtype=float)
    y = np.array([s.seconds for s in samples])
    fitted = dict(intra_node_gbps=default.intra_node_gbps, inter_node_gbps=default.inter_node_gbps,
                  intra_node_latency_us=default.intra_node_latency_us,
                  inter_node_latency_us=default.inter_node_latency_us)
    measured = {}
    algorithm = "ring"
    for level, (bw, lat) in (("intra", (0, 2)), ("inter", (1, 3))):
        fits = []
        for alg in ("ring", "flat") if level == "inter" else ("ring",):
            x = Fabric(algorithm=alg, bucket_mb=max(biggest, 1e-6)).terms(*cols.T)  # one all-reduce = one message
            rows = x[:, bw] > 0
            if rows.any():
                fits.append((*_fit_level(x[rows][:, [bw, lat]], y[rows]), alg))
        measured[level] = bool(fits)
        if not fits:
            continue
        residual, per_byte, latency, alg = min(fits, key=lambda f: f[0])
        if level == "inter" and residual < fits[0][0] * (1 - 1e-9):  # flat only where it fits better
            algorithm = alg
        fitted[f"{level}_node_gbps"] = float(1e-9 / per_byte)
        fitted[f"{level}_node_latency_us"] = float(latency * 1e6)
    return LinkSpec(**fitted, two_node_factor=default.two_node_factor, algorithm=algorithm), measured


def _fit_level(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Seconds per byte and per latency step of one link level from its (bytes, steps) terms and the
    measured seconds, weighted by 1/time; and the fit's residual."""
    scale = 1.0 / y
    w, residual = nnls(x * scale[:, None], y * scale)
    per_byte = w[0] if w[0] > 0 else float(np.min(y / x[:, 0]))  # all latency: bound it by the data
    return float(residual), float(per_byte), float(w[1])
