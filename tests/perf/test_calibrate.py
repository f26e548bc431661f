"""Link calibration: recovers known links from synthetic measurements, and explains real ones."""

from __future__ import annotations

import pytest

from coddl.core.cluster import LinkSpec
from coddl.perf.calibrate import RowArrays, calibrate_links, pollux_profile
from coddl.perf.estimator import ComputeModel, JobProfile, ThroughputModel
from coddl.perf.profiles import PolluxApp, PolluxModel, PolluxRow, load_pollux_app

TRUE_LINKS = LinkSpec(intra_node_gbps=3.0, inter_node_gbps=0.8, intra_node_latency_us=10.0,
                      inter_node_latency_us=300.0, two_node_factor=1.5)
SHAPES = [(1,), (2,), (4,), (1, 1), (2, 2), (4, 4), (2, 2, 2), (4, 4, 4, 4), (3, 1)]


def synthetic_app() -> PolluxApp:
    model = PolluxModel("synthetic", 12.5e6)  # 50 MB: two buckets
    truth = ThroughputModel(TRUE_LINKS, overlap=1.8)
    profile = JobProfile("s", ComputeModel(0.02, 0.001), model.param_bytes, 1, per_gpu_batch=True)
    rows = []
    for shape in SHAPES:
        for bsz in (16, 32, 64, 128, 256):
            t = truth.seconds_per_iteration(profile, bsz, sum(shape), len(shape), max(shape))
            rows.append(PolluxRow(shape, bsz, float(t), 0.0, "placements"))
    return PolluxApp("synthetic", model, tuple(rows))


def test_calibration_recovers_known_links_and_overlap():
    cal = calibrate_links(synthetic_app())
    assert cal.links.inter_node_gbps == pytest.approx(0.8, rel=0.05)
    assert cal.links.intra_node_gbps == pytest.approx(3.0, rel=0.05)
    assert cal.links.inter_node_latency_us == pytest.approx(300.0, rel=0.05)
    assert cal.overlap == pytest.approx(1.8, rel=0.05)
    assert cal.links.two_node_factor == pytest.approx(1.5, rel=0.05)
    assert cal.mape < 0.5


def test_ncf_links_explain_its_own_rows_to_within_10_percent():
    """The measured figure is 8.3% over 2,098 rows (placements.csv and scalability.csv), fitted to
    their step and all-reduce times; two-node all-reduces come out ~1.6× slower, as every app shows."""
    app = load_pollux_app("ncf")
    cal = calibrate_links(app)
    assert 1.3 <= cal.links.two_node_factor <= 2.0
    assert cal.rows == len(app.multi_gpu) and cal.mape <= 10.0
    assert cal.links.intra_node_gbps >= cal.links.inter_node_gbps
    assert cal.links.intra_node_latency_us <= cal.links.inter_node_latency_us
    model = cal.model()
    rows = RowArrays.of(app.multi_gpu)
    assert rows.predict(model, pollux_profile(app)).shape == rows.step_time.shape


def test_calibration_needs_multi_gpu_rows():
    app = synthetic_app()
    one_gpu_only = PolluxApp(app.name, app.model, app.single_gpu)
    with pytest.raises(ValueError, match="no multi-GPU rows"):
        calibrate_links(one_gpu_only)
