"""Pins of the predicted-vs-measured figure (``coddl.perf.accuracy.predicted_vs_measured_figure``,
saved by ``plot_predicted_vs_measured`` for ``coddl estimate accuracy --plot`` and
``benchmarks/estimator_accuracy.py --plot``): two log-log panels side by side (before / after one
correction) sharing both axes, each testbed's points (measured, predicted) in its own colour
``C<i>`` by its place in the results, only from rows of the recommended calibrations (``OTHERS``,
``COLLECTIVE``) that carry points, the identity line and the ±20% band over the measured range (or
1e-2..1e2 when nothing is plotted), a legend of the testbeds on the left panel, and an 11×5 inch
PNG at 110 dpi.

Hand-built ``AppAccuracy`` rows; every expected value is read off the rows given."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgb, to_rgba  # noqa: E402

from coddl.perf.accuracy import (COLLECTIVE, OTHERS, AppAccuracy, plot_predicted_vs_measured,  # noqa: E402
                                 predicted_vs_measured_figure)

BEFORE_TITLE = "before correction (one-GPU profile only)"
AFTER_TITLE = "after one measured correction"


def row(cluster: str, app: str, calibration: str, points=None) -> AppAccuracy:
    if points is not None:
        points = tuple(np.asarray(c, dtype=float) for c in points)
    return AppAccuracy(cluster, app, calibration, 0 if points is None else len(points[0]),
                       10.0, 5.0, 8.0, 30.0, 12.0, 4.0, 9.0, 0.1, 0.9, points=points)


@pytest.fixture
def figure():
    """Builds the figure and closes it after the test, so no figure outlives a test."""
    made = []

    def build(results):
        fig = predicted_vs_measured_figure(results)
        made.append(fig)
        return fig

    yield build
    for fig in made:
        plt.close(fig)


# one testbed, one app: measured 1, 2, 4 steps/s; before 1.1, 2.5, 3; after 0.9, 2.1, 4.2
ONE = {"t4": [row("t4", "bert", OTHERS, ([1.0, 2.0, 4.0], [1.1, 2.5, 3.0], [0.9, 2.1, 4.2]))]}


# ---- layout ----

def test_two_panels_side_by_side_share_both_axes_on_an_11_by_5_inch_figure(figure):
    fig = figure(ONE)
    a, b = fig.axes  # exactly two panels
    # one row, two columns: the left panel is column 0, the right one column 1
    assert a.get_subplotspec().get_geometry() == (1, 2, 0, 0)
    assert b.get_subplotspec().get_geometry() == (1, 2, 1, 1)
    assert a.get_position().x1 <= b.get_position().x0
    assert a.get_shared_x_axes().joined(a, b) and a.get_shared_y_axes().joined(a, b)
    assert tuple(fig.get_size_inches()) == (11.0, 5.0)


def test_both_panels_are_log_log_with_their_titles_and_labels(figure):
    a, b = figure(ONE).axes
    for ax, title in ((a, BEFORE_TITLE), (b, AFTER_TITLE)):
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
        assert ax.get_title() == title
        assert ax.title.get_fontsize() == 10
        assert ax.get_xlabel() == "measured steps/s"
    # the shared y axis is labelled once, on the left panel
    assert a.get_ylabel() == "predicted steps/s"
    assert b.get_ylabel() == ""



def test_title_and_legend_sizes_are_fixed_whatever_the_users_default_font_size(figure):
    # a user's matplotlibrc with a larger font.size must not change the 10-point titles or the
    # 8-point legend (matplotlib's own default font.size happens to be 10 as well)
    with matplotlib.rc_context({"font.size": 14.0}):
        a, b = figure(ONE).axes
    assert a.title.get_fontsize() == b.title.get_fontsize() == 10
    assert [t.get_fontsize() for t in a.get_legend().get_texts()] == [8]
    assert a.xaxis.label.get_fontsize() == 14  # the rest follows the user's size


# ---- points ----

def test_the_left_panel_plots_measured_against_before_and_the_right_one_against_after(figure):
    a, b = figure(ONE).axes
    assert len(a.collections) == len(b.collections) == 1
    np.testing.assert_array_equal(a.collections[0].get_offsets(), [[1.0, 1.1], [2.0, 2.5], [4.0, 3.0]])
    np.testing.assert_array_equal(b.collections[0].get_offsets(), [[1.0, 0.9], [2.0, 2.1], [4.0, 4.2]])


def test_points_are_small_translucent_dots_in_the_testbeds_colour(figure):
    for ax in figure(ONE).axes:
        dots = ax.collections[0]
        np.testing.assert_array_equal(dots.get_sizes(), [4.0])  # s=4 (points²)
        assert dots.get_alpha() == 0.4
        # the first testbed in the results is C0; its alpha is carried on the face colour
        np.testing.assert_allclose(dots.get_facecolor(), [to_rgba("C0", 0.4)])
        assert dots.get_label() == "t4"


def test_only_the_recommended_calibrations_rows_with_points_are_plotted_in_order(figure):
    # an OTHERS row, a single-job calibration row (named after a job: not plotted), a COLLECTIVE
    # row, and an OTHERS row without points (skipped): the scatter is OTHERS' then COLLECTIVE's
    rows = [row("k80", "LM", OTHERS, ([1.0, 3.0], [1.5, 2.5], [1.2, 2.9])),
            row("k80", "LM", "ResNet-18", ([100.0], [200.0], [300.0])),
            row("k80", "ResNet-50", COLLECTIVE, ([5.0], [6.0], [7.0])),
            row("k80", "Transformer", OTHERS)]
    a, b = figure({"k80": rows}).axes
    np.testing.assert_array_equal(a.collections[0].get_offsets(), [[1.0, 1.5], [3.0, 2.5], [5.0, 6.0]])
    np.testing.assert_array_equal(b.collections[0].get_offsets(), [[1.0, 1.2], [3.0, 2.9], [5.0, 7.0]])
    # the lines span the plotted rows only (1..5), not the single-job row's 100
    np.testing.assert_array_equal(a.lines[0].get_xdata(), [1.0, 5.0])


def test_a_testbed_keeps_the_colour_of_its_place_even_after_one_without_points(figure):
    # "none" (index 0) has no plottable row, so it draws nothing; "a" is still C1 and "b" C2 —
    # the colours stay tied to the testbeds' order, not to the colour cycle of what was drawn
    results = {"none": [row("none", "x", OTHERS), row("none", "y", "x", ([1.0], [1.0], [1.0]))],
               "a": [row("a", "m", OTHERS, ([1.0, 2.0], [1.0, 2.0], [1.0, 2.0]))],
               "b": [row("b", "n", COLLECTIVE, ([3.0], [3.3], [2.7]))]}
    left, right = figure(results).axes
    for ax in (left, right):
        assert [c.get_label() for c in ax.collections] == ["a", "b"]
        for dots, colour in zip(ax.collections, ("C1", "C2")):
            np.testing.assert_allclose(dots.get_facecolor()[0][:3], to_rgb(colour))
    np.testing.assert_array_equal(right.collections[1].get_offsets(), [[3.0, 2.7]])


def test_the_legend_names_each_plotted_testbed_on_the_left_panel_only(figure):
    results = {"a": [row("a", "m", OTHERS, ([1.0], [1.0], [1.0]))],
               "b": [row("b", "n", OTHERS, ([2.0], [2.0], [2.0]))]}
    left, right = figure(results).axes
    legend = left.get_legend()
    assert legend is not None and right.get_legend() is None
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b"]
    assert [t.get_fontsize() for t in legend.get_texts()] == [8, 8]
    assert legend.markerscale == 3  # the 4-point² dots drawn three times larger in the legend


# ---- identity line and ±20% band ----

def test_the_identity_line_and_the_20_percent_band_span_all_testbeds_measured_range(figure):
    # all rates below 1 step/s; the largest (0.5) is in the first testbed, the smallest (0.05)
    # in the second, so the lines run from 0.05 to 0.5 on both panels
    results = {"a": [row("a", "m", OTHERS, ([0.1, 0.5], [0.1, 0.6], [0.1, 0.4]))],
               "b": [row("b", "n", OTHERS, ([0.05, 0.2], [0.06, 0.2], [0.05, 0.19]))]}
    for ax in figure(results).axes:
        identity, low, high = ax.lines
        xs = [0.05, 0.5]
        np.testing.assert_array_equal(identity.get_xdata(), xs)
        np.testing.assert_array_equal(identity.get_ydata(), xs)
        np.testing.assert_array_equal(low.get_xdata(), xs)
        np.testing.assert_allclose(low.get_ydata(), [0.8 * 0.05, 0.8 * 0.5])  # 20% below
        np.testing.assert_array_equal(high.get_xdata(), xs)
        np.testing.assert_allclose(high.get_ydata(), [1.2 * 0.05, 1.2 * 0.5])  # 20% above


def test_the_identity_line_is_solid_black_and_the_band_dotted_black_and_thinner(figure):
    for ax in figure(ONE).axes:
        identity, low, high = ax.lines
        assert identity.get_linestyle() == "-" and identity.get_linewidth() == 0.8
        assert to_rgba(identity.get_color()) == (0.0, 0.0, 0.0, 1.0)
        for band in (low, high):
            assert band.get_linestyle() == ":" and band.get_linewidth() == 0.6
            assert to_rgba(band.get_color()) == (0.0, 0.0, 0.0, 1.0)
        np.testing.assert_array_equal(identity.get_xdata(), [1.0, 4.0])  # ONE's measured 1..4


@pytest.mark.parametrize("results", [{}, {"t4": [row("t4", "bert", OTHERS),
                                                  row("t4", "bert", "bert", ([1.0], [2.0], [3.0]))]}],
                         ids=["no testbed", "no plottable row"])
def test_with_nothing_to_plot_the_lines_span_the_default_1e_minus_2_to_1e2(figure, results):
    with pytest.warns(UserWarning, match="No artists with labels"):  # the left panel's empty legend
        fig = figure(results)
    for ax in fig.axes:
        assert len(ax.collections) == 0
        identity, low, high = ax.lines
        np.testing.assert_array_equal(identity.get_xdata(), [1e-2, 1e2])
        np.testing.assert_array_equal(identity.get_ydata(), [1e-2, 1e2])
        np.testing.assert_allclose(low.get_ydata(), [0.8e-2, 0.8e2])
        np.testing.assert_allclose(high.get_ydata(), [1.2e-2, 1.2e2])
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")


# ---- the saved PNG ----

def test_the_plot_is_saved_as_a_1210_by_550_png_and_closed(tmp_path):
    path = tmp_path / "accuracy.png"
    open_before = plt.get_fignums()
    assert plot_predicted_vs_measured(ONE, path) is None
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk's first two fields
    assert (width, height) == (11 * 110, 5 * 110)  # 11×5 inches at 110 dpi
    assert plt.get_fignums() == open_before  # the figure does not stay open


def test_the_plot_accepts_a_string_path(tmp_path):
    path = tmp_path / "p.png"
    plot_predicted_vs_measured(ONE, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
