"""Hand-computed pins of ``runtime/text.py``: which strings the store cannot hold (and where in a
request the first one is), the bounded repr of messages, and how an old row is made sendable."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from coddl.runtime.text import MAX_DEPTH, PLACEHOLDER, find_bad_text, renderable, short, text_problem


def test_text_problem_names_the_character():
    assert text_problem("") is None and text_problem("héllo ✓") is None
    assert text_problem("a\x00b") == "must not contain a NUL character"
    assert text_problem("ab\ud800c") == "is not valid Unicode (a lone surrogate U+D800 at character 2)"
    assert text_problem("\udfff") == "is not valid Unicode (a lone surrogate U+DFFF at character 0)"
    # both: the NUL is named first
    assert text_problem("\ud800\x00") == "must not contain a NUL character"


def test_the_first_bad_string_is_found_with_its_path():
    assert find_bad_text({"a": 1, "b": [1.5, None, True, "ok"], "c": {"d": "fine"}}) is None
    assert find_bad_text("\x00") == ((), "must not contain a NUL character")
    # past good keys, values and list items
    assert find_bad_text({"a": "ok", "b": ["x", "y", "z\x00"]}) == (("b", 2), "must not contain a NUL character")
    assert find_bad_text({"a": {"ok": 1, "b": "\ud800"}}) == \
        (("a", "b"), "is not valid Unicode (a lone surrogate U+D800 at character 0)")
    # a bad key is named by its (bounded) repr, after the good keys before it
    assert find_bad_text({"good": "v", "env": {"A": "1", "B\x00": "2"}}) == \
        (("env", "'B\\x00'"), "key must not contain a NUL character")
    # the first in order wins
    assert find_bad_text(["\x00", "\ud800"]) == ((0,), "must not contain a NUL character")
    assert find_bad_text([{"k": "fine"}, {"k": "\ud800"}]) == \
        ((1, "k"), "is not valid Unicode (a lone surrogate U+D800 at character 0)")
    # integer keys (YAML) are not text: passed over, their values still looked at
    assert find_bad_text({1: "\x00"}) == ((1,), "must not contain a NUL character")


def _nested(depth: int, leaf):
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


def test_sixteen_levels_are_walked_seventeen_refused():
    assert MAX_DEPTH == 16
    assert find_bad_text(_nested(16, "ok")) is None
    assert find_bad_text(_nested(16, "\x00")) == ((0,) * 16, "must not contain a NUL character")
    assert find_bad_text(_nested(17, "ok")) == ((0,) * 17, "nested more than 16 levels deep")
    deep = {"a": _nested(16, 1)}
    assert find_bad_text(deep) == (("a",) + (0,) * 16, "nested more than 16 levels deep")


def test_short_is_a_bounded_one_line_repr():
    assert short("x" * 58) == repr("x" * 58)  # 60 characters with the quotes: kept whole
    assert short("x" * 59) == "'" + "x" * 58 + "…"  # 61: cut to 59 and the ellipsis
    assert len(short("x" * 10_000)) == 60
    assert short("a\nb") == "'a\\nb'"
    assert short(12, limit=2) == "12" and short(123, limit=2) == "1…"
    assert short("\ud800") == "'\\ud800'"  # repr escapes a lone surrogate

    class Odd:
        def __repr__(self) -> str:
            return "<\ud800>"

    assert short(Odd()) == f"<{PLACEHOLDER}>"  # a repr that does not escape one is still made sendable
    assert short(Odd()).encode("utf-8")


def test_renderable_replaces_what_cannot_be_sent():
    assert PLACEHOLDER == "\ufffd"
    row = {"name": "a\ud800b", "loss": float("nan"), "rate": float("inf"), "neg": float("-inf"), "ok": 1.5,
           "n": 3, "none": None, "flag": True, "gpus": (1, 2), "tags": ["\udc00", 0.0],
           "nested": {"k\ud800": {"x": float("nan")}}, 7: "seven"}
    assert renderable(row) == {"name": "a\ufffdb", "loss": None, "rate": None, "neg": None, "ok": 1.5, "n": 3,
                               "none": None, "flag": True, "gpus": [1, 2], "tags": ["\ufffd", 0.0],
                               "nested": {"k\ufffd": {"x": None}}, 7: "seven"}
    assert renderable("\ud800\udfff") == "\ufffd\ufffd"
    # keys that are not text are left as they are (a tuple key is not made a list, an inf key not None)
    assert renderable({(1, 2): "a", float("inf"): "b"}) == {(1, 2): "a", float("inf"): "b"}
    assert renderable(0.1) == 0.1


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                    max_leaves=10))
def test_renderable_output_is_always_sendable(value):
    import json

    out = renderable(value)
    json.dumps(out, allow_nan=False).encode("utf-8")
    if find_bad_text(value) is None and not _has_nonfinite(value):
        assert out == _listify(value)


def _has_nonfinite(v) -> bool:
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, dict):
        return any(_has_nonfinite(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_nonfinite(x) for x in v)
    return False


def _listify(v):
    if isinstance(v, dict):
        return {k: _listify(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_listify(x) for x in v]
    return v
