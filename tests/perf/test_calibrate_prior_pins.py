"""Pins of the population prior (``coddl.perf.calibrate``): ``prior_from`` pooling hand-made
``Population``s (mean, spread with ddof 1 and its floor, correlations only with more jobs than
parameters and shrunk by 0.3, median noise levels and their floors, the two-job minimum),
``population`` on small noise-free tables (which jobs count, the one-GPU scatter around the affine
fit, the held-out scatter by placement-shape parity, the exposed-communication scatter, the one-GPU
floor, the algorithm passed on), ``learn_prior`` per testbed, ``write_prior``'s file, the bundled
``default_prior`` / ``bundled_populations``, and ``_weights``' Jacobian.

The tables are generated noise-free from a known fabric and θ = the weak prior mean (f = 0.25,
log η = 0, ρ = 0.4) that every job fit starts from: every residual, the prior's included, is then 0
at the truth, so a fit on any subset of a job's rows recovers the truth and a held-out residual is
exactly what the held-out row deviates from the truth by.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, replace

import numpy as np
import pytest

from coddl.perf.calibrate import (FLOOR, PRIOR_FILE, WEAK, FabricFit, Population, _weights, bundled_populations,
                                  default_prior, fit_fabric, learn_prior, one_gpu_model, population, prior_from,
                                  write_prior)
from coddl.perf.curves import data_path
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import Prior, step_model
from coddl.perf.table import ProfileTable

# BATCHES' geometric mean is 32 = b_ref: f = 0.25 is the job's true fixed share there
from test_calibrate_fabric_pins import BATCHES, HIER, JOB_SHAPES, RING, TH, row

MESSAGE = "a prior needs at least two jobs with multi-GPU measurements"


def line(b: float, t_ref: float = 0.2, b_ref: float = 32.0) -> float:
    """The one-GPU step on the affine line t_ref·(0.25 + 0.75·b/b_ref)."""
    return t_ref * (0.25 + 0.75 * b / b_ref)


def one_gpu(model: str = "m", batches=BATCHES, shares=None, cluster: str = "c"):
    """One-GPU steps exactly on the line (with a share s of a device a step takes line/s)."""
    shares = shares or [1.0] * len(batches)
    return [row(model, 1, (1,), s / line(b), b, cluster=cluster, compute_share=None if s == 1.0 else s)
            for b, s in zip(batches, shares)]


def step(truth: Fabric, shape, b: float, floor: float = 0.0, t_ref: float = 0.2, b_ref: float = 32.0):
    """(step seconds T, exposed communication T − C) of θ = TH on ``truth``."""
    a = truth.allreduce_seconds(1e8, sum(shape), len(shape), shape[0], 1.0)
    _, _, c, _, t, _ = step_model(t_ref, b_ref, b, 1.0, a, TH, grad=True, floor=floor)
    t, c = float(np.ravel(t)[0]), float(np.ravel(c)[0])
    return t, t - c


def multi_gpu(truth: Fabric, model: str = "m", shapes=JOB_SHAPES, batches=BATCHES, cluster: str = "c",
              comm=None, **kw):
    """The job's multi-GPU steps priced on ``truth`` with θ = TH; ``comm(shape, T, T − C)`` gives a
    row's measured exposed communication (default: not measured)."""
    rows = []
    for shape in shapes:
        for b in batches:
            t, exposed = step(truth, shape, b, **kw)
            rows.append(row(model, sum(shape), shape, 1.0 / t, b, cluster=cluster,
                            comm_s=comm(shape, t, exposed) if comm else None))
    return rows


def collectives(truth: Fabric, shapes=JOB_SHAPES, mbs=(1, 16, 256), model: str | None = None, cluster: str = "c"):
    rows = []
    for shape in shapes:
        for mb in mbs:
            t = float(truth.allreduce_seconds(mb * 1e6, sum(shape), len(shape), shape[0], 1.0)[0])
            rows.append(row(model or f"ar{mb}", sum(shape), shape, 1.0 / t, 0.0, mb * 1e6, kind="collective",
                            cluster=cluster))
    return rows


