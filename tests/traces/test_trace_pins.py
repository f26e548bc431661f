"""Hand-computed pins of the trace readers' shared table layer (``traces/_table.py``): every bad
cell is one line naming file, line and field; good columns convert exactly."""

from __future__ import annotations

import gc
import gzip
from pathlib import Path

import numpy as np
import pytest

from coddl.traces import _table as T
from coddl.traces.model import TraceError, TraceJob


def _err(fn, *a, **kw) -> str:
    with pytest.raises(TraceError) as e:
        fn(*a, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------ gc and fail

def test_gc_paused_restores_the_collector_state():
    assert gc.isenabled()
    with T.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with T.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(KeyError):
        with T.gc_paused():
            raise KeyError("x")
    assert gc.isenabled()


def test_fail_with_and_without_line():
    assert _err(T.fail, "a.csv", 7, "num_gpus", "bad") == "a.csv:7: num_gpus: bad"
    assert _err(T.fail, "a.parquet", None, "schema", "bad") == "a.parquet: schema: bad"


# ------------------------------------------------------------------------------ read_text

def test_read_text_plain_gz_bom_and_errors(tmp_path: Path):
    p = tmp_path / "t.csv"
    p.write_bytes("\ufeffa,b\n1,2\n".encode())
    assert T.read_text(p) == "a,b\n1,2\n"
    g = tmp_path / "t.csv.gz"
    g.write_bytes(gzip.compress("\ufeffx,y\n".encode()))
    assert T.read_text(g) == "x,y\n"
    # a defect found here: the writer gzips W.CSV.GZ, the reader only gunzipped a lower-case .gz
    G = tmp_path / "T.CSV.GZ"
    G.write_bytes(gzip.compress(b"x,y\n"))
    assert T.read_text(G) == "x,y\n"
    # a .gz suffix only: not gunzipped otherwise
    raw = tmp_path / "gz.csv"
    raw.write_bytes(gzip.compress(b"x"))
    assert _err(T.read_text, raw) == f"{raw}: not a text file (expected UTF-8 CSV)"
    missing = tmp_path / "nope.csv"
    assert _err(T.read_text, missing) == f"{missing}: no such file"
    assert _err(T.read_text, tmp_path) == f"{tmp_path}: is a directory, expected a trace file"
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"not gzip at all")
    assert _err(T.read_text, bad).startswith(f"{bad}: cannot read: ")
    trunc = tmp_path / "trunc.csv.gz"
    trunc.write_bytes(gzip.compress(b"a,b\n1,2\n" * 10)[:-8])
    msg = _err(T.read_text, trunc)
    assert msg.startswith(f"{trunc}: cannot read: ") and msg != f"{trunc}: cannot read: None"


# ------------------------------------------------------------------------------ Table

def test_table_index_and_columns():
    t = T.Table("f.csv", ["a", "b"], [2, 4], [["1", "x"], ["2", "y"]])
    assert t.index == {"a": 0, "b": 1}
    assert t.header_line == 1
    c = t.column("b")
    assert (c.file, c.name, c.lines, c.values) == ("f.csv", "b", [2, 4], ["x", "y"])
    assert t.optional("a").values == ["1", "2"]
    assert t.optional("zz") is None
    assert _err(t.column, "zz") == "f.csv:1: zz: missing column; the header is a,b"


def test_table_shape_errors():
    assert _err(T.Table, "f.csv", ["a", "b", "a"], [2], [["1", "2", "3"]]) == \
        "f.csv:1: a: duplicate column in header a,b,a"
    assert _err(T.Table, "f.csv", ["a", "b", "c"], [2, 5], [["1", "2", "3"], ["1"]]) == \
        "f.csv:5: b: missing value (the row has 1 of 3 fields)"
    assert _err(T.Table, "f.csv", ["a", "b"], [2, 6], [["1", "2"], ["1", "2", "3"]]) == \
        "f.csv:6: row: expected 2 fields (a,b), got 3"
    assert _err(T.Table, "f.csv", ["a", "b"], [], [], header_line=4) == \
        "f.csv:4: rows: no jobs: the file has only a header"
    assert _err(T.Table, "f.parquet", ["a"], [], [], header_line=None) == \
        "f.parquet: rows: no jobs: the file has only a header"


def test_table_header_line_in_duplicate_and_missing():
    assert _err(T.Table, "f.csv", ["a", "a"], [4], [["1", "2"]], header_line=3) == \
        "f.csv:3: a: duplicate column in header a,a"
    t = T.Table("f.csv", ["a"], [4], [["1"]], header_line=3)
    assert _err(t.column, "b") == "f.csv:3: b: missing column; the header is a"


# ------------------------------------------------------------------------------ read_csv

def test_read_csv_skips_blank_lines_and_strips(tmp_path: Path):
    p = tmp_path / "t.csv"
    # " , " has two fields: it is not blank, so it is the header (and a duplicate column)
    p.write_text("\n , \n \n job_id , arrival\n")
    assert _err(T.read_csv, p) == "t.csv:2: : duplicate column in header ,"
    p.write_text("\n \njob_id, arrival\n\na, 1\n \nb,2\n")
    t = T.read_csv(p)
    assert t.header == ["job_id", "arrival"]
    assert t.header_line == 3
    assert t.lines == [5, 7]
    assert t.rows == [["a", "1"], ["b", "2"]]


def test_read_csv_single_column_and_errors(tmp_path: Path):
    p = tmp_path / "one.csv"
    p.write_text("job_id\nx\n\ny\n")
    t = T.read_csv(p)
    assert (t.header, t.lines, t.rows) == (["job_id"], [2, 4], [["x"], ["y"]])
    e = tmp_path / "empty.csv"
    e.write_text("\n  \n")
    assert _err(T.read_csv, e) == "empty.csv:1: header: the file is empty"
    e.write_text("")
    assert _err(T.read_csv, e) == "empty.csv:1: header: the file is empty"
    b = tmp_path / "bad.csv"
    b.write_text("a,b\n1,2\n\n3," + "x" * 200_000 + "\n")
    assert _err(T.read_csv, b) == "bad.csv:4: row: not valid CSV (field larger than field limit (131072))"


# ------------------------------------------------------------------------------ cell parsers

@pytest.mark.parametrize("value, want", [
    ("2.5", 2.5), (" 3 ", 3.0), ("x", None), ("nan", None), ("inf", None), ("-inf", None),
    (4, 4.0), (np.int32(5), 5.0), (1.5, 1.5), (np.float32(0.5), 0.5), (True, None), (np.bool_(True), None),
    (None, None), (float("nan"), None), ([1], None),
])
def test_number(value, want):
    assert T._number(value) == want


def test_show():
    assert T._show(" x ") == "'x'"
    assert T._show(None) == "''"
    assert T._show(2.5) == "'2.5'"


def test_cell_parsers_accept_and_name_the_cell():
    assert T.positive_int("3", "f", 2, "n") == 3 and type(T.positive_int(3.0, "f", 2, "n")) is int
    assert _err(T.positive_int, "0", "f", 2, "n") == "f:2: n: expected a positive integer, got '0'"
    assert _err(T.positive_int, "1.5", "f", 2, "n") == "f:2: n: expected a positive integer, got '1.5'"
    assert _err(T.positive_int, "a", "f", 9, "n") == "f:9: n: expected a positive integer, got 'a'"
    assert T.positive_float("0.25", "f", 2, "d") == 0.25
    assert _err(T.positive_float, "0", "f", 3, "d") == "f:3: d: expected a positive number, got '0'"
    assert _err(T.positive_float, None, "f", 3, "d") == "f:3: d: expected a positive number, got ''"
    assert T.nonneg_float("0", "f", 2, "a") == 0.0
    assert T.nonneg_float(" 7.5", "f", 2, "a") == 7.5
    assert _err(T.nonneg_float, "-0.5", "f", 4, "a") == "f:4: a: expected a non-negative number, got '-0.5'"
    assert _err(T.nonneg_float, "z", "f", 4, "a") == "f:4: a: expected a non-negative number, got 'z'"
    assert T.text(" m ", "f", 2, "m") == "m"
    assert T.text(12, "f", 2, "m") == "12"
    assert _err(T.text, "  ", "f", 5, "m") == "f:5: m: expected a non-empty value, got ''"
    assert _err(T.text, None, "f", 5, "m") == "f:5: m: expected a non-empty value, got ''"


