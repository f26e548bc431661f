"""The link fit recovers hand-set bandwidths and latencies from all-reduce times priced by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core.cluster import LinkSpec
from coddl.perf.linkfit import AllreduceSample, fit_links

SIZES = (4096, 262_144, 1 << 20, 4 << 20)


def ring_two_ranks(nbytes: int, bandwidth_bps: float, latency_s: float) -> float:
    """Two ranks: each sends M/2 twice (reduce-scatter, all-gather) over 2 steps: M/B + 2L."""
    return nbytes / bandwidth_bps + 2 * latency_s


def test_both_levels_are_recovered_from_hand_priced_times():
    samples = [AllreduceSample(m, 2, 1, 2, ring_two_ranks(m, 1.2e9, 150e-6)) for m in SIZES]
    samples += [AllreduceSample(m, 2, 2, 1, ring_two_ranks(m, 25e6, 400e-6)) for m in SIZES]
    links, measured = fit_links(samples)
    assert measured == {"intra": True, "inter": True}
    assert links.intra_node_gbps == pytest.approx(1.2, rel=1e-6)
    assert links.intra_node_latency_us == pytest.approx(150, rel=1e-6)
    assert links.inter_node_gbps == pytest.approx(0.025, rel=1e-6)
    assert links.inter_node_latency_us == pytest.approx(400, rel=1e-6)


def test_a_level_never_measured_keeps_the_default():
    default = LinkSpec(inter_node_gbps=3.0, inter_node_latency_us=7.0)
    links, measured = fit_links([AllreduceSample(m, 2, 1, 2, ring_two_ranks(m, 1e9, 1e-4)) for m in SIZES], default)
    assert measured == {"intra": True, "inter": False}
    assert (links.inter_node_gbps, links.inter_node_latency_us) == (3.0, 7.0)


def test_times_that_do_not_grow_with_size_still_give_a_finite_bandwidth():
    """All latency (a fit with no per-byte cost) would mean infinite bandwidth: bound it by the data."""
    links, _ = fit_links([AllreduceSample(m, 2, 2, 1, 1e-3) for m in SIZES])
    assert math.isfinite(links.inter_node_gbps) and links.inter_node_gbps <= (4 << 20) / 1e-3 / 1e9 + 1e-9


@settings(max_examples=50, deadline=None)
@given(st.floats(1e6, 1e11), st.floats(0, 1e-2), st.floats(0.0, 0.2))
def test_noise_moves_the_fit_no_further_than_it_moves_the_times(bandwidth, latency, noise):
    """Every time scaled by 1+noise: bandwidth ÷ (1+noise), latency × (1+noise), exactly."""
    samples = [AllreduceSample(m, 2, 2, 1, ring_two_ranks(m, bandwidth, latency) * (1 + noise)) for m in SIZES]
    links, _ = fit_links(samples)
    assert links.inter_node_gbps == pytest.approx(bandwidth / 1e9 / (1 + noise), rel=1e-5)
    assert links.inter_node_latency_us == pytest.approx(latency * 1e6 * (1 + noise), rel=1e-5, abs=1e-6)