def truth_fit(table: ProfileTable, fabric: Fabric, names) -> FabricFit:
    """The fit a perfect calibration returns: the true fabric and θ = TH for each job."""
    jobs = {n: replace(one_gpu_model(table.where(model=n, kind="job"), WEAK), theta=TH.copy()) for n in names}
    return FabricFit(fabric, jobs, 0.0, 0)


def pop(thetas, noise=(0.1,), comm=(), one=(), cluster="c") -> Population:
    return Population(cluster, np.array(thetas, dtype=float).reshape(-1, 3), np.array(noise, dtype=float),
                      np.array(comm, dtype=float), np.array(one, dtype=float))


# ---- prior_from: pooling testbeds ----

def test_prior_from_pools_the_jobs_of_every_testbed():
    # 4 jobs over two testbeds (4 > 3 parameters, so correlations are estimated):
    #   f = 0.1, 0.2, 0.3, 0.4; log η = 0.5, −0.5, −0.5, 0.5; ρ = 0.4, 0.3, 0.2, 0.1
    # mean (0.25, 0, 0.25); sd with ddof 1: f and ρ √(0.05/3), η √(1/3), all above the floor;
    # correlations (f,η) = 0 (η is symmetric about f's middle), (f,ρ) = −1, (η,ρ) = 0, shrunk by
    # the default 0.3 → (0, −0.7, 0); noise: median of 0.1, 0.3, 0.2, 0.04 = 0.15; comm: median of
    # 0.06, 0.2 (the second testbed measured none) = 0.13; one-GPU: median of 0.02, 0.04, 0.09 = 0.04
    a = pop([[0.1, 0.5, 0.4], [0.2, -0.5, 0.3]], noise=[0.1, 0.3], comm=[0.06, 0.2], one=[0.02], cluster="a")
    b = pop([[0.3, -0.5, 0.2], [0.4, 0.5, 0.1]], noise=[0.2, 0.04], comm=[], one=[0.04, 0.09], cluster="b")
    p = prior_from([a, b])
    assert p.mean == pytest.approx((0.25, 0.0, 0.25), abs=1e-12)
    assert p.sd == pytest.approx((math.sqrt(0.05 / 3), math.sqrt(1 / 3), math.sqrt(0.05 / 3)), rel=1e-12)
    assert p.corr == pytest.approx((0.0, -0.7, 0.0), abs=1e-12)
    assert p.noise == pytest.approx(0.15, rel=1e-12)
    assert p.comm_noise == pytest.approx(0.13, rel=1e-12)
    assert p.one_gpu_noise == pytest.approx(0.04, rel=1e-12)


def test_prior_from_shrink_scales_the_correlations():
    # the same 4 jobs in one testbed, shrunk by 0.5: (f, ρ)'s raw correlation −1 becomes −1·(1 − 0.5)
    a = pop([[0.1, 0.5, 0.4], [0.2, -0.5, 0.3], [0.3, -0.5, 0.2], [0.4, 0.5, 0.1]], noise=[0.1])
    assert prior_from([a], shrink=0.5).corr == pytest.approx((0.0, -0.5, 0.0), abs=1e-12)


def test_prior_from_two_jobs_floors_the_spread_and_the_noise_levels():
    # two jobs are enough; f 0.25/0.27 (sd 0.02/√2 < 0.05), log η 0/0.1 (0.1/√2 < 0.2), ρ equal (0 < 0.1):
    # every sd is the floor's (0.05, 0.2, 0.1); noise median 0.015 < 0.05; no comm or one-GPU residuals
    # measured: the floor's 0.03 and 0.01; 2 jobs ≤ 3 parameters: no correlations
    p = prior_from([pop([[0.25, 0.0, 0.4], [0.27, 0.1, 0.4]], noise=[0.01, 0.02])])
    assert p.mean == pytest.approx((0.26, 0.05, 0.4), abs=1e-12)
    assert p.sd == FLOOR.sd == (0.05, 0.2, 0.1)
    assert (p.noise, p.comm_noise, p.one_gpu_noise) == (0.05, 0.03, 0.01)
    assert p.corr == (0.0, 0.0, 0.0)


