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


def test_nothing_measured_is_the_default_with_nothing_measured():
    default = LinkSpec(intra_node_gbps=7.0, two_node_factor=1.6)
    assert fit_links([], default) == (default, {"intra": False, "inter": False})


def test_what_is_not_fitted_is_kept_from_the_default():
    """Only the inter-node level measured: the intra-node link and the two-node factor stay the default's."""
    default = LinkSpec(intra_node_gbps=7.0, intra_node_latency_us=3.0, two_node_factor=1.6)
    links, measured = fit_links([AllreduceSample(m, 2, 2, 1, ring_two_ranks(m, 25e6, 4e-4)) for m in SIZES], default)
    assert measured == {"intra": False, "inter": True}
    assert (links.intra_node_gbps, links.intra_node_latency_us, links.two_node_factor) == (7.0, 3.0, 1.6)


def test_a_message_larger_than_a_gradient_bucket_is_still_one_all_reduce():
    """Inspection times single all-reduces: a 64 MB one pays its latency steps once, not once per 25 MB
    bucket as a framework's bucketed gradients would (the fit would put 3× the latency into it)."""
    sizes = (4096, 1 << 20, 64 << 20)
    links, _ = fit_links([AllreduceSample(m, 2, 2, 1, ring_two_ranks(m, 25e6, 5e-3)) for m in sizes])
    assert links.inter_node_latency_us == pytest.approx(5000, rel=1e-6)
    assert links.inter_node_gbps == pytest.approx(0.025, rel=1e-6)


def test_each_size_counts_by_its_relative_error():
    """Weighted by 1/time, a small message's time is fitted as closely as a large one's: with the 4 MB
    time 20% high, an unweighted fit would trade the 4 KiB message's latency for it (off by ~2×)."""
    times = [ring_two_ranks(m, 1e9, 1e-4) for m in SIZES]
    times[-1] *= 1.2
    links, _ = fit_links([AllreduceSample(m, 2, 2, 1, t) for m, t in zip(SIZES, times)])
    small = ring_two_ranks(SIZES[0], links.inter_node_gbps * 1e9, links.inter_node_latency_us * 1e-6)
    assert small == pytest.approx(times[0], rel=0.1)


def test_an_all_latency_fit_takes_its_bandwidth_from_the_fastest_bytes():
    """No per-byte cost fitted: the bandwidth is the most bytes per second any sample moved (4 MiB in 1 ms)."""
    links, _ = fit_links([AllreduceSample(m, 2, 2, 1, 1e-3) for m in SIZES])
    assert links.inter_node_gbps == pytest.approx((4 << 20) / 1e-3 / 1e9, rel=1e-9)
