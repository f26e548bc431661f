"""The co-location model (perf/interference.py) pinned on hand-written tables: which Gavel entries
become pairs (one GPU each, both job types known, 0 where either ran at 0, capped at 1), the
checks on a table, the fit's edges (nothing to fit, fractions of 0 and 1, the unregularised offset),
each answer's source, the accuracy report and the packer's table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coddl.perf.interference import (CAP, Accuracy, ColocationTable, InterferenceModel, PairMeasurements,
                                     leave_one_out, load_gavel_pairs)

PAIRS = {
    "v100": {
        "('A', 1)": {"null": 10.0, "('B', 2)": [1.0, 1.0], "('Z', 1)": [3.0, 3.0], "('A', 1)": [6.0, 6.0],
                     "('B', 1)": [5.0, 8.0]},
        "('B', 1)": {"null": 8.0, "('A', 1)": [12.0, 4.0], "('C', 1)": [0.0, 0.0]},
        "('C', 1)": {"null": 0.0, "('A', 1)": [2.0, 1.0]},
        "('A', 2)": {"null": 15.0, "('A', 2)": [1.0, 1.0]},
    },
    "v100_unconsolidated": {"('A', 1)": {"null": 10.0}},
    "k80": {"('A', 1)": {"null": 4.0, "('A', 1)": [1.0, 1.0]}},
}


def test_pairs_are_one_gpu_runs_of_known_types(tmp_path):
    p = tmp_path / "pairs.json"
    p.write_text(json.dumps(PAIRS))
    m = load_gavel_pairs("v100", p)
    assert m.gpu_type == "V100" and m.job_types == ("A", "B", "C")
    nan = math.nan
    expected = [[0.6, 0.5, nan],  # A beside A and B; beside B on two GPUs and beside Z not counted
                [1.0, nan, 0.0],  # faster beside A than alone: capped at 1; beside C at 0: cannot share
                [0.0, nan, nan]]  # alone at 0
    assert np.array_equal(np.isnan(m.retained), np.isnan(expected))
    assert np.allclose(np.nan_to_num(m.retained), np.nan_to_num(expected), rtol=1e-12, atol=0)
    assert m.shareable.tolist() == [[True, True, False], [True, False, False], [False, False, False]]
    assert load_gavel_pairs("V100", str(p)).job_types == ("A", "B", "C")
    assert load_gavel_pairs("K80", p).retained.tolist() == [[0.25]]
    for bad in ("v100_unconsolidated", "A100"):
        with pytest.raises(ValueError) as e:
            load_gavel_pairs(bad, p)
        assert str(e.value) == f"no co-location measurements for GPU type {bad!r}; measured: v100, k80"


def test_a_table_must_be_square_and_hold_fractions():
    PairMeasurements("X", ("a",), np.array([[1.0 + 5e-10]]))
    PairMeasurements("X", ("a", "b"), np.array([[0.0, np.nan], [1.0, 0.5]]))
    with pytest.raises(ValueError, match=r"^retained must be 2×2, got \(1, 2\)$"):
        PairMeasurements("X", ("a", "b"), np.array([[0.5, 0.5]]))
    for bad in (1.0 + 1e-8, -0.01):
        with pytest.raises(ValueError, match=r"^a retained fraction must lie in \[0, 1\]$"):
            PairMeasurements("X", ("a", "b"), np.array([[0.5, np.nan], [bad, 0.5]]))


def test_nothing_shareable_fits_the_no_slowdown_model():
    m = InterferenceModel.fit(PairMeasurements("X", ("a", "b"), np.array([[0.0, np.nan], [np.nan, 0.0]])))
    assert m.sensitivity.tolist() == [0.0, 0.0] and m.pressure.tolist() == [0.0, 0.0]
    assert m.offset == pytest.approx(math.log(0.01 / 0.99))
    assert m.retained("a", "b").fraction == pytest.approx(CAP)
    assert m.retained("a", "a") == m.retained("a", "a") and m.retained("a", "a").source == "measured"


def test_fractions_of_one_and_near_zero_are_read_within_the_cap():
    one = InterferenceModel.fit(PairMeasurements("X", ("a",), np.array([[1.0]])), ridge=1e-6)
    assert one.predict(0, 0) == pytest.approx(0.99, rel=1e-4)
    tiny = InterferenceModel.fit(PairMeasurements("X", ("a",), np.array([[1e-4]])), ridge=1e-6)
    assert tiny.predict(0, 0) == pytest.approx(0.01, rel=1e-3)


def test_the_ridge_pulls_sensitivity_and_pressure_but_not_the_offset():
    f = np.array([[0.5, 0.8], [0.8, np.nan]])  # log-odds 0, −log 4, −log 4: their mean is −(2/3)·log 4
    m = InterferenceModel.fit(PairMeasurements("X", ("a", "b"), f), ridge=1e8)
    assert np.abs(m.sensitivity).max() < 1e-6 and np.abs(m.pressure).max() < 1e-6
    assert m.offset == pytest.approx(-2.0 / 3.0 * math.log(4.0), rel=1e-5)
    exact = InterferenceModel.fit(PairMeasurements("X", ("a", "b"), f), ridge=1e-10)
    assert exact.predict(0, 0) == pytest.approx(0.5, rel=1e-5) and exact.predict(1, 0) == pytest.approx(0.8, rel=1e-5)
    default = InterferenceModel.fit(PairMeasurements("X", ("a", "b"), f))
    assert default.predict(0, 0) != pytest.approx(0.5, rel=1e-5)  # the default ridge (1e-2) is felt


def test_each_answer_says_where_it_came_from():
    s, p, c = np.array([0.5, -0.5, 0.0]), np.array([0.3, 0.0, -0.3]), 0.2
    f = 1.0 / (1.0 + np.exp(c + s[:, None] + p[None, :]))
    hidden = f.copy()
    hidden[0, 2] = np.nan
    m = InterferenceModel.fit(PairMeasurements("X", ("a", "b", "c"), hidden), ridge=1e-10)
    assert m.retained("b", "a").source == "measured" and m.retained("b", "a").fraction == f[1, 0]
    got = m.retained("a", "c")
    assert got.source == "model" and got.fraction == pytest.approx(f[0, 2], rel=1e-6)
    assert m.predict(0, 2) == pytest.approx(f[0, 2], rel=1e-6) and m.predict(1, 0) == pytest.approx(f[1, 0])
    # the stranger has s = p = 0; the known side keeps its own term (fitted values, centred)
    for job, beside, term in (("x", "a", m.pressure[0]), ("a", "x", m.sensitivity[0]), ("x", "y", 0.0)):
        r = m.retained(job, beside)
        assert r.source == "fallback" and r.fraction == pytest.approx(1 / (1 + math.exp(m.offset + term)))
    assert m.retained("x", "a").fraction != pytest.approx(m.retained("x", "y").fraction)
    assert m.retained("a", "x").fraction != pytest.approx(m.retained("x", "y").fraction)


def test_accuracy_as_dict_rounds_floats_only():
    acc = Accuracy("K80", 5, 1.234, 2.345, 3.0, 4.5678, 5.0, 6.999)
    assert acc.as_dict() == {"gpu_type": "K80", "pairs": 5, "pair_mape": 1.23, "pair_p90": 2.35, "pair_worst": 3.0,
                             "job_mape": 4.57, "job_worst": 5.0, "baseline_mape": 7.0}


def test_leave_one_out_on_a_uniform_table_is_exact():
    f = np.full((3, 3), 0.8)
    f[0, 1] = np.nan
    f[2, 2] = 0.0
    acc = leave_one_out(PairMeasurements("X", ("a", "b", "c"), f))
    assert acc.gpu_type == "X" and acc.pairs == 7
    for v in (acc.pair_mape, acc.pair_p90, acc.pair_worst, acc.job_mape, acc.job_worst, acc.baseline_mape):
        assert v == pytest.approx(0.0, abs=1e-6)


def test_leave_one_out_recovers_pairs_the_model_made():
    s, p = np.array([0.6, -0.2, 0.0, -0.4]), np.array([0.5, -0.5, 0.25, -0.25])
    f = 1.0 / (1.0 + np.exp(-0.3 + s[:, None] + p[None, :]))
    f[3, 3] = np.nan
    acc = leave_one_out(PairMeasurements("X", ("a", "b", "c", "d"), f), ridge=1e-9)
    assert acc.pairs == 15
    assert acc.pair_mape < 1e-4 and acc.pair_p90 < 1e-4 and acc.pair_worst < 1e-4
    assert acc.baseline_mape > 10.0 and acc.job_mape > 1.0 and acc.job_worst >= acc.job_mape
    loose = leave_one_out(PairMeasurements("X", ("a", "b", "c", "d"), f))
    assert loose.pair_mape > 10 * acc.pair_mape  # the ridge argument reaches the fits


def test_the_colocation_table_for_the_packer():
    v100 = load_gavel_pairs("V100")
    model = InterferenceModel.fit(v100)
    models = ["Resnet50Model128", "VideopredictionModel64", "Resnet50Model32"]
    t = ColocationTable.build(("V100", "T4", "k80"), models)
    assert t.type_names == ("V100", "T4", "k80") and t.models == tuple(models)
    assert t.retained.shape == (3, 3, 3) and t.clash.dtype == bool
    i, j = (v100.job_types.index(f"ResNet-50 (batch size {b})") for b in (128, 32))
    # ResNet-50 at batch 128 beside batch 32 did not fit one V100: kept apart, at the model's value
    assert t.clash[0, 0, 2] and t.clash[0, 2, 0] and t.clashes(0, 2, 0) and t.clashes(2, 0, 1)
    assert t.retained[0, 0, 2] == pytest.approx(model.predict(i, j)) and t(0, 2, 0) > 0.0
    assert t.source[0, 0, 2] == "measured" and t.source[0, 0, 1] == "fallback" and t.source[0, 1, 1] == "fallback"
    if v100.retained[i, i] > 0:
        assert t(0, 0, 0) == pytest.approx(v100.retained[i, i]) and not t.clashes(0, 0, 0)
    assert np.array_equal(t.retained[1], t.retained[0])  # T4: the V100's table
    assert t.fallback[0] == t.fallback[1] == pytest.approx(1 / (1 + math.exp(model.offset)))
    k80 = InterferenceModel.fit(load_gavel_pairs("K80"))
    assert t.fallback[2] == pytest.approx(1 / (1 + math.exp(k80.offset))) and t.fallback[2] != t.fallback[0]
    assert t(1, 1, 2) == t.fallback[2] and t(1, 0, 0) == pytest.approx(t.retained[0, 1, 0])
    # indices past the table (models added later) are the unknown pair's fallback, never a clash
    assert t(3, 0, 2) == t.fallback[2] and t(0, 3, 0) == t.fallback[0] and t(3, 3, 1) == t.fallback[1]
    assert not t.clashes(3, 0, 0) and not t.clashes(0, 3, 0)


def test_leave_one_out_by_hand_on_two_job_types():
    """f(a|b) = 0.8 and f(b|b) = 0.5, nothing else measured. Each fit below sees at most one pair,
    which the unregularised offset c takes whole (s = p = 0), so every prediction is by hand:
    * pair (a, b) held out: c = logodds(0.5) → 0.5, error |0.5 − 0.8|/0.8 = 37.5%;
      pair (b, b) held out: c = logodds(0.8) → 0.8, error |0.8 − 0.5|/0.5 = 60%;
      mean 48.75%, p90 37.5 + 0.9·22.5 = 57.75%, worst 60%; the median baseline is the same;
    * job a held out: (b, b) alone fits c = 0, so (a, b) → 0.5: 37.5%;
      job b held out: nothing left, the no-slowdown model (0.99): (a, b) 23.75%, (b, b) 98%;
      mean (37.5 + 23.75 + 98)/3 = 53.083%, worst 98%."""
    f = np.array([[np.nan, 0.8], [np.nan, 0.5]])
    acc = leave_one_out(PairMeasurements("X", ("a", "b"), f))
    assert acc.pairs == 2
    assert (acc.pair_mape, acc.pair_p90, acc.pair_worst) == pytest.approx((48.75, 57.75, 60.0))
    assert (acc.job_mape, acc.job_worst) == pytest.approx((53.083333333, 98.0))
    assert acc.baseline_mape == pytest.approx(48.75)


def test_leave_one_out_uses_the_default_ridge_of_the_fit():
    s, p = np.array([0.6, -0.2, 0.0, -0.4]), np.array([0.5, -0.5, 0.25, -0.25])
    f = 1.0 / (1.0 + np.exp(-0.3 + s[:, None] + p[None, :]))
    m = PairMeasurements("X", ("a", "b", "c", "d"), f)
    assert leave_one_out(m) == leave_one_out(m, ridge=1e-2)
    assert leave_one_out(m) != leave_one_out(m, ridge=1.0)


def test_a_held_out_job_is_guessed_as_a_job_never_measured():
    """The job half of leave_one_out: with one job type's pairs removed, the fit on the others
    answers for that job exactly as for a stranger (s = p = 0 on its side, the fitted terms on the
    other side), and the error is relative to the measured fraction."""
    s, p = np.array([0.6, -0.2, 0.0, -0.4]), np.array([0.5, -0.5, 0.25, -0.25])
    f = 1.0 / (1.0 + np.exp(-0.3 + s[:, None] + p[None, :]))
    f[2, 1] = np.nan
    names = ("a", "b", "c", "d")
    m = PairMeasurements("X", names, f)
    errors = []
    for a in range(4):
        hidden = f.copy()
        hidden[a, :] = hidden[:, a] = np.nan
        fit = InterferenceModel.fit(PairMeasurements("X", names, hidden), ridge=0.5)
        for x in range(4):
            for y in range(4):
                if (x == a or y == a) and not np.isnan(f[x, y]):
                    guess = fit.retained("stranger" if x == a else names[x], "stranger" if y == a else names[y])
                    assert guess.source == "fallback"
                    errors.append(100 * abs(guess.fraction - f[x, y]) / f[x, y])
    acc = leave_one_out(m, ridge=0.5)
    assert acc.job_mape == pytest.approx(np.mean(errors)) and acc.job_worst == pytest.approx(max(errors))
    assert acc.job_mape != pytest.approx(leave_one_out(m).job_mape)  # the ridge reaches the job fits too


def test_a_clash_measured_one_way_keeps_the_pair_apart_both_ways(monkeypatch):
    """Gavel's 0 for (a beside b) marks a clash for the pair whichever way it was measured; a pair
    measured above 0 is used as measured; an unmeasured pair is the model's."""
    from coddl.perf import interference

    types = ("ResNet-18 (batch size 16)", "ResNet-50 (batch size 32)")
    table = PairMeasurements("V100", types, np.array([[0.6, 0.0], [0.7, np.nan]]))
    monkeypatch.setattr(interference, "load_gavel_pairs", lambda key: table)
    t = ColocationTable.build(("V100",), ["pollux-cifar10@16", "Resnet50Model32", "VideopredictionModel64"])
    model = InterferenceModel.fit(table)
    assert t.clash[0].tolist() == [[False, True, False], [True, False, False], [False, False, False]]
    assert t(0, 0, 0) == 0.6 and t(1, 0, 0) == 0.7
    assert t(0, 1, 0) == pytest.approx(model.predict(0, 1)) and t(0, 1, 0) > 0.0
    assert t(1, 1, 0) == pytest.approx(model.predict(1, 1))
    assert t.source[0].tolist() == [["measured", "measured", "fallback"], ["measured", "model", "fallback"],
                                    ["fallback"] * 3]
    assert t(2, 2, 0) == t.fallback[0] == pytest.approx(1 / (1 + math.exp(model.offset)))