def test_prior_from_a_custom_floor_is_the_least_it_returns():
    floor = Prior(mean=(0.0,) * 3, sd=(0.5, 0.5, 0.5), noise=0.2, comm_noise=0.3, one_gpu_noise=0.4)
    p = prior_from([pop([[0.25, 0.0, 0.4], [0.27, 0.1, 0.4]], noise=[0.01], comm=[0.1], one=[0.1])], floor=floor)
    assert p.sd == (0.5, 0.5, 0.5)
    assert (p.noise, p.comm_noise, p.one_gpu_noise) == (0.2, 0.3, 0.4)


def test_prior_from_three_jobs_estimate_no_correlations():
    # 3 jobs (not more than the 3 parameters) with f and ρ perfectly anti-correlated: too few to
    # estimate correlations from, so every correlation is 0; sd (ddof 1) f = ρ = 0.1, log η (0, 0.6, 0):
    # deviations −0.2, 0.4, −0.2 → √(0.24/2) = 0.2·√3
    p = prior_from([pop([[0.1, 0.0, 0.3], [0.2, 0.6, 0.2], [0.3, 0.0, 0.1]], noise=[0.1, 0.1, 0.1])])
    assert p.corr == (0.0, 0.0, 0.0)
    assert p.sd == pytest.approx((0.1, 0.2 * math.sqrt(3), 0.1), rel=1e-12)
    assert p.mean == pytest.approx((0.2, 0.2, 0.2), abs=1e-12)


def test_prior_from_one_job_is_refused():
    with pytest.raises(ValueError, match="^" + re.escape(MESSAGE) + "$"):
        prior_from([pop([[0.25, 0.0, 0.4]])])
    # jobs are counted over all testbeds: one job here and none there is still one job
    with pytest.raises(ValueError, match="^" + re.escape(MESSAGE) + "$"):
        prior_from([pop([[0.25, 0.0, 0.4]], cluster="a"), pop(np.zeros((0, 3)), noise=[], cluster="b")])


# ---- _weights: the fabric's linear weights and their Jacobian ----

def test_weights_jacobian_matches_the_weights():
    # w = (e^(x0+x1), e^x0, x3·e^x2, e^x2): ∂w2/∂x2 = x3·e^x2 = w2, ∂w2/∂x3 = e^x2 (a central difference agrees)
    x = np.array([-20.0, -2.3, -9.0, 0.3, 0.1])
    w, dw = _weights(x)
    assert w == pytest.approx([math.exp(-22.3), math.exp(-20.0), 0.3 * math.exp(-9.0), math.exp(-9.0)], rel=1e-12)
    expected = np.zeros((4, 4))
    expected[0, 0] = expected[0, 1] = math.exp(-22.3)
    expected[1, 0] = math.exp(-20.0)
    expected[2, 2], expected[2, 3] = 0.3 * math.exp(-9.0), math.exp(-9.0)
    expected[3, 2] = math.exp(-9.0)
    np.testing.assert_allclose(dw, expected, rtol=1e-12, atol=0)
    h = 1e-6
    for k in range(4):
        e = np.zeros(5)
        e[k] = h
        np.testing.assert_allclose((_weights(x + e)[0] - _weights(x - e)[0]) / (2 * h), dw[:, k], rtol=1e-6)


# ---- population: which jobs count and what their rows say ----

def test_a_job_without_multi_gpu_rows_is_not_in_the_population():
    # "m" ran on five placements, "solo" on one GPU only: only m's θ is pooled (the truth, TH)
    table = ProfileTable.build(collectives(HIER) + one_gpu("m") + multi_gpu(HIER, "m") + one_gpu("solo"))
    p = population(table, fit=truth_fit(table, HIER, ["m", "solo"]))
    assert p.cluster == "c"
    np.testing.assert_allclose(p.thetas, [TH], atol=1e-6)
    assert p.noise == pytest.approx([0.0], abs=1e-6)