def test_an_integer_past_int64_is_a_bad_cell_not_an_overflow():
    # the columns are int64: a GPU count of 1e20 (or 2**63 exactly) cannot be held and used to end
    # in numpy's OverflowError; the largest that fits still reads
    assert T.positive_int(str(2 ** 62), "f", 2, "n") == 2 ** 62
    for big in ("99999999999999999999", str(2 ** 63), "1e20"):
        assert _err(T.positive_int, big, "f", 2, "n") == f"f:2: n: expected a positive integer, got '{big}'"


def test_blank():
    assert T._blank(None) and T._blank("") and T._blank("  ")
    assert not T._blank("x") and not T._blank(0)


# ------------------------------------------------------------------------------ Column

def _col(values, lines=None, name="c"):
    return T.Column("f.csv", name, lines or list(range(2, 2 + len(values))), values)


def test_positive_ints_whole_and_cellwise():
    a = _col(["1", " 2", "30"]).positive_ints()
    assert a.dtype == np.int64 and a.tolist() == [1, 2, 30]
    b = _col([1, 2]).positive_ints()
    assert b.dtype == np.int64 and b.tolist() == [1, 2]
    # floats never converted in bulk: 2.0 is fine, 2.5 names the line
    c = _col([1.0, 2.0]).positive_ints()
    assert c.dtype == np.int64 and c.tolist() == [1, 2]
    assert _err(_col([1.0, 2.5], [4, 8]).positive_ints) == "f.csv:8: c: expected a positive integer, got '2.5'"
    assert _err(_col(["1", "0", "-1"], [3, 5, 7]).positive_ints) == \
        "f.csv:5: c: expected a positive integer, got '0'"
    assert _err(_col(["1", "2.5"], [3, 5]).positive_ints) == "f.csv:5: c: expected a positive integer, got '2.5'"
    assert _err(_col([True, False]).positive_ints) == "f.csv:2: c: expected a positive integer, got 'True'"
    assert _err(_col([True, False]).positive_floats) == "f.csv:2: c: expected a positive number, got 'True'"
    # past int64, the bulk conversion fails and the cells are walked: the huge count is the first bad one
    assert _err(_col(["99999999999999999999999", "x"], [2, 3]).positive_ints) == \
        "f.csv:2: c: expected a positive integer, got '99999999999999999999999'"
    big = _col(["99999999999999999999999"])
    with pytest.raises((OverflowError, ValueError, TraceError)):
        big.positive_ints()


def test_positive_and_nonneg_floats():
    a = _col(["0.5", "2"]).positive_floats()
    assert a.dtype == np.float64 and a.tolist() == [0.5, 2.0]
    assert _col([1, 3]).positive_floats().tolist() == [1.0, 3.0]
    assert _err(_col(["1", "inf"], [2, 9]).positive_floats) == "f.csv:9: c: expected a positive number, got 'inf'"
    assert _err(_col([1.0, 0.0], [2, 9]).positive_floats) == "f.csv:9: c: expected a positive number, got '0.0'"
    assert _err(_col(["1", "nan"], [2, 6]).positive_floats) == "f.csv:6: c: expected a positive number, got 'nan'"
    n = _col(["0", "1.5"]).nonneg_floats()
    assert n.dtype == np.float64 and n.tolist() == [0.0, 1.5]
    assert _err(_col(["0", "-1"], [2, 3]).nonneg_floats) == "f.csv:3: c: expected a non-negative number, got '-1'"
    assert _err(_col([0.0, float("inf")], [2, 3]).nonneg_floats) == \
        "f.csv:3: c: expected a non-negative number, got 'inf'"
    assert _err(_col([0.0, None], [2, 3]).nonneg_floats) == \
        "f.csv:3: c: expected a non-negative number, got ''"


def test_texts_and_unique_texts():
    assert _col([" a", "b ", 3]).texts() == ["a", "b", "3"]
    assert _err(_col(["a", " "], [2, 7]).texts) == "f.csv:7: c: expected a non-empty value, got ''"
    assert _err(_col(["a", None], [2, 8]).texts) == "f.csv:8: c: expected a non-empty value, got ''"
    assert _col(["a", "b"]).unique_texts() == ["a", "b"]
    assert _err(_col(["a", "b", "c", " b"], [2, 4, 6, 9], "job_id").unique_texts) == \
        "f.csv:9: job_id: duplicate job id 'b' (first on line 4)"


def test_optional_columns():
    assert _col(["1", "2"]).optional("int") == [1, 2]
    assert type(_col(["1", "2"]).optional("int")) is list
    assert _col(["1", "", " "]).optional("int") == [1, None, None]
    assert _col([None, 2]).optional("int") == [None, 2]
    assert _col(["0.5", ""]).optional("float") == [0.5, None]
    assert _col(["0.5", "2"]).optional("float") == [0.5, 2.0]
    assert _col(["x", ""]).optional("text") == ["x", None]
    assert _col([" x", "y"]).optional("text") == ["x", "y"]
    assert _err(_col(["1", "", "0"], [2, 3, 4]).optional, "int") == \
        "f.csv:4: c: expected a positive integer, got '0'"
    assert _err(_col(["1", "0"], [2, 3]).optional, "int") == "f.csv:3: c: expected a positive integer, got '0'"
    assert _err(_col(["", "-1"], [2, 3]).optional, "float") == "f.csv:3: c: expected a positive number, got '-1'"


# ------------------------------------------------------------------------------ Parsed and assemble

def _parsed(ids, arr, gpus, **fields):
    return T.Parsed(list(ids), np.array(arr, dtype=float), np.array(gpus, dtype=np.int64), fields)


def test_parsed_rejects_unknown_fields_and_concats():
    with pytest.raises(AssertionError, match="not TraceJob fields"):
        _parsed(["a"], [0], [1], bogus=[1])
    a = _parsed(["a", "b"], [5, 6], [1, 2], duration=np.array([10.0, 20.0]))
    b = _parsed(["c"], [7], [4], model=["m"])
    c = T.Parsed.concat([a, b])
    assert c.job_id == ["a", "b", "c"]
    assert c.arrival.tolist() == [5.0, 6.0, 7.0] and c.num_gpus.tolist() == [1, 2, 4]
    assert c.fields == {"duration": [10.0, 20.0, None], "model": [None, None, "m"]}
    assert T._as_list(None, 2) == [None, None]
    assert T._as_list((1, 2), 2) == [1, 2]


def test_assemble_sorts_stably_shifts_and_limits():
    p = _parsed(["a", "b", "c", "d"], [30, 10, 30, 20], [1, 2, 3, 4],
                duration=np.array([1.0, 2.0, 3.0, 4.0]), model=["ma", "mb", None, "md"])
    t = T.assemble("n", p, source="src", fmt="native")
    assert t.name == "n" and t.source == "src"
    assert t.meta == {"format": "native", "vc": None, "arrival_origin": 10.0}
    assert t.jobs == [
        TraceJob("b", 0.0, 2, 2.0, None, "mb"),
        TraceJob("d", 10.0, 4, 4.0, None, "md"),
        TraceJob("a", 20.0, 1, 1.0, None, "ma"),
        TraceJob("c", 20.0, 3, 3.0, None, None),
    ]
    assert type(t.jobs[0].arrival) is float and type(t.jobs[0].num_gpus) is int
    t2 = T.assemble("n", p, source="src", fmt="native", limit=2)
    assert [j.job_id for j in t2.jobs] == ["b", "d"]
    assert [j.job_id for j in T.assemble("n", p, source="", fmt="f", limit=1).jobs] == ["b"]
    assert _err(T.assemble, "n", p, source="", fmt="f", limit=0) == \
        "n: limit: expected a positive integer, got 0"