def test_the_ridge_shrinks_sensitivity_and_pressure_and_defaults_to_one_hundredth():
    s, p = np.array([0.6, -0.2, 0.0, -0.4]), np.array([0.5, -0.5, 0.25, -0.25])
    f = 1.0 / (1.0 + np.exp(-0.3 + s[:, None] + p[None, :]))
    m = PairMeasurements("X", ("a", "b", "c", "d"), f)
    exact, default, strong = (InterferenceModel.fit(m, ridge=r) for r in (1e-12, 1e-2, 1.0))
    size = [float(np.abs(np.r_[t.sensitivity, t.pressure]).sum()) for t in (exact, default, strong)]
    assert size[0] > size[1] > size[2] > 0.0
    assert size[0] == pytest.approx(float(np.abs(np.r_[s, p]).sum()), rel=1e-6)  # centred s and p come back
    d = InterferenceModel.fit(m)
    assert d.sensitivity.tolist() == default.sensitivity.tolist() and d.offset == default.offset


def test_a_fraction_may_exceed_one_by_rounding_only():
    PairMeasurements("X", ("a",), np.array([[1.0 + 1e-9]]))
    with pytest.raises(ValueError, match="must lie in"):
        PairMeasurements("X", ("a",), np.array([[1.0 + 2e-9]]))