def test_jobs_on_two_gpus_count_even_with_a_single_multi_gpu_row():
    # "two" ran on 2 GPUs of one node and on 1+1 (two shapes, 6 rows), "once" has one multi-GPU row
    rows = (collectives(HIER) + one_gpu("two") + multi_gpu(HIER, "two", shapes=[(2,), (1, 1)])
            + one_gpu("once") + multi_gpu(HIER, "once", shapes=[(4,)], batches=(32.0,)))
    table = ProfileTable.build(rows)
    p = population(table, fit=truth_fit(table, HIER, ["two", "once"]))
    np.testing.assert_allclose(p.thetas, [TH, TH], atol=1e-12)
    # "two": fitted on (2,) predicting (1,1) and vice versa, both exact; "once" has a single shape,
    # nothing to hold out: no noise entry for it (not a NaN)
    assert p.noise == pytest.approx([0.0], abs=1e-6)
    assert p.comm_noise.size == 0


def test_one_gpu_noise_needs_three_batches_and_is_the_scatter_around_the_affine_fit():
    # "three" has one-GPU steps at 3 batches exactly on a line (scatter 0, and 0 no matter what the
    # line's slope), "pair" at 2 (which any line fits exactly: no entry)
    rows = (one_gpu("three") + multi_gpu(HIER, "three") + one_gpu("pair", batches=(16.0, 64.0))
            + multi_gpu(HIER, "pair"))
    table = ProfileTable.build(rows)
    p = population(table, fit=truth_fit(table, HIER, ["three", "pair"]))
    assert p.one_gpu_noise == pytest.approx([0.0], abs=1e-9)
    assert p.noise == pytest.approx([0.0, 0.0], abs=1e-6)


def test_one_gpu_noise_prices_a_share_of_a_device_as_a_whole_one():
    # on 1, ½ and ¼ of a device the steps take line/1, line/½, line/¼: times the share they are on the
    # line again, so the scatter is 0
    rows = one_gpu("m", shares=[1.0, 0.5, 0.25]) + multi_gpu(HIER, "m")
    table = ProfileTable.build(rows)
    p = population(table, fit=truth_fit(table, HIER, ["m"]))
    assert p.one_gpu_noise == pytest.approx([0.0], abs=1e-9)


def test_one_gpu_noise_of_a_step_off_the_line():
    # 4 batches: 8, 16, 64 on the line, 32 at e^0.1 × line. The affine fit is by relative least
    # squares (min Σ((α + β·b)/t − 1)², both coefficients positive here, so the plain 2 × 2 least
    # squares); the noise is the rms of log((α + β·b)/t) over the 4 one-GPU steps (≈ 0.0410), and
    # the multi-GPU steps do not enter it
    b = np.array([8.0, 16.0, 64.0, 32.0])
    t = np.array([line(v) for v in b]) * np.array([1.0, 1.0, 1.0, math.exp(0.1)])
    (alpha, beta), *_ = np.linalg.lstsq(np.c_[np.ones(4), b] / t[:, None], np.ones(4), rcond=None)
    assert alpha > 0 and beta > 0
    expected = math.sqrt(np.mean(np.log((alpha + beta * b) / t) ** 2))
    assert expected == pytest.approx(0.0410094, abs=1e-6)
    rows = [row("m", 1, (1,), 1.0 / tv, bv) for bv, tv in zip(b, t)] + multi_gpu(HIER, "m")
    table = ProfileTable.build(rows)
    p = population(table, fit=truth_fit(table, HIER, ["m"]))
    assert p.one_gpu_noise == pytest.approx([expected], rel=1e-9)


def test_a_job_s_same_named_micro_benchmarks_are_not_its_steps():
    # all-reduces named "m" (kind collective) next to the job "m": the job's held-out scatter is
    # over its own 15 steps only, all exact
    table = ProfileTable.build(collectives(HIER, model="m") + one_gpu("m") + multi_gpu(HIER, "m"))
    p = population(table, fit=truth_fit(table, HIER, ["m"]))
    assert p.noise == pytest.approx([0.0], abs=1e-6)
    assert p.one_gpu_noise == pytest.approx([0.0], abs=1e-9)


