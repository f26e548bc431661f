"""The bundled Pollux and Gavel profiles load as typed rows."""

from __future__ import annotations

import pytest

from coddl.perf.profiles import POLLUX_APPS, even_spread, load_gavel_throughputs, load_pollux_app


def test_every_pollux_app_has_one_gpu_rows_and_multi_node_rows():
    for name in POLLUX_APPS:
        app = load_pollux_app(name)
        assert len(app.single_gpu) >= 5
        assert any(r.num_nodes >= 6 for r in app.multi_gpu if r.source == "scalability")
        assert all(r.step_time > 0 for r in app.rows)


def test_pollux_rows_keep_placement_digits_and_spread_scalability_replicas_evenly():
    app = load_pollux_app("cifar10")
    first = app.rows[0]
    assert first.gpus_per_node == (1,) and first.local_bsz == 32
    assert first.samples_per_s == pytest.approx(32 / first.step_time)
    assert any(r.gpus_per_node == (1, 2, 1, 2) for r in app.rows)
    assert even_spread(6, 10) == (2, 2, 2, 2, 1, 1)


def test_unknown_pollux_app_names_the_known_ones():
    with pytest.raises(KeyError, match="cifar10"):
        load_pollux_app("mnist")


def test_gavel_speeds_are_relative_to_v100_per_job_type():
    gavel = load_gavel_throughputs()
    assert gavel.gpu_types == ("K80", "P100", "V100")
    assert len(gavel.job_types) == 26
    speed = gavel.speed_by_type("ResNet-50 (batch size 64)")
    assert speed["V100"] == 1.0 and speed["K80"] < speed["P100"] < 1.0
    assert gavel.steps[("V100", "ResNet-50 (batch size 64)", 4)] > gavel.steps[("V100", "ResNet-50 (batch size 64)", 1)]
