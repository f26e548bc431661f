"""The plain-YAML reader and the strict JSON decoder, directly: hand-written cases for each rule and
property tests against PyYAML and json (what they write, we read back the same; a scalar YAML 1.1
reads as another value is an error here, never a silent difference)."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.runtime.text import find_bad_text, renderable, short, text_problem
from coddl.runtime.wire import BodyError, decode_json
from coddl.runtime.yaml_safe import MAX_ALIASES, YamlError, load


def env_text(path: tuple) -> bool:
    return len(path) == 2 and path[0] == "env"


@pytest.mark.parametrize("source,value", [
    ("a: 12", {"a": 12}), ("a: -3", {"a": -3}), ("a: +4", {"a": 4}), ("a: 0", {"a": 0}),
    ("a: 1.5", {"a": 1.5}), ("a: .5", {"a": 0.5}), ("a: 1e3", {"a": 1000.0}), ("a: -2.5E-1", {"a": -0.25}),
    ("a: true", {"a": True}), ("a: False", {"a": False}), ("a: TRUE", {"a": True}),
    ("a: ~", {"a": None}), ("a: null", {"a": None}), ("a:", {"a": None}), ("a: NULL", {"a": None}),
    ("a: text", {"a": "text"}), ("a: 'yes'", {"a": "yes"}), ('a: "0x10"', {"a": "0x10"}), ("a: !!str on", {"a": "on"}),
    ("a: |\n  yes\n", {"a": "yes\n"}), ("a: [1, two]", {"a": [1, "two"]}), ("a: {b: {c: 1}}", {"a": {"b": {"c": 1}}}),
    ("a: &x [1]\nb: *x", {"a": [1], "b": [1]}), ("1: x", {"1": "x"}), ("a: 1.10", {"a": 1.1}),
    ("env: {A: yes, B: 1.10, C: 0x10, D: 2024-01-02, E: ~, F: 1:30}",
     {"env": {"A": "yes", "B": "1.10", "C": "0x10", "D": "2024-01-02", "E": None, "F": "1:30"}}),
])
def test_values(source, value):
    assert load(source, env_text) == value


def test_special_floats():
    assert load("a: .inf")["a"] == math.inf and load("a: -.Inf")["a"] == -math.inf
    assert math.isnan(load("a: .NaN")["a"])


@pytest.mark.parametrize("source,message", [
    ("a: yes", "line 1: a: 'yes' is a boolean only in YAML 1.1"),
    ("a: Off", "line 1: a: 'Off' is a boolean only in YAML 1.1"),
    ("a: 0x1F", "line 1: a: '0x1F' is a number only in YAML 1.1"),
    ("a: 0b101", "line 1: a: '0b101' is a number only in YAML 1.1"),
    ("a: 017", "line 1: a: '017' is a number only in YAML 1.1"),
    ("a: 1_000", "line 1: a: '1_000' is a number only in YAML 1.1"),
    ("a: 1:30", "line 1: a: '1:30' is a number only in YAML 1.1"),
    ("a: 1_0.5", "line 1: a: '1_0.5' is a number only in YAML 1.1 ('_' or ':' forms)"),
    ("a: 2024-01-02", "line 1: a: '2024-01-02' is a date in YAML 1.1: quote it"),
    ("b: 1\na: [x, {c: yes}]", "line 2: a.1.c: 'yes' is a boolean"),
    ("a: 1\na: 2", "line 2: a: duplicate key (first on line 1)"),
    ("a: {b: 1, b: 1}", "line 1: a.b: duplicate key (first on line 1)"),
    ("<<: {a: 1}", "line 1: merge keys (<<) are not supported"),
    ("a: !!int 3", "line 1: a: YAML tags are not supported (tag:yaml.org,2002:int)"),
    ("a: !!python/name:os.system", "YAML tags are not supported"),
    ("a: !custom x", "YAML tags are not supported (!custom)"),
    ("? [a]\n: 1", "line 1: a key must be plain text"),
    ("a: &x [*x]", "line 1: a.0: an alias refers to a collection that contains it"),
    ("a: *nope", "line 1: found undefined alias"),
    ("a: 1\n---\nb: 2", "expected a single document in the stream, but found another document"),
    ("a: 'unclosed", "line 1: while scanning a quoted scalar, found unexpected end of stream"),
    ("a: \x07", "character U+0007 at offset 3 is not allowed in YAML"),
    ("a: " + "[" * 17 + "]" * 17, "line 1: nested more than 16 levels deep"),
    ("a: " + "9" * 5000, "line 1: a: an integer of 5,000 digits"),
])
def test_errors(source, message):
    with pytest.raises(YamlError) as e:
        load(source, env_text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_aliases_are_bounded_by_count_and_by_expanded_size():
    anchors = "a: &a [1, 2]\n" + "".join(f"b{i}: *a\n" for i in range(MAX_ALIASES))
    assert len(load(anchors)) == MAX_ALIASES + 1
    with pytest.raises(YamlError, match=f"more than {MAX_ALIASES} aliases"):
        load(anchors + "c: *a\n")
    # 16 aliases can still double a list 8 times over: from 40 values, 40 × 511 in all, past the bound
    doubling = "l0: &l0 [" + ", ".join(["1"] * 40) + "]\n" + "".join(
        f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]\n" for i in range(1, 9))
    with pytest.raises(YamlError, match=r"l7\.[0-9.]+: more than 10,000 values once aliases are expanded"):
        load(doubling)
    assert len(load("\n".join(doubling.splitlines()[:6]))["l5"]) == 2  # 40 × 63 values: well within


texts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)
scalars = st.one_of(st.integers(-10**12, 10**12), st.booleans(), st.none(), texts,
                    st.floats(allow_nan=False, allow_infinity=True))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), texts, max_size=6))
def test_env_text_written_by_pyyaml_reads_back_as_written(env):
    assert load(yaml.safe_dump({"env": env}), env_text) == {"env": env}


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True),
                       st.one_of(st.integers(-10**12, 10**12), st.booleans(), st.none(),
                                 st.lists(st.integers(0, 9), max_size=3)), max_size=6))
def test_numbers_booleans_and_nulls_written_by_pyyaml_read_back_the_same(data):
    assert load(yaml.safe_dump(data)) == data


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[-+0-9a-zA-Z_.:~ ]{1,12}", fullmatch=True))
def test_a_plain_scalar_is_never_silently_read_otherwise_than_yaml_11_reads_it(word):
    """Either both readings agree, or YAML 1.1 reads text where 1.2 reads a number (``1e3``), or we
    refuse it: a value YAML 1.1 would read as another bool, number or date never passes."""
    source = f"a: {word}"
    try:
        old = yaml.safe_load(source)
    except yaml.YAMLError:
        return
    try:
        new = load(source)
    except YamlError:
        return
    a, b = old["a"], new["a"]
    assert a == b or (isinstance(a, str) and isinstance(b, float)) or (a != a and b != b), (word, a, b)


@settings(max_examples=100, deadline=None)
@given(st.recursive(scalars.filter(lambda v: not (isinstance(v, float) and math.isinf(v))),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                    max_leaves=20))
def test_decode_json_reads_what_json_writes(value):
    assert decode_json(json.dumps(value).encode()) == value
    assert decode_json(json.dumps(value, ensure_ascii=False).encode()) == value


@pytest.mark.parametrize("raw,status,message", [
    (b'{"a": 1, "a": 2}', 422, "body: duplicate key 'a'"),
    (b'{"a": {"b": 1, "b": 1}}', 422, "body: duplicate key 'b'"),
    (b'[NaN]', 422, "NaN is not a JSON number"),
    (b'[Infinity]', 422, "Infinity is not a JSON number"),
    (b"[" + b"9" * 5000 + b"]", 422, "a number with too many digits"),
    (b"[" * 100_000, 422, "body: nested too deeply"),
    (b"\xff", 400, "body: not UTF-8 (byte 0xff at offset 0)"),
    (b'{"a": 1', 422, "body: not valid JSON (Expecting ',' delimiter at line 1 column 8)"),
])
def test_decode_json_refuses(raw, status, message):
    with pytest.raises(BodyError) as e:
        decode_json(raw)
    assert e.value.status == status and message in str(e.value)


def test_text_rules():
    assert text_problem("ok ünï 漢字 🎉") is None
    assert text_problem("a\x00") == "must not contain a NUL character"
    assert text_problem("a\ud800b") == "is not valid Unicode (a lone surrogate U+D800 at character 1)"
    assert find_bad_text({"a": [{"b": "x\udc80"}]}) == (("a", 0, "b"), "is not valid Unicode (a lone surrogate "
                                                                      "U+DC80 at character 1)")
    assert find_bad_text({"k\x00": 1}) == (("'k\\x00'",), "key must not contain a NUL character")
    assert find_bad_text({"a": {"b": [1, 2.5, None, True]}}) is None
    deep: list = ["deep"]
    for _ in range(17):
        deep = [deep]
    assert find_bad_text(deep)[1] == "nested more than 16 levels deep"
    assert short("x" * 100) == "'" + "x" * 58 + "…" and short("a\nb") == "'a\\nb'"
    assert renderable({"k\ud800": ["v\udfff", math.nan, math.inf, 1.5, 2]}) == {"k\ufffd": ["v\ufffd", None, None,
                                                                                          1.5, 2]}