def test_assemble_selects_a_virtual_cluster():
    p = _parsed(["a", "b", "c", "d", "e"], [5, 4, 3, 2, 1], [1, 1, 1, 1, 1],
                group=["x", "y", "x", None, "y"])
    p2 = _parsed(["a", "b", "c", "d", "e"], [5, 4, 3, 2, 1], [1, 1, 1, 1, 1],
                 group=["y", "x", "y", None, "y"])
    t = T.assemble("n", p, source="", fmt="philly", vc="x")
    assert t.name == "n:x"
    assert [(j.job_id, j.arrival, j.group) for j in t.jobs] == [("c", 0.0, "x"), ("a", 2.0, "x")]
    assert t.meta == {"format": "philly", "vc": "x", "arrival_origin": 3.0}
    assert _err(T.assemble, "n", p2, source="", fmt="f", vc="z") == \
        "n: vc: unknown virtual cluster 'z'; known (jobs): y (3), x (1)"
    q = _parsed(["a"], [1], [1])
    assert _err(T.assemble, "n", q, source="", fmt="f", vc="x") == \
        "n: vc: this trace has no virtual clusters to select from"
    r = _parsed(["a"], [1], [1], group=[None])
    assert _err(T.assemble, "n", r, source="", fmt="f", vc="x") == \
        "n: vc: this trace has no virtual clusters to select from"


def test_assemble_of_no_jobs():
    p = _parsed([], [], [])
    t = T.assemble("n", p, source="", fmt="f")
    assert t.jobs == [] and t.meta["arrival_origin"] == 0.0


# ------------------------------------------------------------------------------ native.py

from coddl.core.job import JobSpec  # noqa: E402
from coddl.traces import loader, native  # noqa: E402
from coddl.traces.loader import load_trace  # noqa: E402


def _native(tmp_path: Path, text: str, name: str = "n.csv"):
    p = tmp_path / name
    p.write_text(text)
    return native.parse(T.read_csv(p))


def test_native_parse_every_column(tmp_path: Path):
    p = _native(tmp_path, "job_id,arrival,num_gpus,duration,steps,model,min_gpus,max_gpus,cpus,user,"
                          "batch_size,group,extra\n"
                          "a,5,2,10.5,,m1,1,4,8,u1,32,g1,zz\n"
                          "b,0,1,,300,,,,,,,,\n"
                          "c,2.5,4,7,70,m2,2,2,,u2,,g2,\n")
    assert p.job_id == ["a", "b", "c"]
    assert p.arrival.tolist() == [5.0, 0.0, 2.5]
    assert p.num_gpus.tolist() == [2, 1, 4] and p.num_gpus.dtype == np.int64
    assert p.fields == {
        "duration": [10.5, None, 7.0], "steps": [None, 300.0, 70.0], "model": ["m1", None, "m2"],
        "min_gpus": [1, None, 2], "max_gpus": [4, None, 2], "cpus": [8, None, None], "user": ["u1", None, "u2"],
        "batch_size": [32, None, None], "group": ["g1", None, "g2"],
    }


def test_native_parse_only_steps_and_only_duration(tmp_path: Path):
    p = _native(tmp_path, "job_id,arrival,num_gpus,steps\nx,1,1,5\n")
    assert p.fields == {"steps": [5.0]}
    p = _native(tmp_path, "job_id,arrival,num_gpus,duration\nx,1,1,5\n")
    assert p.fields == {"duration": [5.0]}


def test_native_parse_errors(tmp_path: Path):
    def err(text):
        return _err(_native, tmp_path, text)
    assert err("job_id,arrival,num_gpus\nx,1,1\n") == \
        "n.csv:1: duration: missing column; the header is job_id,arrival,num_gpus"
    assert err("job_id,num_gpus,duration\nx,1,1\n") == \
        "n.csv:1: arrival: missing column; the header is job_id,num_gpus,duration"
    assert err("job_id,arrival,num_gpus,duration,steps\nx,1,1,2,\ny,1,1,,\n") == \
        "n.csv:3: duration: each job needs a duration or steps; both are empty"
    assert err("job_id,arrival,num_gpus,duration\nx,1,1,2\ny,1,1,\n") == \
        "n.csv:3: duration: each job needs a duration or steps; both are empty"
    assert err("job_id,arrival,num_gpus,steps\nx,1,1,2\ny,1,1,\n") == \
        "n.csv:3: duration: each job needs a duration or steps; both are empty"
    assert err("job_id,arrival,num_gpus,duration,min_gpus,max_gpus\nx,1,1,2,2,2\ny,1,1,2,3,2\n") == \
        "n.csv:3: max_gpus: expected at least min_gpus (3), got 2"
    # a blank bound on either side is not compared
    p = _native(tmp_path, "job_id,arrival,num_gpus,duration,min_gpus,max_gpus\nx,1,1,2,,2\ny,1,1,2,3,\n")
    assert p.fields["min_gpus"] == [None, 3] and p.fields["max_gpus"] == [2, None]
    assert err("job_id,arrival,num_gpus,duration\nx,-1,1,2\n") == \
        "n.csv:2: arrival: expected a non-negative number, got '-1'"
    assert err("job_id,arrival,num_gpus,duration\nx,1,0,2\n") == \
        "n.csv:2: num_gpus: expected a positive integer, got '0'"
    assert err("job_id,arrival,num_gpus,duration\nx,1,1,2\nx,1,1,2\n") == \
        "n.csv:3: job_id: duplicate job id 'x' (first on line 2)"
    assert err("job_id,arrival,num_gpus,duration,cpus\nx,1,1,2,1.5\n") == \
        "n.csv:2: cpus: expected a positive integer, got '1.5'"
    assert err("job_id,arrival,num_gpus,duration,steps\nx,1,1,2,0\n") == \
        "n.csv:2: steps: expected a positive number, got '0'"


JOBS = [
    TraceJob("a", 0.0, 2, duration=10.123456789012345),
    TraceJob("b", 1.5, 1, steps=300.0, model="m", user="u", group="g", min_gpus=1, max_gpus=4,
             cpus=3, batch_size=64),
]


@pytest.mark.parametrize("name", ["w.csv", "w.CSV", "w.csv.gz", "W.CSV.GZ", "w.parquet", "w.Parquet"])
def test_write_native_round_trips(tmp_path: Path, name: str):
    path = tmp_path / name
    assert native.write_native(iter(JOBS), path) == 2
    t = load_trace(str(path))
    assert t.jobs == JOBS
    if name.lower().endswith(".gz"):
        assert gzip.decompress(path.read_bytes()).startswith(b"job_id,arrival,num_gpus,duration,steps,model,"
                                                             b"min_gpus,max_gpus,cpus,user,batch_size,group\n")


def test_write_native_csv_text_and_columns(tmp_path: Path):
    path = tmp_path / "w.csv"
    native.write_native([TraceJob("a", 0.0, 2, duration=10.5), TraceJob("b", 3.0, 1, steps=7.0)], path)
    assert path.read_text() == "job_id,arrival,num_gpus,duration,steps\na,0.0,2,10.5,\nb,3.0,1,,7.0\n"
    path2 = tmp_path / "v.csv"
    native.write_native([TraceJob("a", 0.0, 2, duration=1.0, user="u")], path2)
    assert path2.read_text() == "job_id,arrival,num_gpus,duration,user\na,0.0,2,1.0,u\n"