def test_the_held_out_fit_keeps_the_one_gpu_floor():
    # one-GPU steps on the line 0.008·(0.25 + 0.75·b/8) at b = 4, 8, 16 and a floor of 0.005 s at
    # b = 1 and 2; the multi-GPU steps at b = 1 and 2 compute for the floor's 0.005 s: predicted with
    # the floor, every held-out step is exact
    one = [row("m", 1, (1,), 1.0 / t, b) for b, t in [(1.0, 0.005), (2.0, 0.005)]]
    one += [row("m", 1, (1,), 1.0 / line(b, 0.008, 8.0), b) for b in (4.0, 8.0, 16.0)]
    rows = one + multi_gpu(HIER, batches=(1.0, 2.0, 16.0), floor=0.005, t_ref=0.008, b_ref=8.0)
    table = ProfileTable.build(rows)
    fit = truth_fit(table, HIER, ["m"])
    assert fit.jobs["m"].t_floor == pytest.approx(0.005, rel=1e-12)
    p = population(table, fit=fit)
    assert p.noise == pytest.approx([0.0], abs=1e-6)


PERTURB = 0.1  # the measured exposed communication on (4,) is 0.1·T more than the truth


def _comm_table():
    # shapes (2,), (1,1), (4,): as (gpus, nodes, max per node) sorted, ids 0, 1, 2; parity splits them
    # into {(2,), (4,)} and {(1,1)}. comm_s is measured exactly on (2,), 0.1·T too high on (4,), and
    # not at all on (1,1)
    def comm(shape, t, exposed):
        return {(2,): exposed, (4,): exposed + PERTURB * t}.get(tuple(shape))

    table = ProfileTable.build(one_gpu("m") + multi_gpu(RING, "m", shapes=[(2,), (1, 1), (4,)], comm=comm))
    return table, truth_fit(table, RING, ["m"])


def test_comm_noise_is_the_held_out_exposed_communication_scatter():
    # θ fitted on (1,1) alone (exact steps, no comm measured) is the truth: held out, (2,)'s three
    # measured exposed shares are off by 0 and (4,)'s by −0.1 each (prediction − measurement over T);
    # the fit on {(2,), (4,)} predicts (1,1), which measured none. rms = √(3·0.01 / 6) = 0.1/√2
    table, fit = _comm_table()
    p = population(table, fit=fit)
    np.testing.assert_allclose(p.thetas, [TH], atol=1e-12)
    assert p.comm_noise == pytest.approx([PERTURB / math.sqrt(2)], rel=1e-6)
    assert p.noise.size == 1 and p.noise[0] > 0  # the perturbed fit misses (1,1)'s steps


def test_population_without_jobs_keeps_its_cluster():
    # one all-reduce is enough to calibrate; no job, so nothing is pooled
    table = ProfileTable.build([row("ar16", 2, (2,), 100.0, 0.0, 16e6, kind="collective", cluster="solo")])
    p = population(table)
    assert p.cluster == "solo"
    assert p.thetas.shape == (0, 3)
    assert p.noise.size == p.comm_noise.size == p.one_gpu_noise.size == 0


def _hier_jobs(cluster: str = "c"):
    return ProfileTable.build(collectives(HIER, cluster=cluster) + one_gpu("m", cluster=cluster)
                              + multi_gpu(HIER, "m", cluster=cluster))


def test_population_fits_the_fabric_with_the_algorithm_it_is_given():
    # hierarchical data: fitted as hierarchical (and by default: the best fit) the job's θ is the
    # truth; forced to a ring it is whatever the ring fit makes of it, which is not
    table = _hier_jobs()
    np.testing.assert_allclose(population(table, "hierarchical").thetas, [TH], atol=1e-3)
    np.testing.assert_allclose(population(table).thetas, [TH], atol=1e-3)
    ring = population(table, "ring").thetas
    np.testing.assert_allclose(ring, [fit_fabric(table, algorithm="ring").jobs["m"].theta], rtol=1e-12)
    assert np.abs(ring - TH).max() > 0.05


# ---- learn_prior ----

