"""Presets and parameter checking of the CoDDL family and the baselines (ALGORITHMS.md §4)."""

from __future__ import annotations

import pytest

from coddl.policies import make_policy
from coddl.policies.registry import PolicySpecError


def test_tiresias_presets_are_the_documented_settings() -> None:
    paper = make_policy("tiresias-l:preset=paper").params
    assert (paper.thresholds, paper.knob, paper.service) == ((3600.0,), 8.0, "attained")
    sim = make_policy("tiresias-l:preset=tiresias-sim").params
    assert (sim.thresholds, sim.knob) == ((3250.0, 7200.0), None)
    coddl = make_policy("tiresias-l:preset=coddl").params
    assert (coddl.thresholds, coddl.knob, coddl.service, coddl.queue_order) == \
        ((180_000.0,), None, "since-start", "first-start")  # 50 GPU-hours
    assert make_policy("tiresias-l:preset=paper+knob=4").params.knob == 4.0


def test_other_presets_and_defaults() -> None:
    assert make_policy("optimus:preset=coddl").params.start == "zero"
    assert make_policy("optimus:preset=request").params.start == "request"
    assert make_policy("afs-p").params.slice_s == 7200.0
    g = make_policy("tiresias-g").params
    assert (g.delta, g.bootstrap) == (3250.0, "yarn-gput1000.csv")


@pytest.mark.parametrize("spec", ["tiresias-l:service=wall", "tiresias-l:queue_order=random",
                                  "optimus:start=one", "tiresias-g:bootstrap=yarn-gput7.csv",
                                  "afs-l:order=random"])
def test_bad_parameter_values_are_clear_errors(spec: str) -> None:
    field, value = spec.split(":")[1].split("=")
    with pytest.raises(PolicySpecError, match=field) as err:
        make_policy(spec)
    assert repr(value) in str(err.value)  # the message shows what was given


def test_elastic_and_rigid_declarations() -> None:
    for name in ("afs-l", "afs-p", "optimus", "themis"):
        assert make_policy(name).elastic
    for name in ("srsf", "tiresias-l", "tiresias-g"):
        assert not make_policy(name).elastic