def test_write_native_parquet_types(tmp_path: Path):
    import pyarrow.parquet as pq
    path = tmp_path / "w.parquet"
    native.write_native(JOBS, path)
    schema = pq.read_table(path).schema
    assert [str(schema.field(c).type) for c in ("job_id", "arrival", "num_gpus", "duration", "model",
                                                  "cpus", "batch_size")] == \
        ["string", "double", "int64", "double", "string", "int64", "int64"]
    table = native.read_parquet(path)
    assert table.header_line is None and table.lines == [1, 2] and table.file == "w.parquet"


def test_write_native_errors(tmp_path: Path):
    assert _err(native.write_native, [TraceJob("a", 0.0, 1), TraceJob("b", 0.0, 1)], tmp_path / "x.csv") == \
        "a: duration: the native format needs a duration or steps for every job, this job has neither"
    bad = tmp_path / "x.txt"
    assert _err(native.write_native, JOBS, bad) == f"{bad}: expected an output name ending in .csv, .csv.gz or .parquet"
    missing = tmp_path / "no" / "x.csv"
    assert _err(native.write_native, JOBS, missing) == f"{missing}: cannot write: No such file or directory"


def test_read_parquet_errors(tmp_path: Path):
    missing = tmp_path / "m.parquet"
    assert _err(native.read_parquet, missing) == f"{missing}: no such file"
    bad = tmp_path / "b.parquet"
    bad.write_text("not\nparquet")
    msg = _err(native.read_parquet, bad)
    assert msg.startswith("b.parquet: not a readable Parquet file (") and "  " not in msg
    # pyarrow's own words, whitespace collapsed to single spaces
    assert msg.endswith(": Parquet magic bytes not found in footer. Either the file is corrupted or this is "
                        "not a parquet file.)")


def test_parquet_columns_keep_their_declared_types(tmp_path: Path):
    """Integral Python values in float columns are still written as doubles (the format's schema),
    and read back as the same jobs."""
    import pyarrow.parquet as pq
    path = tmp_path / "i.parquet"
    native.write_native([TraceJob("a", 0, 2, duration=5, steps=7)], path)
    schema = pq.read_table(path).schema
    assert [str(schema.field(c).type) for c in ("job_id", "arrival", "num_gpus", "duration", "steps")] == \
        ["string", "double", "int64", "double", "double"]
    assert load_trace(str(path)).jobs == [TraceJob("a", 0.0, 2, duration=5.0, steps=7.0)]


def test_parquet_bad_row_names_the_data_row(tmp_path: Path):
    path = tmp_path / "p.parquet"
    native.write_native([TraceJob("a", 0.0, 2, duration=1.0), TraceJob("b", 0.0, 1, duration=2.0, min_gpus=2,
                                                                     max_gpus=1)], path)
    assert _err(load_trace, str(path)) == "p.parquet:2: max_gpus: expected at least min_gpus (2), got 1"


def test_write_specs_and_one_cpu_count(tmp_path: Path):
    spec = JobSpec("j", 2.0, 2, 500.0, "resnet", min_gpus=1, max_gpus=4, min_cpus=6, max_cpus=6, user="u",
                   account="acc", duration=50.0)
    path = tmp_path / "s.csv"
    assert native.write_specs([spec], path) == 1
    assert load_trace(str(path)).jobs == [TraceJob("j", 0.0, 2, duration=50.0, steps=500.0, model="resnet",
                                                   min_gpus=1, max_gpus=4, cpus=6, user="u", group="acc")]
    two = JobSpec("k", 0.0, 1, 5.0, "m", min_cpus=2, max_cpus=4)
    assert _err(native.write_specs, [two], path) == \
        "k: cpus: the native format has one CPU count per job, this job has min_cpus=2, max_cpus=4"
    assert native._one_cpu_count(JobSpec("k", 0.0, 1, 5.0, "m")) is None


