"""Policy specs as a user types them (``name:key=value+key=value``), pinned value by value: each
parameter type's conversion, both separators, presets overridden by later keys, every error's exact
message, the split of a ``--policies`` list, and registration of a class under its name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from coddl.policies import available, make_policy, register, registry
from coddl.policies.base import Policy
from coddl.policies.fifo import Fifo
from coddl.policies.registry import PolicySpecError, split_policy_list
from coddl.policies.tiresias import TiresiasL


def test_available_lists_the_registered_classes_sorted_by_name() -> None:
    pols = available()
    assert list(pols) == sorted(pols)
    assert pols["fifo"] is Fifo and pols["tiresias-l"] is TiresiasL
    pols.pop("fifo")  # a copy: the registry itself is untouched
    assert available()["fifo"] is Fifo


def test_register_returns_the_class_and_accepts_the_same_class_again() -> None:
    assert register(Fifo) is Fifo
    assert available()["fifo"] is Fifo


def test_a_new_name_is_registered_and_a_second_class_under_it_is_refused(monkeypatch) -> None:
    available()  # every built-in loaded, then a copy of the registry that this test may change
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @dataclasses.dataclass
    class P:
        n: int = 1

    first = type("PinFirst", (Policy,), {"name": "pin-registry-test", "Params": P, "__module__": "pins.a"})
    assert register(first) is first
    assert available()["pin-registry-test"] is first
    assert type(make_policy("pin-registry-test:n=4")) is first
    other = type("PinOther", (Policy,), {"name": "pin-registry-test", "Params": P, "__module__": "pins.b"})
    with pytest.raises(PolicySpecError) as e:
        register(other)
    assert str(e.value) == ("policy name 'pin-registry-test' is taken by pins.a.PinFirst; "
                            "pins.b.PinOther must use another")
    assert available()["pin-registry-test"] is first
    # the same module and name (a module imported twice) is the same class: accepted
    again = type("PinFirst", (Policy,), {"name": "pin-registry-test", "Params": P, "__module__": "pins.a"})
    assert register(again) is again


# ------------------------------------------------------------------ values
def test_each_parameter_type_is_converted() -> None:
    p = make_policy("tiresias-l:thresholds=100/50/+knob=2.5+service=since-start+keep_demotion=no").params
    assert p.thresholds == (100.0, 50.0) and all(type(x) is float for x in p.thresholds)
    assert p.knob == 2.5 and type(p.knob) is float
    assert p.service == "since-start" and p.keep_demotion is False
    assert make_policy("afs-p:seed=7").params.seed == 7 and type(make_policy("afs-p:seed=7").params.seed) is int


@pytest.mark.parametrize("raw, value", [("1", True), ("true", True), ("YES", True), ("On", True),
                                        ("0", False), ("False", False), ("no", False), ("OFF", False)])
def test_booleans_in_every_spelling(raw: str, value: bool) -> None:
    assert make_policy(f"fifo:backfill={raw}").params.backfill is value


@pytest.mark.parametrize("raw", ["none", "None", "off", "OFF", "null", "NULL"])
def test_an_optional_parameter_is_none_in_every_spelling(raw: str) -> None:
    assert make_policy(f"tiresias-l:knob={raw}").params.knob is None


def test_an_optional_parameter_otherwise_takes_its_type() -> None:
    p = make_policy("tiresias-l:knob=3").params
    assert p.knob == 3.0 and type(p.knob) is float


@pytest.mark.parametrize("spec, message", [
    ("fifo:backfill=maybe", "fifo: parameter backfill: expected bool, got 'maybe'"),
    ("tiresias-l:knob=lots", "tiresias-l: parameter knob: expected float, got 'lots'"),
    ("afs-p:seed=1.5", "afs-p: parameter seed: expected int, got '1.5'"),
    ("tiresias-l:thresholds=1/x", "tiresias-l: parameter thresholds: expected tuple, got '1/x'"),
    ("fifo:backfill", "fifo: expected key=value, got 'backfill'"),
    ("fifo:preset=paper", "fifo: unknown preset 'paper'; valid presets: none"),
    ("tiresias-l:preset=fast", "tiresias-l: unknown preset 'fast'; valid presets: paper, tiresias-sim, coddl"),
    ("fifo:slice=3", "fifo: unknown parameter 'slice'; valid parameters: backfill"),
    ("max-min:x=1", "max-min: unknown parameter 'x'; valid parameters: none"),
    ("nope", "unknown policy 'nope'; valid policies: "),
])
def test_every_mistake_is_one_exact_message(spec: str, message: str) -> None:
    with pytest.raises(PolicySpecError) as e:
        make_policy(spec)
    if message.endswith("valid policies: "):
        assert str(e.value) == message + ", ".join(available())
    else:
        assert str(e.value) == message


def test_spaces_separators_and_presets() -> None:
    assert type(make_policy("  fifo  ")) is Fifo
    p = make_policy("tiresias-l: knob = 4 ").params  # the key and the value are stripped
    assert p.knob == 4.0
    # ";" separates when present (then "+" is part of a value); otherwise "+"; empty items skipped
    p = make_policy("tiresias-l:preset=paper;knob=2;;").params
    assert (p.thresholds, p.knob, p.service) == ((3600.0,), 2.0, "attained")
    p = make_policy("tiresias-l:knob=2++preset=coddl").params  # the preset comes later and wins
    assert (p.thresholds, p.knob, p.service) == ((180_000.0,), None, "since-start")
    p = make_policy("tiresias-l:preset=coddl+knob=2").params  # a later key overrides the preset
    assert (p.thresholds, p.knob) == ((180_000.0,), 2.0)
    assert make_policy("tiresias-l:").params == TiresiasL.Params()
    assert make_policy("tiresias-l").params == TiresiasL.Params()
    with pytest.raises(PolicySpecError, match="expected float, got '2\\+1'"):
        make_policy("tiresias-l:knob=2+1;service=attained")


def test_a_made_policy_is_a_fresh_instance_with_its_params() -> None:
    a, b = make_policy("fifo:backfill=false"), make_policy("fifo:backfill=false")
    assert a is not b and a.params == b.params == Fifo.Params(backfill=False)
    assert a.allocate is not None and isinstance(a, Fifo)
    assert np.array_equal(np.asarray(dataclasses.astuple(a.params)), np.asarray((False,)))


# ------------------------------------------------------------------ --policies lists
@pytest.mark.parametrize("text, specs", [
    ("fifo,srtf", ["fifo", "srtf"]),
    ("fifo, afs-p:slice_s=3600, tiresias-l:preset=paper+knob=4",
     ["fifo", "afs-p:slice_s=3600", "tiresias-l:preset=paper+knob=4"]),
    ("afs-p:slice_s=3600,seed=3,fifo", ["afs-p:slice_s=3600+seed=3", "fifo"]),
    ("afs-p,slice_s=3600,seed=3", ["afs-p:slice_s=3600+seed=3"]),
    ("afs-p:,slice_s=3600", ["afs-p:slice_s=3600"]),
    ("slice_s=3600,fifo", ["slice_s=3600", "fifo"]),
    (" , fifo,, ", ["fifo"]),
    ("", []),
])
def test_split_policy_list(text: str, specs: list[str]) -> None:
    assert split_policy_list(text) == specs


# ------------------------------------------------------------------ plug-ins, in this process
PLUGIN = '''
import numpy as np
from coddl.policies import Policy, register

@register
class PinPlugin(Policy):
    name = "pin-plugin"

    def allocate(self, ctx):
        return np.zeros(len(ctx.jobs), dtype=np.int64)
'''


def _entry_points(monkeypatch, *eps: tuple[str, str]) -> list[str]:
    """Entry points of the coddl.policies group as importlib.metadata would list them; the registry
    starts afresh (a copy: the real one is restored). Returns the groups asked for."""
    from importlib import metadata

    available()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_loaded", False)
    asked: list[str] = []
    listed = [metadata.EntryPoint(name=n, value=v, group="coddl.policies") for n, v in eps]

    def entry_points(group: str):
        asked.append(group)
        return listed if group == "coddl.policies" else []

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", entry_points)
    return asked


def test_a_plugin_module_named_by_an_entry_point_is_imported_once(monkeypatch, tmp_path) -> None:
    (tmp_path / "pin_plugin_module.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    asked = _entry_points(monkeypatch, ("pinned", "pin_plugin_module:PinPlugin"))
    pols = available()
    assert pols["pin-plugin"].__module__ == "pin_plugin_module" and "fifo" in pols
    assert asked == ["coddl.policies"]
    available()
    make_policy("fifo")
    assert asked == ["coddl.policies"]  # loaded once per process


@pytest.mark.parametrize("value", ["no_such_pin_module_xyz:Thing", "no_such_pin_module_xyz"])
def test_a_plugin_that_cannot_be_imported_is_named_in_process(monkeypatch, value: str) -> None:
    _entry_points(monkeypatch, ("broken", value))  # a module and an attribute, or the module alone
    with pytest.raises(PolicySpecError) as e:
        available()
    assert str(e.value) == (f"policy plug-in 'broken' ({value}) cannot be imported: "
                            "No module named 'no_such_pin_module_xyz'")
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_value_may_contain_an_equals_sign_and_every_parameter_is_listed() -> None:
    with pytest.raises(PolicySpecError) as e:
        make_policy("tiresias-l:service=a=b")
    assert str(e.value) == "tiresias-l: service must be 'attained' or 'since-start', got 'a=b'"
    with pytest.raises(PolicySpecError) as e:
        make_policy("tiresias-l:slice=1")
    assert str(e.value) == ("tiresias-l: unknown parameter 'slice'; valid parameters: thresholds, knob, service, "
                            "queue_order, starvation_wait, keep_demotion, backfill")