def test_learn_prior_pools_a_population_per_testbed():
    # two testbeds, one job each (both the truth TH), each fitted on its own: mean TH, sd and noise
    # levels at the floor (exact data), no correlations from 2 jobs
    table = ProfileTable.concat([_hier_jobs("x"), _hier_jobs("y")])
    p = learn_prior(table, algorithm="hierarchical")
    assert p.mean == pytest.approx(tuple(TH), abs=1e-3)
    assert p.sd == FLOOR.sd
    assert (p.noise, p.comm_noise, p.one_gpu_noise) == (0.05, 0.03, 0.01)
    assert p.corr == (0.0, 0.0, 0.0)


def test_learn_prior_passes_the_algorithm_to_each_testbed():
    # forced to a ring, each testbed's θ is its ring fit's (not the truth the best fit finds)
    table = ProfileTable.concat([_hier_jobs("x"), _hier_jobs("y")])
    ring = fit_fabric(_hier_jobs("x"), algorithm="ring").jobs["m"].theta
    p = learn_prior(table, algorithm="ring")
    assert p.mean == pytest.approx(tuple(ring), rel=1e-9)
    assert np.abs(np.array(p.mean) - TH).max() > 0.05


# ---- write_prior, default_prior, bundled_populations ----

def test_write_prior_writes_the_pooled_prior_and_the_rounded_populations(tmp_path):
    a = pop([[0.12345678, -0.00000049, 0.5], [0.3, 0.22222222, 0.1]], noise=[0.123456789, 0.2],
            comm=[0.0612345678], one=[0.0311111111], cluster="a")
    b = pop([[0.2, 0.1, 0.3]], noise=[0.1], cluster="b")
    path = tmp_path / "prior.json"
    prior = write_prior([a, b], path)
    assert prior == prior_from([a, b])
    text = path.read_text()
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=1) + "\n"  # one-space indent, a final newline
    assert text.startswith('{\n "prior": {\n  "mean": [\n   ')
    assert list(doc) == ["prior", "populations"]
    assert doc["prior"] == {"mean": list(prior.mean), "sd": list(prior.sd), "noise": prior.noise,
                            "comm_noise": prior.comm_noise, "one_gpu_noise": prior.one_gpu_noise,
                            "corr": list(prior.corr)}
    # each testbed as it was pooled, rounded to 6 decimals
    assert doc["populations"] == [
        {"cluster": "a", "thetas": [[0.123457, -0.0, 0.5], [0.3, 0.222222, 0.1]], "noise": [0.123457, 0.2],
         "comm_noise": [0.061235], "one_gpu_noise": [0.031111]},
        {"cluster": "b", "thetas": [[0.2, 0.1, 0.3]], "noise": [0.1], "comm_noise": [], "one_gpu_noise": []},
    ]


def test_default_prior_is_the_bundled_one():
    # the prior stored in data/profiles/prior.json, correlations included — not the built-in default
    stored = json.loads(data_path(PRIOR_FILE).read_text())["prior"]
    p = default_prior()
    assert asdict(p) == {k: tuple(v) if isinstance(v, list) else v for k, v in stored.items()}
    assert p != Prior()
    assert any(c != 0.0 for c in p.corr)


def test_the_bundled_prior_is_pooled_from_the_bundled_populations():
    pops = bundled_populations()
    assert [p.cluster for p in pops] == ["pollux-t4", "gavel-k80", "gavel-p100", "gavel-v100", "cpu-gloo"]
    assert [p.thetas.shape for p in pops] == [(6, 3), (4, 3), (4, 3), (4, 3), (3, 3)]
    assert [p.comm_noise.size for p in pops] == [6, 0, 0, 0, 0]
    # the populations are stored rounded to 6 decimals, so pooling them again agrees to ~1e-6
    again, stored = prior_from(pops), default_prior()
    assert again.mean == pytest.approx(stored.mean, abs=1e-5)
    assert again.sd == pytest.approx(stored.sd, abs=1e-5)
    assert again.corr == pytest.approx(stored.corr, abs=1e-5)
    assert (again.noise, again.comm_noise, again.one_gpu_noise) == pytest.approx(
        (stored.noise, stored.comm_noise, stored.one_gpu_noise), abs=1e-5)