def test_pyarrow_missing(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_pyarrow(name, *a, **kw):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    assert _err(native._pyarrow) == "Parquet needs pyarrow: pip install 'coddl[parquet]'"


# ------------------------------------------------------------------------------ loader.py

def test_loader_recognises_each_csv_format_by_its_column(tmp_path: Path):
    cases = {
        "native": "job_id,arrival,num_gpus,duration\na,3,1,5\n",
        "philly": "timestamp,duration,num_gpus,cluster\n2017-10-09 07:01:55,66.0,2,vc1\n",
        "itp": "job_id,submission_time,duration,num_gpu\na,3,5,1\n",
        "tiresias": "job_id,num_gpu,submit_time,duration\n1,1,3,5\n",
    }
    for fmt, text in cases.items():
        p = tmp_path / f"{fmt}.csv"
        p.write_text(text)
        t = load_trace(str(p))
        assert t.meta["format"] == fmt and t.name == f"{fmt}.csv" and t.source == str(p)
        assert len(t.jobs) == 1 and t.jobs[0].arrival == 0.0


def test_loader_unrecognised_header(tmp_path: Path):
    p = tmp_path / "u.csv"
    p.write_text("\nfoo,bar\n1,2\n")
    assert _err(load_trace, str(p)) == (
        "u.csv:2: header: unrecognised trace format, header is foo,bar; expected one of: "
        "native (job_id,arrival,num_gpus,duration|steps); philly (timestamp,duration,num_gpus,cluster); "
        "itp (job_id,submission_time,duration,num_gpu); pollux (name,time,application,num_replicas,batch_size); "
        "tiresias (job_id,num_gpu,submit_time,duration); or a .parquet or Gavel .trace file")


def test_loader_missing_source_and_extensions(tmp_path: Path):
    msg = _err(load_trace, "nope-trace")
    assert msg == f"nope-trace: no such file, and not a bundled trace (bundled: {', '.join(loader.list_bundled())})"
    p = tmp_path / "x.PARQUET"
    native.write_native(JOBS, p)
    assert load_trace(str(p)).meta["format"] == "native"
    g = tmp_path / "x.Trace"
    g.write_text("garbage\n")
    with pytest.raises(TraceError) as e:
        load_trace(str(g))
    assert str(e.value).startswith("x.Trace")


def test_loader_vc_and_limit_pass_through(tmp_path: Path):
    p = tmp_path / "g.csv"
    p.write_text("job_id,arrival,num_gpus,duration,group\na,10,1,5,x\nb,4,1,5,y\nc,7,1,5,x\nd,20,1,5,x\n")
    t = load_trace(str(p), vc="x", limit=2)
    assert t.name == "g.csv:x" and [(j.job_id, j.arrival) for j in t.jobs] == [("c", 0.0), ("a", 3.0)]
    assert t.meta == {"format": "native", "vc": "x", "arrival_origin": 7.0}


def test_loader_gc_is_paused_during_a_load(tmp_path: Path, monkeypatch):
    seen = []
    real = native.parse

    def spy(table):
        seen.append(gc.isenabled())
        return real(table)
    monkeypatch.setattr(loader, "_CSV_FORMATS", (("native", "arrival", spy, "x"),) + loader._CSV_FORMATS[1:])
    p = tmp_path / "n.csv"
    p.write_text("job_id,arrival,num_gpus,duration\na,3,1,5\n")
    load_trace(str(p))
    assert seen == [False] and gc.isenabled()


def test_registry_names_and_files():
    reg = loader._registry()
    names = loader.list_bundled()
    assert names[:12] == ["philly", "itp"] + [f"itp-{i}" for i in range(1, 11)]
    assert reg["philly"] == loader._Bundled("philly", ("traces/philly/philly-digest.csv.gz",))
    assert len(reg["itp"].files) == 10 and reg["itp"].files[0].startswith("traces/itp/cluster")
    assert reg["itp-1"] == loader._Bundled("itp", (reg["itp"].files[0],))
    assert reg["itp-10"] == loader._Bundled("itp", (reg["itp"].files[9],))
    assert reg["pollux-1"] == loader._Bundled("pollux", ("traces/pollux/workloads/workload-1.csv",))
    assert reg["pollux-0.5-8"] == loader._Bundled("pollux", ("traces/pollux/workloads-0.5/workload-8.csv",))
    assert reg["pollux-realistic-3"] == loader._Bundled("pollux", ("traces/pollux/workloads-realistic/workload-3.csv",))
    assert [n for n in names if n.startswith("pollux")][:9] == [f"pollux-{i}" for i in range(1, 9)] + ["pollux-0.5-1"]
    assert reg["tiresias-60"] == loader._Bundled("tiresias", ("traces/tiresias/60_job.csv",))
    assert reg["gavel-philly-0e4a51"] == loader._Bundled(
        "gavel", ("traces/gavel/msr_philly_seed0/0e4a51.trace.gz",))
    assert len(names) == 68 and names[-1] == "gavel-philly-ee9e8c"


def test_small_bundled_traces_load_by_name():
    t = load_trace("tiresias-60")
    assert t.meta["format"] == "tiresias" and t.name == "tiresias-60" and len(t.jobs) == 60
    assert t.source.endswith("traces/tiresias/60_job.csv")
    p = load_trace("pollux-1")
    assert p.meta["format"] == "pollux" and p.jobs[0].arrival == 0.0


# ------------------------------------------------------------------------------ history.py

from coddl.traces import history as H  # noqa: E402


def _rec(jid, submit, start, end, gpus, part="p1", arrival=None):
    job = TraceJob(jid, submit if arrival is None else arrival, gpus, duration=end - start, steps=9.0,
                   model="m", min_gpus=1, max_gpus=gpus, cpus=2, user="u", batch_size=8, group="g")
    return H.RecordedJob(job, "acc", part, "COMPLETED", submit, start, end, gpus * (end - start))


def test_step_series_by_hand():
    assert H.step_series([]) == []
    # two changes at t=5 (+2, -1) give one point with the level after both; out of order input
    assert H.step_series([(5.0, 2), (1.0, 3), (5.0, -1), (9.0, -4)]) == [(1.0, 3), (5.0, 4), (9.0, 0)]
    out = H.step_series([(2, 1)])
    assert out == [(2.0, 1)] and type(out[0][0]) is float and type(out[0][1]) is int


def test_usage_and_peak():
    jobs = [_rec("a", 0, 10, 30, 2), _rec("b", 5, 20, 40, 3), _rec("c", 6, 30, 35, 1)]
    use = H.usage_of(jobs)
    assert use == [(10.0, 2), (20.0, 5), (30.0, 4), (35.0, 3), (40.0, 0)]
    h = H.History("h", "src", jobs, use)
    assert h.peak_gpus == 5 and h.origin == 0
    assert H.History("h", "s", jobs, []).peak_gpus == 0
    assert h.skipped == {} and h.rows == 0


def test_history_trace_sorts_by_submit_then_id_and_shifts():
    jobs = [_rec("z", 110, 120, 130, 1), _rec("b", 100, 101, 150, 2), _rec("a", 110, 111, 112, 4)]
    h = H.History("h", "src", jobs, H.usage_of(jobs))
    t = h.trace()
    assert t.name == "h" and t.source == "src" and t.meta == {"format": "history", "arrival_origin": 100}
    assert [(j.job_id, j.arrival) for j in t.jobs] == [("b", 0.0), ("a", 10.0), ("z", 10.0)]
    assert t.jobs[1] == TraceJob("a", 10.0, 4, 1.0, 9.0, "m", 1, 4, 2, "u", 8, "g")


def test_history_only_partitions():
    jobs = [_rec("a", 0, 10, 30, 2, "gpu"), _rec("b", 5, 20, 40, 3, "cpu"), _rec("c", 6, 30, 35, 1, "gpu")]
    h = H.History("h", "src", jobs, H.usage_of(jobs), {"never started": 2}, rows=7)
    g = h.only(["gpu"])
    assert [j.job.job_id for j in g.jobs] == ["a", "c"]
    assert g.usage == [(10.0, 2), (30.0, 1), (35.0, 0)]
    assert (g.name, g.source, g.skipped, g.rows) == ("h", "src", {"never started": 2}, 7)
    assert g.skipped is not h.skipped
    both = h.only(["cpu", "gpu"])
    assert [j.job.job_id for j in both.jobs] == ["a", "b", "c"]
    assert _err(h.only, ["gpu", "x", "y"]) == "h: partition: no replayable job ran in 'x'; partitions: cpu, gpu"
    empty = H.History("e", "s", [], [])
    assert _err(empty.only, ["x"]) == "e: partition: no replayable job ran in 'x'; partitions: none"


# ------------------------------------------------------------------------------ gavel.py and the small readers

from coddl.traces import gavel, itp, philly, pollux, tiresias  # noqa: E402


def test_gavel_msr_by_hand(tmp_path: Path):
    p = tmp_path / "abc123.trace"
    p.write_text("ResNet-18 (batch size 64)\tcmd\t--n\tTrue\t1000\t5.5\t2\n"
                 "\n"
                 "  \n"
                 "Transformer\tcmd\t--n\tFalse\t250.5\t0\t1\n")
    q = gavel.parse_msr(p)
    assert q.job_id == ["abc123-1", "abc123-4"]
    assert q.arrival.tolist() == [5.5, 0.0] and q.num_gpus.tolist() == [2, 1]
    assert q.fields["steps"].tolist() == [1000.0, 250.5]
    assert q.fields["model"] == ["ResNet-18 (batch size 64)", "Transformer"]
    assert q.fields["batch_size"] == [64, None]
    assert q.fields["group"] == ["abc123", "abc123"]
    g = tmp_path / "vc9.trace.gz"
    g.write_bytes(gzip.compress(p.read_bytes()))
    t = load_trace(str(g))
    assert t.meta["format"] == "gavel" and [(j.job_id, j.arrival) for j in t.jobs] == [("vc9-4", 0.0),
                                                                                      ("vc9-1", 5.5)]


def test_gavel_msr_errors(tmp_path: Path):
    p = tmp_path / "v.trace"
    p.write_text("\n \n")
    assert _err(gavel.parse_msr, p) == "v.trace:1: rows: no jobs: the file is empty"
    p.write_text("M\tc\tn\tT\t10\t0\t1\nM\tc\tn\tT\t10\t0\t0\n")
    assert _err(gavel.parse_msr, p) == "v.trace:2: scale_factor: expected a positive integer, got '0'"
    p.write_text("M\tc\tn\tT\t10\t0\t1\nM\tc\tn\tT\t10\n")
    assert _err(gavel.parse_msr, p) == "v.trace:2: arrival_time_s: missing value (the row has 5 of 7 fields)"
    p.write_text("M\tc\tn\tT\t10\t-3\t1\n")
    assert _err(gavel.parse_msr, p) == "v.trace:1: arrival_time_s: expected a non-negative number, got '-3'"
    p.write_text("M\tc\tn\tT\t0\t3\t1\n")
    assert _err(gavel.parse_msr, p) == "v.trace:1: total_steps: expected a positive number, got '0'"
    p.write_text(" \tc\tn\tT\t1\t3\t1\n")
    assert _err(gavel.parse_msr, p) == "v.trace:1: job_type: expected a non-empty value, got ''"


def test_job_size_distribution(tmp_path: Path):
    p = tmp_path / "d.csv"
    p.write_text("duration_s,num_gpus\n10,1\n20.5,8\n30,2\n")
    d = gavel.philly_job_sizes(str(p))
    assert d.durations.tolist() == [10.0, 20.5, 30.0] and d.gpus.tolist() == [1, 8, 2]
    f = d.fitting(2)
    assert f.durations.tolist() == [10.0, 30.0] and f.gpus.tolist() == [1, 2]
    assert d.fitting(8).gpus.tolist() == [1, 8, 2]
    dur, gpus = d.sample(np.random.default_rng(0), 5)
    idx = np.random.default_rng(0).integers(0, 3, size=5)
    assert dur.tolist() == d.durations[idx].tolist() and gpus.tolist() == d.gpus[idx].tolist()
    assert len(set(idx.tolist())) > 1
    p = tmp_path / "e.csv"
    p.write_text("duration_s,num_gpus\n10,1\n20.5,0\n")
    assert _err(gavel.philly_job_sizes, str(p)) == "e.csv:3: num_gpus: expected a positive integer, got '0'"
    b = gavel.philly_job_sizes()
    assert len(b.durations) == 33192


def _table_of(tmp_path: Path, text: str, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return T.read_csv(p)


def test_philly_parse_by_hand(tmp_path: Path):
    q = philly.parse(_table_of(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                                         "1970-01-02 00:00:10,66.0,2,1,vc1\n\n"
                                         "1970-01-01 00:01:00,5,1,1,vc2\n"))
    assert q.job_id == ["philly-2", "philly-4"]
    assert q.arrival.tolist() == [86410.0, 60.0] and q.num_gpus.tolist() == [2, 1]
    assert q.fields["duration"].tolist() == [66.0, 5.0] and q.fields["group"] == ["vc1", "vc2"]


def test_philly_cellwise_seconds_and_time_zones(tmp_path: Path):
    col = T.Column("f", "timestamp", [2, 3], ["1970-01-01T00:00:10+01:00", " 1970-01-01 00:00:20 "])
    assert philly._seconds(col).tolist() == [-3590.0, 20.0]
    assert philly._cell_seconds("1970-01-01 01:00:00", "f", 2) == 3600.0
    assert philly._cell_seconds("1970-01-01T01:00:00-01:00", "f", 2) == 7200.0
    assert _err(philly._cell_seconds, None, "f", 7) == \
        "f:7: timestamp: expected a date-time like '2017-10-09 07:01:55', got None"
    col = T.Column("f", "timestamp", [2, 5], ["1970-01-01 00:00:10", "NaT"])
    assert _err(philly._seconds, col) == \
        "f:5: timestamp: expected a date-time like '2017-10-09 07:01:55', got 'NaT'"
    col = T.Column("f", "timestamp", [2, 5], ["1970-01-01 00:00:10", "2017-13-01 00:00:00"])
    assert _err(philly._seconds, col) == \
        "f:5: timestamp: expected a date-time like '2017-10-09 07:01:55', got '2017-13-01 00:00:00'"


def test_itp_pollux_tiresias_by_hand(tmp_path: Path):
    q = itp.parse(_table_of(tmp_path, "job_id,submission_time,duration,num_gpu\na,3,5.5,2\nb,0,1,1\n"),
                  group="cluster07")
    assert (q.job_id, q.arrival.tolist(), q.num_gpus.tolist()) == (["a", "b"], [3.0, 0.0], [2, 1])
    assert q.fields["duration"].tolist() == [5.5, 1.0] and q.fields["group"] == ["cluster07", "cluster07"]
    assert itp.parse(_table_of(tmp_path, "job_id,submission_time,duration,num_gpu\na,3,5.5,2\n")).fields["group"] \
        == [None]
    q = pollux.parse(_table_of(tmp_path, "name,time,application,num_replicas,batch_size\n"
                                         "j1,10,cifar10,4,128\nj2,0,bert,1,12\n"))
    assert (q.job_id, q.arrival.tolist(), q.num_gpus.tolist()) == (["j1", "j2"], [10.0, 0.0], [4, 1])
    assert q.fields["model"] == ["cifar10", "bert"] and q.fields["batch_size"].tolist() == [128, 12]
    q = tiresias.parse(_table_of(tmp_path, "job_id,num_gpu,submit_time,iterations,model_name,duration\n"
                                           "1,2,30,100,vgg,50\n2,1,0,,,7\n"))
    assert (q.job_id, q.arrival.tolist(), q.num_gpus.tolist()) == (["1", "2"], [30.0, 0.0], [2, 1])
    assert q.fields["duration"].tolist() == [50.0, 7.0]
    assert q.fields["steps"] == [100.0, None] and q.fields["model"] == ["vgg", None]
    q = tiresias.parse(_table_of(tmp_path, "job_id,num_gpu,submit_time,duration\n1,2,30,50\n"))
    assert set(q.fields) == {"duration"}
    assert _err(tiresias.parse, _table_of(tmp_path, "job_id,num_gpu,submit_time,iterations,duration\n"
                                                    "1,2,30,-1,50\n")) == \
        "t.csv:2: iterations: expected a positive number, got '-1'"
    assert _err(pollux.parse, _table_of(tmp_path, "name,time,application,num_replicas,batch_size\n"
                                                  "j1,10,cifar10,4,0\n")) == \
        "t.csv:2: batch_size: expected a positive integer, got '0'"
    assert _err(itp.parse, _table_of(tmp_path, "job_id,submission_time,duration,num_gpu\na,3,0,2\n")) == \
        "t.csv:2: duration: expected a positive number, got '0'"


def test_philly_stamps_with_a_utc_offset_load(tmp_path: Path):
    """A defect found here: numpy warns (UserWarning) on a stamp with an offset, which escaped as a
    traceback; such stamps now go the cell-by-cell way, converted to UTC."""
    p = tmp_path / "tz.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09T07:01:55+01:00,66.0,2,1,vc1\n2017-10-09 06:02:55,5,1,1,vc1\n")
    t = load_trace(str(p))
    assert [(j.job_id, j.arrival) for j in t.jobs] == [("philly-2", 0.0), ("philly-3", 60.0)]
    assert t.meta["arrival_origin"] == 1507528915.0  # 2017-10-09 06:01:55 UTC


# ------------------------------------------------------------------------------ stats.py and synthetic.py

from coddl.traces import synthetic  # noqa: E402
from coddl.traces.model import Trace  # noqa: E402
from coddl.traces.stats import trace_stats  # noqa: E402


def test_trace_stats_by_hand():
    t = Trace("t", [TraceJob("a", 0.0, 2, duration=10.0), TraceJob("b", 50.0, 1, steps=5.0),
                    TraceJob("c", 100.0, 2, duration=30.0)])
    s = trace_stats(t, 4)
    assert (s.name, s.jobs, s.span, s.gpu_histogram, s.jobs_with_duration) == ("t", 3, 100.0, {1: 1, 2: 2}, 2)
    assert s.duration_percentiles == {50: 20.0, 90: 28.0, 99: pytest.approx(29.8)}
    assert s.mean_duration == 20.0 and s.total_gpu_time == 80.0 and s.cluster_gpus == 4
    assert s.offered_load == 80.0 / 400.0
    assert list(s.gpu_histogram) == [1, 2]
    assert trace_stats(t, 0).offered_load is None
    one = trace_stats(Trace("o", [TraceJob("a", 0.0, 2, duration=10.0)]), 4)
    assert one.span == 0.0 and one.offered_load is None and one.total_gpu_time == 20.0
    none = trace_stats(Trace("n", [TraceJob("a", 0.0, 2, steps=1.0), TraceJob("b", 9.0, 1, steps=1.0)]), 4)
    assert (none.duration_percentiles, none.mean_duration, none.total_gpu_time, none.offered_load) == \
        ({}, None, 0.0, None)


def test_poisson_trace_by_hand(monkeypatch):
    sizes = gavel.JobSizeDistribution(np.array([100.0, 200.0, 400.0]), np.array([1, 2, 8]))
    monkeypatch.setitem(synthetic.DEMANDS, "tiny", lambda: sizes)
    t = synthetic.poisson_trace(4, 0.5, 4, seed=3, demand="tiny")
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 2, size=4)  # only the two pairs that fit on 4 GPUs
    d, g = np.array([100.0, 200.0])[idx], np.array([1, 2])[idx]
    span = float(np.dot(d, g)) / (0.5 * 4)
    gaps = np.cumsum(rng.exponential(1.0, 3))
    want = [0.0] + (gaps * span / gaps[-1]).tolist()
    assert [j.job_id for j in t.jobs] == ["poisson-0", "poisson-1", "poisson-2", "poisson-3"]
    assert [j.arrival for j in t.jobs] == pytest.approx(want) and t.jobs[-1].arrival == pytest.approx(span)
    assert [j.num_gpus for j in t.jobs] == g.tolist() and [j.duration for j in t.jobs] == d.tolist()
    assert type(t.jobs[0].num_gpus) is int and type(t.jobs[1].arrival) is float
    assert t.name == "poisson-tiny-load0.5-n4-s3" and t.source == "synthetic"
    assert t.meta == {"format": "synthetic", "demand": "tiny", "load": 0.5, "cluster_gpus": 4, "seed": 3,
                      "rate_per_s": pytest.approx(3 / span)}
    s = trace_stats(t, 4)
    assert s.offered_load == pytest.approx(0.5)
    single = synthetic.poisson_trace(1, 2.0, 8, seed=1, demand="tiny")
    assert [j.arrival for j in single.jobs] == [0.0] and single.meta["rate_per_s"] == 0.0


