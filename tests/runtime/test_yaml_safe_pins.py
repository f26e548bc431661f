"""Hand-computed pins of ``runtime/yaml_safe.py``: each bound at its edge (aliases, depth, values, file
size), the exact one-line messages with their line and field, and the line of every field path."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coddl.runtime.yaml_safe import (MAX_ALIASES, MAX_DEPTH, MAX_VALUES, YamlError, YamlFileError, dotted, load,
                                     read_file)


def _err(text: str, text_at=lambda _p: False) -> YamlError:
    with pytest.raises(YamlError) as e:
        load(text, text_at)
    assert "\n" not in str(e.value)
    return e.value


def test_the_bounds():
    assert (MAX_ALIASES, MAX_DEPTH, MAX_VALUES) == (16, 16, 10_000)


def test_yaml_error_message_parts():
    assert str(YamlError(3, ("env", "A"), "bad")) == "line 3: env.A: bad"
    assert str(YamlError(None, ("args", 2), "bad")) == "args.2: bad"
    assert str(YamlError(7, (), "bad")) == "line 7: bad"
    assert str(YamlError(None, (), "bad")) == "bad"
    e = YamlError(2, ("a",), "p")
    assert (e.line, e.path, e.problem) == (2, ("a",), "p")
    assert dotted(()) == "" and dotted(("a", 0, "b")) == "a.0.b"


def test_aliases_sixteen_read_the_seventeenth_refused_on_its_line():
    ok = "a: &a 1\n" + "".join(f"b{i}: *a\n" for i in range(16))
    assert load(ok) == {"a": 1, **{f"b{i}": 1 for i in range(16)}}
    e = _err(ok + "c: *a\n")
    assert str(e) == ("line 18: more than 16 aliases (*name); a job file needs few, and nested aliases can expand "
                      "to billions of values")


def test_depth_sixteen_read_the_seventeenth_refused_on_its_line():
    # the top mapping is level 1, each list one more: 14 lists and the scalar make 16
    assert load("a: " + "[" * 14 + "1" + "]" * 14) == {"a": [[[[[[[[[[[[[[1]]]]]]]]]]]]]]}
    assert str(_err("a: " + "[" * 15 + "1" + "]" * 15)) == "line 1: nested more than 16 levels deep"
    # aliases do not count as levels: depth returns after each sibling
    wide = "a:\n" + "".join(f"  - {'[' * 13}{i}{']' * 13}\n" for i in range(3))
    assert len(load(wide)["a"]) == 3
    assert str(_err("x: 1\ny:\n  z:\n    - " + "[" * 14 + "1" + "]" * 14 + "\n")) == \
        "line 4: nested more than 16 levels deep"
    # a finished child gives back its level, not more: the second item of the 15th level is the 17th
    assert str(_err("a: " + "[" * 14 + "0, [1]" + "]" * 14)) == "line 1: nested more than 16 levels deep"


def test_values_ten_thousand_read_one_more_refused_where_it_is():
    # the mapping, the list and its items: 2 + 9998 = 10,000 values
    assert len(load("a: [" + ", ".join(["1"] * 9998) + "]")["a"]) == 9998
    e = _err("b: 1\na: [" + ", ".join(["1"] * 9998) + "]")
    assert str(e) == "line 2: a.9997: more than 10,000 values once aliases are expanded"
    assert e.path == ("a", 9997)


def test_scalars_by_the_yaml_12_core_schema():
    assert load("a: ! 12") == {"a": 12}  # the non-specific tag '!' is not a tag that makes text
    assert load("a: !!str 12") == {"a": "12"}
    assert load("a: !!str") == {"a": ""}
    assert load("a: '12'\nb: \"12\"\nc: >\n  12\n") == {"a": "12", "b": "12", "c": "12\n"}
    assert load("a: -0\nb: +7\nc: 1.\nd: .5e-1\ne: 1E+2") == {"a": 0, "b": 7, "c": 1.0, "d": 0.05, "e": 100.0}
    assert load("a: +.inf\nb: -.INF\nc: .Inf") == {"a": math.inf, "b": -math.inf, "c": math.inf}
    assert math.isnan(load("a: .NAN")["a"]) and math.isnan(load("a: .nan")["a"])
    assert load("a: 0o17\nb: 12e\nc: -.nan\nd: Yes please") == {"a": "0o17", "b": "12e", "c": "-.nan",
                                                                "d": "Yes please"}
    assert load("a: ''\nb: \"\"") == {"a": "", "b": ""}
    assert str(_err("a: +010")) == ("line 1: a: '+010' is a number only in YAML 1.1 (hex, octal, '_' or ':' "
                                    "forms): write it in decimal, or quote it for text")
    assert str(_err("a: 1_0.5")) == ("line 1: a: '1_0.5' is a number only in YAML 1.1 ('_' or ':' forms): write it "
                                     "in plain decimal, or quote it for text")
    assert str(_err("a: on")) == "line 1: a: 'on' is a boolean only in YAML 1.1: write true or false, or quote it for text"
    assert str(_err("\n\nk: 2001-12-14")) == "line 3: k: '2001-12-14' is a date in YAML 1.1: quote it"
    assert str(_err("a: " + "1" * 4301)) == "line 1: a: an integer of 4,301 digits"


def test_text_fields_keep_the_text_as_written():
    def env(path):
        return len(path) == 2 and path[0] == "env"

    assert load("env: {A: ~, B: null, C: '', D: NULL, E: Null, F: nil, G: 010, H: .5, I: true}", env) == \
        {"env": {"A": None, "B": None, "C": "", "D": None, "E": None, "F": "nil", "G": "010", "H": ".5",
                 "I": "true"}}
    assert load("env:", env) == {"env": None}


def test_keys_merges_tags_duplicates_cycles():
    assert load("'<<': 1") == {"<<": 1}  # a quoted << is a key like any other
    assert load("!!str a: 1") == {"a": 1}
    assert str(_err("a: 1\n\nb:\n  c: 1\n  c: 2\n")) == "line 5: b.c: duplicate key (first on line 4)"
    assert str(_err("x:\n  ? !!int 1\n  : y\n")) == "line 2: x: a key must be plain text"
    assert str(_err("x:\n  <<: {a: 1}\n")) == "line 2: x: merge keys (<<) are not supported: write the fields out"
    assert load("a: !!seq [1]\nb: !!map {c: 1}") == {"a": [1], "b": {"c": 1}}  # the default tags, written out
    assert str(_err("a: !pair [1]")) == "line 1: a: YAML tags are not supported (!pair)"
    assert str(_err("a:\n  b: !set {c: 1}")) == "line 2: a.b: YAML tags are not supported (!set)"
    assert str(_err("a: &x\n  b: *x\n")) == "line 1: a.b: an alias refers to a collection that contains it (a cycle)"
    # an alias to a finished collection is no cycle, however often it is used
    assert load("a: &x {b: [1]}\nc: [*x, *x]") == {"a": {"b": [1]}, "c": [{"b": [1]}, {"b": [1]}]}


def test_parse_errors_name_their_line():
    assert str(_err("a: 1\nb: [1,\n")) == "line 3: while parsing a flow node, expected the node content, but found '<stream end>'"
    assert str(_err("a:\tb: [\x01]")) == "character U+0001 at offset 7 is not allowed in YAML"
    assert load("") is None and load("# nothing\n") is None


def test_the_line_of_every_field():
    lines: dict[str, int] = {}
    assert load("a: 1\nb:\n  - x\n  - {c: 2}\n", lines=lines) == {"a": 1, "b": ["x", {"c": 2}]}
    assert lines == {"": 1, "a": 1, "b": 3, "b.0": 3, "b.1": 4, "b.1.c": 4}
    again = {"a": 9}
    load("x: 1\na: 2", lines=again)
    assert again == {"a": 9, "": 1, "x": 1}  # a line already known is kept


def test_read_file(tmp_path: Path):
    def read(data: bytes | None, limit: int = 100, name: str = "j.yaml"):
        p = tmp_path / name
        if data is not None:
            p.write_bytes(data)
        with pytest.raises(YamlFileError) as e:
            read_file(p, limit, "a job file", "a mapping of job fields")
        return str(e.value), e.value.path

    p = tmp_path / "ok.yaml"
    p.write_bytes(b"a: 1\nb: [x]\n" + b"#" * 88)  # exactly 100 bytes
    assert read_file(p, 100, "a job file", "fields") == ({"a": 1, "b": ["x"]}, {"": 1, "a": 1, "b": 2, "b.0": 2})
    assert read(b"a: 1\n" + b"#" * 96) == (f"{tmp_path / 'j.yaml'}: larger than 0 KiB, the most a job file may be", ())
    assert read(b"#" * 2049, 2048)[0].endswith(": larger than 2 KiB, the most a job file may be")
    assert read(b"#" * (1 << 20), (1 << 20) - 1)[0].endswith(": larger than 1023 KiB, the most a job file may be")
    assert read(b"#" * ((2 << 20) + 1), 2 << 20)[0].endswith(": larger than 2 MiB, the most a job file may be")
    assert read(b"a: caf\xe9\n") == (f"{tmp_path / 'j.yaml'}: not UTF-8 text (byte 0xe9 at offset 6)", ())
    assert read(b"# only a comment\n") == (f"{tmp_path / 'j.yaml'}: empty (expected a mapping of job fields)", ())
    assert read(b"a: 1\nb: {c: yes}\n") == (f"{tmp_path / 'j.yaml'}: line 2: b.c: 'yes' is a boolean only in YAML "
                                            "1.1: write true or false, or quote it for text", ("b", "c"))
    assert read(None, name="absent.yaml") == (f"{tmp_path / 'absent.yaml'}: no such file", ())
    (tmp_path / "dir.yaml").mkdir()
    assert read(None, name="dir.yaml") == (f"{tmp_path / 'dir.yaml'}: cannot read: Is a directory", ())
    p.write_text("env: {A: 1.10}\n")
    assert read_file(p, 100, "x", "y", lambda path: path == ("env", "A"))[0] == {"env": {"A": "1.10"}}


def test_errors_of_the_document_as_a_whole_blame_no_field(tmp_path: Path):
    """Depth, alias count and a forbidden character are the file's problems, not a field's: their
    path is empty (a job file's reader names the field from it)."""
    for text in ("a: " + "[" * 15 + "1" + "]" * 15, "a: &a 1\n" + "".join(f"b{i}: *a\n" for i in range(17)),
                 "a: \x01"):
        assert _err(text).path == ()
        p = tmp_path / "f.yaml"
        p.write_text(text)
        with pytest.raises(YamlFileError) as e:
            read_file(p, 10_000, "a job file", "fields")
        assert e.value.path == ()


def test_a_special_float_with_an_exponent_is_a_plain_number():
    assert load("a: .5e1\nb: -.5E+1\nc: +.25e2") == {"a": 5.0, "b": -5.0, "c": 25.0}


def test_a_yaml_error_without_a_problem_or_a_mark(monkeypatch):
    import yaml

    from coddl.runtime import yaml_safe

    def broken(self):
        raise yaml.MarkedYAMLError()

    monkeypatch.setattr(yaml_safe._Loader, "get_single_node", broken)
    e = _err("a: 1")
    assert (str(e), e.line, e.path) == ("not valid YAML", None, ())


def test_read_file_reads_no_further_than_the_limit_and_names_an_unnamed_error(tmp_path: Path):
    class Endless:  # a file that never ends: read no further than max_bytes + 1 bytes, then refused
        asked: list = []

        def open(self, mode):
            return self

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def read(self, n=-1):
            if n is None or n < 0:
                raise AssertionError("read to the end of an endless file")
            self.asked.append(n)
            return b"#" * n

        def __str__(self):
            return "endless.yaml"

    with pytest.raises(YamlFileError) as e:
        read_file(Endless(), 1024, "a job file", "fields")  # type: ignore[arg-type]
    assert str(e.value) == "endless.yaml: larger than 1 KiB, the most a job file may be"
    assert Endless.asked == [1025]
    p = tmp_path / "m.yaml"
    p.write_bytes(b"#" * ((1 << 20) + 1))
    with pytest.raises(YamlFileError) as e:
        read_file(p, 1 << 20, "a job file", "fields")
    assert str(e.value) == f"{p}: larger than 1 MiB, the most a job file may be"

    class Unreadable:
        def open(self, mode):
            raise OSError()

        def __str__(self):
            return "u.yaml"

    with pytest.raises(YamlFileError) as e:
        read_file(Unreadable(), 100, "a job file", "fields")  # type: ignore[arg-type]
    assert str(e.value) == "u.yaml: cannot read: OSError"