def test_poisson_trace_errors(monkeypatch):
    sizes = gavel.JobSizeDistribution(np.array([100.0]), np.array([8]))
    monkeypatch.setitem(synthetic.DEMANDS, "big", lambda: sizes)
    assert _err(synthetic.poisson_trace, 0, 1.0, 4, 0) == "poisson: num_jobs: expected a positive integer, got 0"
    assert _err(synthetic.poisson_trace, 1, 0.0, 4, 0) == "poisson: load: expected a positive number, got 0.0"
    assert _err(synthetic.poisson_trace, 1, float("nan"), 4, 0) == \
        "poisson: load: expected a positive number, got nan"
    assert _err(synthetic.poisson_trace, 1, 1.0, 0, 0) == "poisson: cluster_gpus: expected a positive integer, got 0"
    assert _err(synthetic.poisson_trace, 1, 1.0, 4, 0, demand="zz") == \
        "poisson: demand: unknown 'zz'; known: philly, philly-digest, big"
    assert _err(synthetic.poisson_trace, 1, 1.0, 4, 0, demand="big") == \
        "poisson: cluster_gpus: no big job fits on 4 GPUs"
    assert len(synthetic.poisson_trace(1, 1.0, 8, 0, demand="big").jobs) == 1


# ------------------------------------------------------------------------------ survivors of the first run

def test_read_text_names_the_os_error(tmp_path: Path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.symlink_to(b)
    b.symlink_to(a)
    assert _err(T.read_text, a) == f"{a}: cannot read: Too many levels of symbolic links"


def test_read_csv_keeps_line_breaks_inside_quotes_and_rows_with_a_blank_first_field(tmp_path: Path):
    p = tmp_path / "q.csv"
    p.write_bytes(b'job_id,model\r\n,m\r\nb,"x\r\ny"\r\n')
    t = T.read_csv(p)
    assert t.rows == [["", "m"], ["b", "x\r\ny"]] and t.lines == [2, 4]
    assert _err(t.column("job_id").texts) == "q.csv:2: job_id: expected a non-empty value, got ''"


def test_concat_gives_python_values():
    a = _parsed(["a"], [5], [1], duration=np.array([10.0]))
    b = _parsed(["c"], [7], [4])
    c = T.Parsed.concat([a, b])
    assert type(c.fields["duration"][0]) is float
    assert type(T._as_list(np.array([3]), 1)[0]) is int


# ------------------------------------------------------------------------------ coddl_store.py

def test_read_store_by_hand(tmp_path: Path):
    """a: 100 steps, one usable sample (4 steps/s on 2 GPUs; a 0-rate one is dropped): work 100 / (4 /
    curve(2)); held 2 GPUs from t+10, then 1 from t+20 until it finished at t+35: 2×10 + 1×15 = 35
    GPU-seconds. b: 50 steps at 5/s on 1 GPU: work 50 / (5 / curve(1)), 10 GPU-seconds. c never
    started; d started but is still running; e started and finished without progress."""
    from coddl.core.allocation import Action, ActionKind
    from coddl.core.job import JobStatus
    from coddl.runtime.models import runtime_curves
    from coddl.runtime.store import ProgressUpdate, Store
    from coddl.traces.coddl_store import read_store

    store = Store.for_state_dir(tmp_path)
    spec = {"name": "a", "entrypoint": "m:f", "steps": 100, "min_gpus": 1, "max_gpus": 2}
    a = store.add_job("a", "alice", spec, 100)
    b = store.add_job("b", "bob", {**spec, "name": "b", "steps": 50, "min_gpus": 1, "max_gpus": 1}, 50)
    c = store.add_job("c", "carol", {**spec, "name": "c"}, 100)
    d = store.add_job("d", "dan", {**spec, "name": "d"}, 100)
    e = store.add_job("e", "eve", {**spec, "name": "e"}, 100)
    t = a.submitted_at
    store.record_plan([Action(ActionKind.START, str(a.id), (), (0, 1))], at=t + 10)
    store.record_plan([Action(ActionKind.SHRINK, str(a.id), (0, 1), (0,))], at=t + 20)
    store.record_progress([ProgressUpdate(a.id, t + 20, 40, 2, 4.0, None),
                           ProgressUpdate(a.id, t + 30, 100, 1, 0.0, None)])
    store.finish(a.id, JobStatus.FINISHED, t + 35)
    store.record_plan([Action(ActionKind.START, str(b.id), (), (1,))], at=t + 40)
    store.record_progress([ProgressUpdate(b.id, t + 45, 50, 1, 5.0, None)])
    store.finish(b.id, JobStatus.FAILED, t + 50, "boom")
    store.finish(c.id, JobStatus.CANCELLED, t + 51, "cancelled")
    store.record_plan([Action(ActionKind.START, str(d.id), (), (1,))], at=t + 52)
    store.record_plan([Action(ActionKind.START, str(e.id), (), (0,))], at=t + 53)
    store.finish(e.id, JobStatus.FINISHED, t + 54)
    store.close()

    curves = runtime_curves()
    url = f"sqlite:///{tmp_path / 'coddl.db'}"
    h = read_store(url, curves)
    assert (h.name, h.source, h.rows) == ("coddl store", url, 5)
    assert h.skipped == {"never started": 1, "not ended yet": 1, "no progress recorded": 1}
    m = curves.index["default"]
    ra, rb = h.jobs
    assert ra.job.job_id == f"coddl-{a.id}" and rb.job.job_id == f"coddl-{b.id}"
    assert (ra.account, ra.partition, ra.state, ra.submit, ra.end) == ("alice", "", "finished", t, t + 35)
    assert ra.start == pytest.approx(t + 10) and ra.gpu_seconds == pytest.approx(35.0)
    assert (rb.account, rb.state, rb.end, rb.gpu_seconds) == ("bob", "failed", t + 50, pytest.approx(10.0))
    assert ra.job.steps == pytest.approx(100 / (4.0 / curves.rate[m, 2]))
    assert rb.job.steps == pytest.approx(50 / (5.0 / curves.rate[m, 1]))
    assert ra.job == TraceJob(f"coddl-{a.id}", t, 1, steps=ra.job.steps, model=curves.names[m],
                              min_gpus=1, max_gpus=2, user="alice", group="alice")
    assert h.usage == [(pytest.approx(t + 10), 2), (pytest.approx(t + 20), 1), (pytest.approx(t + 35), 0),
                       (pytest.approx(t + 40), 1), (pytest.approx(t + 50), 0)]


def test_read_store_errors(tmp_path: Path):
    from coddl.runtime.models import runtime_curves
    from coddl.runtime.store import Store
    from coddl.traces.coddl_store import read_store

    store = Store.for_state_dir(tmp_path)
    store.close()
    url = f"sqlite:///{tmp_path / 'coddl.db'}"
    assert _err(read_store, url, runtime_curves()) == f"{url}: no job to replay (no jobs)"
    store = Store.for_state_dir(tmp_path)
    store.add_job("c", "carol", {"name": "c", "entrypoint": "m:f", "steps": 1}, 1)
    store.add_job("d", "dan", {"name": "d", "entrypoint": "m:f", "steps": 1}, 1)
    store.close()
    assert _err(read_store, url, runtime_curves()) == f"{url}: no job to replay (2 never started)"
    msg = _err(read_store, "nosuchdialect://x", runtime_curves())
    assert msg.startswith("nosuchdialect://x: cannot open the coddl store (") and msg.endswith(")")


def test_clean_columns_are_converted_whole_not_cell_by_cell(monkeypatch):
    """The documented fast path: a column that converts and is in range never meets the per-cell
    parsers (which the 82k-row digest could not afford); only a failing one is walked."""
    def walked(*a):
        raise AssertionError("walked cell by cell")
    for name in ("positive_int", "positive_float", "nonneg_float", "text"):
        monkeypatch.setattr(T, name, walked)
    monkeypatch.setitem(T._KINDS, "int", (T.Column.positive_ints, walked))
    monkeypatch.setitem(T._KINDS, "float", (T.Column.positive_floats, walked))
    assert _col(["1", "2"]).positive_ints().tolist() == [1, 2]
    assert _col([3, 4]).positive_ints().tolist() == [3, 4]
    assert _col(["0.5", "2"]).positive_floats().tolist() == [0.5, 2.0]
    assert _col([0.5, 2]).positive_floats().tolist() == [0.5, 2.0]
    assert _col(["0", "0.5", "7"]).nonneg_floats().tolist() == [0.0, 0.5, 7.0]
    assert _col([0.0, 0.25]).nonneg_floats().tolist() == [0.0, 0.25]
    assert _col([b"1", b"2"]).nonneg_floats().tolist() == [1.0, 2.0]
    assert _col([b"1", b"2"]).positive_floats().tolist() == [1.0, 2.0]
    assert _col([b"1", b"2"]).positive_ints().tolist() == [1, 2]
    assert _col(["a", " b"]).texts() == ["a", "b"]
    assert _col(["1", "2"]).optional("int") == [1, 2]
    assert _col(["0.5"]).optional("float") == [0.5]
    with pytest.raises(AssertionError, match="walked"):
        _col(["1", "0"]).positive_ints()
    with pytest.raises(AssertionError, match="walked"):
        _col(["1", "-0.5"]).nonneg_floats()


def test_assemble_keeps_file_order_among_many_ties_and_python_values():
    n = 100
    p = _parsed([f"j{i}" for i in range(n)], [1.0, 0.0] * (n // 2), [1] * n,
                duration=np.arange(1.0, n + 1.0), group=["g"] * n)
    t = T.assemble("n", p, source="", fmt="f")
    assert [j.job_id for j in t.jobs] == [f"j{i}" for i in range(1, n, 2)] + [f"j{i}" for i in range(0, n, 2)]
    assert type(t.jobs[0].duration) is float and type(t.jobs[0].num_gpus) is int
    t = T.assemble("n", p, source="", fmt="f", vc="g")
    assert [j.job_id for j in t.jobs][:3] == ["j1", "j3", "j5"] and type(t.jobs[0].duration) is float


def test_read_csv_with_carriage_return_line_ends(tmp_path: Path):
    p = tmp_path / "mac.csv"
    p.write_bytes(b"job_id,arrival\r\ra,1\rb,2\r")
    t = T.read_csv(p)
    assert (t.header, t.header_line, t.lines, t.rows) == (["job_id", "arrival"], 1, [3, 4], [["a", "1"], ["b", "2"]])


def test_registry_entries_load_with_their_files_as_source(monkeypatch):
    from coddl.perf.curves import data_path
    g = "traces/gavel/msr_philly_seed0/0e4a51.trace.gz"
    p1, p2 = "traces/pollux/workloads/workload-2.csv", "traces/pollux/workloads/workload-3.csv"
    reg = {"g": loader._Bundled("gavel", (g,)), "two": loader._Bundled("pollux", (p1, p2))}
    monkeypatch.setattr(loader, "_registry", lambda: reg)
    t = load_trace("g")
    assert t.meta["format"] == "gavel" and t.source == str(data_path(g))
    assert t.jobs[0].group == "0e4a51" and t.jobs[0].job_id.startswith("0e4a51-")
    t = load_trace("two")
    assert t.source == f"{data_path(p1)}, {data_path(p2)}" and t.name == "two"
    assert [j.job_id for j in t.jobs] == [j.job_id for j in load_trace(str(data_path(p1))).jobs]


def test_philly_clean_stamps_convert_whole_and_offsets_ignore_the_local_zone(monkeypatch):
    import time
    def walked(*a):
        raise AssertionError("walked cell by cell")
    with monkeypatch.context() as m:
        m.setattr(philly, "_cell_seconds", walked)
        got = philly._seconds(T.Column("f", "timestamp", [2, 3], ["1970-01-01 00:00:10", "1970-01-02 00:00:00"]))
        assert got.dtype == np.float64 and got.tolist() == [10.0, 86400.0]
    import os
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:  # converted to UTC, not to the local zone
        assert philly._cell_seconds("1970-01-01T01:00:00+01:00", "f", 2) == 0.0
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_trace_stats_short_span_on_one_gpu():
    t = Trace("s", [TraceJob("a", 0.0, 1, duration=1.0), TraceJob("b", 0.5, 1, duration=2.0)])
    assert trace_stats(t, 1).offered_load == 3.0 / 0.5


def test_poisson_trace_of_two_jobs_on_one_gpu(monkeypatch):
    sizes = gavel.JobSizeDistribution(np.array([100.0, 300.0]), np.array([1, 2]))
    monkeypatch.setitem(synthetic.DEMANDS, "tiny", lambda: sizes)
    t = synthetic.poisson_trace(2, 0.5, 1, seed=0, demand="tiny")
    span = sum(j.duration for j in t.jobs) / 0.5  # every job fits only as the 1-GPU pair: 100 s each
    assert [j.duration for j in t.jobs] == [100.0, 100.0]
    assert [j.arrival for j in t.jobs] == [0.0, pytest.approx(span)]
    assert t.meta["rate_per_s"] == pytest.approx(1 / span)


def test_a_trace_with_a_count_past_int64_names_the_cell(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,arrival,num_gpus,duration\na,0,2,10\nb,1,99999999999999999999,10\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: num_gpus: expected a positive integer, got '99999999999999999999'$"):
        loader.load_trace(str(trace))
