"""The profile table's reader, writer and column helpers pinned with hand-written tables: every
default, every bound of a check (just inside passes, just outside is one exact line) and the exact
bytes written."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from coddl.perf.table import (ProfileError, ProfileTable, even_spread, format_placement, read_many, read_profiles,
                              write_profiles)

HEADER = "cluster,model,param_bytes,gpu_type,gpus,nodes,placement,local_batch,global_batch,steps_per_s,comm_s"
FULL = HEADER + ",compute_share,kind"


def _csv(tmp_path: Path, *lines: str, header: str = HEADER, name: str = "mine.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join([header, *lines]) + "\n")
    return p


def _one_line_error(path: Path) -> str:
    with pytest.raises(ProfileError) as e:
        read_profiles(path)
    return str(e.value)


def _table(**over) -> ProfileTable:
    cols = dict(cluster=["a", "a", "b"], model=["m", "n", "m"], param_bytes=np.array([1.0, 2.0, 1.0]),
                gpu_type=["T4", "T4", "V100"], gpus=np.array([1, 4, 2]), placement=[(1,), (2, 2), (2,)],
                local_batch=np.array([8.0, 8.0, 16.0]), steps_per_s=np.array([2.0, 4.0, 5.0]),
                comm_s=np.array([math.nan, 0.1, 0.01]), kind=["job", "job", "collective"])
    cols.update(over)
    return ProfileTable(**cols)


# ------------------------------------------------------------------------------ the dataclass
def test_a_missing_compute_share_is_one_everywhere_and_columns_must_have_one_row_each():
    t = _table()
    assert t.compute_share.tolist() == [1.0, 1.0, 1.0] and len(t) == 3
    with pytest.raises(ValueError, match=r"^profile table: column gpus has 2 rows, model has 3$"):
        _table(gpus=np.array([1, 2]))
    with pytest.raises(ValueError, match=r"^profile table: column compute_share has 1 rows, model has 3$"):
        _table(compute_share=np.array([1.0]))
    with pytest.raises(ValueError, match=r"column cluster has 2 rows"):
        _table(cluster=["a", "b"])
    with pytest.raises(ValueError, match=r"column kind has 4 rows"):
        _table(kind=["job"] * 4)
    for name in ("param_bytes", "gpu_type", "placement", "local_batch", "steps_per_s", "comm_s"):
        value = getattr(_table(), name)[:2]
        with pytest.raises(ValueError, match=rf"column {name} has 2 rows"):
            _table(**{name: value})


def test_take_by_indices_and_by_mask_keeps_every_column_source_and_lines():
    t = _table(compute_share=np.array([1.0, 0.5, 0.25]), source="src", lines=np.array([2, 3, 4]))
    for pick in ([2, 0], np.array([2, 0])):
        s = t.take(pick)
        assert s.cluster == ["b", "a"] and s.model == ["m", "m"] and s.gpu_type == ["V100", "T4"]
        assert s.param_bytes.tolist() == [1.0, 1.0] and s.gpus.tolist() == [2, 1]
        assert s.placement == [(2,), (1,)] and s.local_batch.tolist() == [16.0, 8.0]
        assert s.steps_per_s.tolist() == [5.0, 2.0] and s.comm_s[0] == 0.01 and math.isnan(s.comm_s[1])
        assert s.kind == ["collective", "job"] and s.compute_share.tolist() == [0.25, 1.0]
        assert s.source == "src" and s.lines.tolist() == [4, 2]
    m = t.take(np.array([False, True, True]))
    assert m.model == ["n", "m"] and m.lines.tolist() == [3, 4]
    assert _table().take([1]).lines is None


def test_where_filters_on_each_field_and_their_conjunction():
    t = _table()
    assert t.where().model == ["m", "n", "m"]
    assert t.where(cluster="a").model == ["m", "n"]
    assert t.where(model="m").cluster == ["a", "b"]
    assert t.where(kind="collective").cluster == ["b"]
    assert t.where(cluster="a", model="m").gpus.tolist() == [1]
    assert t.where(cluster="b", kind="job").model == []
    assert t.where(model="m", kind="job").cluster == ["a"]


def test_clusters_and_models_in_first_seen_order():
    t = _table(cluster=["b", "a", "b"], model=["x", "y", "z"], kind=["job", "job", "collective"])
    assert t.clusters == ["b", "a"]
    assert t.models() == ["x", "y"]
    assert t.models("b") == ["x"]
    assert t.models("b", kind="collective") == ["z"]
    assert t.models(kind="collective") == ["z"]
    dup = _table(model=["m", "m", "n"], cluster=["a", "a", "a"], kind=["job"] * 3)
    assert dup.models() == ["m", "n"] and dup.models("nowhere") == []


def test_concat_joins_rows_and_distinct_sources_in_order():
    a = _table(source="one", compute_share=np.array([0.5, 1.0, 1.0]))
    b = _table(source="two").take([0])
    c = _table(source="").take([1])
    both = ProfileTable.concat([a, b, a.take([2]), c])
    assert len(both) == 6 and both.model == ["m", "n", "m", "m", "m", "n"]
    assert both.cluster == ["a", "a", "b", "a", "b", "a"] and both.gpus.tolist() == [1, 4, 2, 1, 2, 4]
    assert both.compute_share.tolist() == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert both.placement == [(1,), (2, 2), (2,), (1,), (2,), (2, 2)]
    assert both.kind == ["job", "job", "collective", "job", "collective", "job"]
    assert both.param_bytes.tolist() == [1, 2, 1, 1, 1, 2] and both.gpu_type[2] == "V100"
    assert both.local_batch.tolist() == [8, 8, 16, 8, 16, 8]
    assert both.steps_per_s.tolist() == [2, 4, 5, 2, 5, 4]
    assert np.isnan(both.comm_s).tolist() == [True, False, False, True, False, False]
    assert both.source == "one, two"
    with pytest.raises(ValueError, match="^concat needs at least one table$"):
        ProfileTable.concat([])


def test_build_fills_every_default():
    t = ProfileTable.build([
        {"model": "m", "param_bytes": 8, "gpu_type": "T4", "gpus": 5, "nodes": 2, "steps_per_s": 3},
        {"cluster": "c", "model": "n", "param_bytes": 8, "gpu_type": "T4", "gpus": 3, "placement": "1+2",
         "local_batch": 4, "steps_per_s": 3, "comm_s": 0.0, "compute_share": 0.5, "kind": "collective"},
        {"cluster": "", "model": "o", "param_bytes": 8, "gpu_type": "T4", "gpus": 3, "placement": (1, 1, 1),
         "steps_per_s": 3, "kind": None, "compute_share": None, "nodes": None},
        {"model": "p", "param_bytes": 8, "gpu_type": "T4", "gpus": 2, "placement": "", "steps_per_s": 3},
    ], source="src")
    assert t.cluster == ["src", "c", "src", "src"] and t.source == "src"
    assert t.placement == [(3, 2), (2, 1), (1, 1, 1), (2,)]
    assert t.local_batch.tolist() == [0.0, 4.0, 0.0, 0.0]
    assert math.isnan(t.comm_s[0]) and t.comm_s[1] == 0.0
    assert t.kind == ["job", "collective", "job", "job"] and t.compute_share.tolist() == [1.0, 0.5, 1.0, 1.0]
    assert t.gpus.dtype == np.int64 and t.gpus.tolist() == [5, 3, 3, 2]
    assert ProfileTable.build([{"model": "m", "param_bytes": 1, "gpu_type": "T4", "gpus": 1,
                                "steps_per_s": 1}]).cluster == ["cluster"]


def test_even_spread_and_format_placement():
    assert even_spread(7, 3) == (3, 2, 2)
    assert even_spread(6, 3) == (2, 2, 2)
    assert even_spread(5, 1) == (5,)
    assert even_spread(2, 4) == (1, 1, 0, 0)
    assert format_placement((4, 2, 1)) == "4+2+1" and format_placement([3]) == "3"


# ------------------------------------------------------------------------------ reading
def test_defaults_of_a_minimal_file(tmp_path):
    p = _csv(tmp_path, "m,100,T4,4,8,2.5", "m,100,T4,1,8,3",
             header="model,param_bytes,gpu_type,gpus,local_batch,steps_per_s", name="bench.v2.csv")
    t = read_profiles(p)
    assert t.cluster == ["bench", "bench"] and t.kind == ["job", "job"]
    assert t.placement == [(4,), (1,)] and t.compute_share.tolist() == [1.0, 1.0]
    assert np.isnan(t.comm_s).all() and t.local_batch.tolist() == [8.0, 8.0]
    assert t.lines.tolist() == [2, 3] and t.source == "bench.v2.csv"


def test_blank_optional_cells_take_their_defaults(tmp_path):
    p = _csv(tmp_path, ",m,100,T4,3,,,8,,2.0,,,", "c,m,100,T4,5,2,,,10,2.0,0.25,0.5,job",
             "c,m,100,T4,4,2,3+1,,,2.0,,,", header=FULL)
    with pytest.raises(ProfileError, match=r"^mine.csv:4: local_batch: a job row needs local_batch or global_batch; "
                                           r"both are empty$"):
        read_profiles(p)
    p = _csv(tmp_path, ",m,100,T4,3,,,8,,2.0,,,", "c,m,100,T4,5,2,,,10,2.0,0.25,0.5,job",
             "c,m,100,T4,4,2, 1+3 ,2,,2.0,,,collective", header=FULL)
    with pytest.raises(ProfileError, match=r"^mine.csv:4: local_batch: a collective micro-benchmark has no batch; "
                                           r"leave it empty$"):
        read_profiles(p)
    p = _csv(tmp_path, ",m,100,T4,3,,,8,,2.0,,,", "c,m,100,T4,5,2,,,10,2.0,0.25,0.5,job",
             "c,ar,100,T4,4,2, 1+3 ,,,2.0,,,collective", header=FULL)
    t = read_profiles(p)
    assert t.cluster == ["mine", "c", "c"] and t.kind == ["job", "job", "collective"]
    assert t.placement == [(3,), (3, 2), (3, 1)] and t.nodes.tolist() == [1, 2, 2]
    assert t.local_batch.tolist() == [8.0, 2.0, 0.0]
    assert t.compute_share.tolist() == [1.0, 0.5, 1.0]
    assert math.isnan(t.comm_s[0]) and t.comm_s[1] == 0.25 and math.isnan(t.comm_s[2])


def test_global_batch_within_one_sample_per_gpu_of_local_batch_is_accepted(tmp_path):
    # 26 over 2 GPUs is 13 per GPU: 1.0 from local_batch 12 passes, 1.5 (local 11.5) does not
    t = read_profiles(_csv(tmp_path, "c,m,100,T4,2,1,,12,26,2.0,", "c,m,100,T4,2,1,,14,26,2.0,"))
    assert t.local_batch.tolist() == [12.0, 14.0]
    msg = _one_line_error(_csv(tmp_path, "c,m,100,T4,2,1,,11.5,26,2.0,"))
    assert msg == "mine.csv:2: global_batch: 26 over 2 GPUs is 13 per GPU, but local_batch is 11.5"
    msg = _one_line_error(_csv(tmp_path, "c,m,100,T4,2,1,,14.5,26,2.0,"))
    assert msg.startswith("mine.csv:2: global_batch: 26 over 2 GPUs is 13 per GPU, but local_batch is 14.5")


def test_compute_share_up_to_one_and_comm_up_to_the_step_are_accepted(tmp_path):
    t = read_profiles(_csv(tmp_path, "c,m,100,T4,1,1,,8,,2.0,0.505,1,job", "c,m,100,T4,1,1,,8,,2.0,0,0.01,job",
                           header=FULL))
    assert t.compute_share.tolist() == [1.0, 0.01] and t.comm_s.tolist() == [0.505, 0.0]
    msg = _one_line_error(_csv(tmp_path, "c,m,100,T4,1,1,,8,,2.0,0.51,,job", header=FULL))
    assert msg == ("mine.csv:2: comm_s: 0.51 s of communication exceeds the step itself "
                   "(0.5 s at 2 steps/s)")
    msg = _one_line_error(_csv(tmp_path, "c,m,100,T4,1,1,,8,,2.0,,1.25,job", header=FULL))
    assert msg == "mine.csv:2: compute_share: expected a share of a device in (0, 1], got 1.25"
    msg = _one_line_error(_csv(tmp_path, "c,m,100,T4,1,1,,8,,2.0,-0.1,,job", header=FULL))
    assert msg.startswith("mine.csv:2: comm_s:")


@pytest.mark.parametrize("line, message", [
    ("c,m,100,T4,4,1,2+1,8,,2.0,", "mine.csv:2: placement: '2+1' holds 3 GPUs, but gpus is 4"),
    ("c,m,100,T4,3,3, 2+1 ,8,,2.0,", "mine.csv:2: nodes: placement '2+1' spans 2 nodes, but nodes is 3"),
    ("c,m,100,T4,2,3,,8,,2.0,", "mine.csv:2: nodes: 3 nodes cannot hold 2 GPUs (at least one each)"),
    ("c,m,100,T4,2,1,2+0,8,,2.0,", "mine.csv:2: placement: expected GPUs per node joined by '+', e.g. 2+2+1, "
                                   "got '2+0'"),
    ("c,m,100,T4,2,1,a,8,,2.0,", "mine.csv:2: placement: expected GPUs per node joined by '+', e.g. 2+2+1, "
                                 "got 'a'"),
    ("c,m,100,T4,2,1,+,8,,2.0,", "mine.csv:2: placement: expected GPUs per node joined by '+', e.g. 2+2+1, "
                                 "got '+'"),
    ("c,m,100,T4,2,1,,8,,2.0,,,job2", "mine.csv:2: kind: expected one of job, collective, got 'job2'"),
])
def test_each_bad_cell_is_this_exact_line(tmp_path, line, message):
    header = FULL if line.count(",") == 12 else HEADER
    assert _one_line_error(_csv(tmp_path, line, header=header)) == message


def test_placement_matching_gpus_and_nodes_is_accepted(tmp_path):
    t = read_profiles(_csv(tmp_path, "c,m,100,T4,3,2,1+2,8,,2.0,", "c,m,100,T4,4,4,,8,,2.0,"))
    assert t.placement == [(2, 1), (1, 1, 1, 1)] and t.max_per_node.tolist() == [2, 1]


def test_gradient_bytes_may_differ_by_rounding_or_between_clusters_and_models(tmp_path):
    t = read_profiles(_csv(tmp_path, "c,m,1000000,T4,1,1,,8,,2.0,", "c,m,1000000.5,T4,2,1,,8,,2.0,",
                           "d,m,7,T4,1,1,,8,,2.0,", "c,n,9,T4,1,1,,8,,2.0,"))
    assert t.param_bytes.tolist() == [1e6, 1000000.5, 7.0, 9.0]
    msg = _one_line_error(_csv(tmp_path, "c,m,1000000,T4,1,1,,8,,2.0,", "d,m,5,T4,1,1,,8,,2.0,",
                               "c,m,1000002,T4,2,1,,8,,2.0,"))
    assert msg == ("mine.csv:4: param_bytes: m on c all-reduces 1e+06 bytes on line 2, 1e+06 here; "
                   "a job's gradient bytes do not change")


def test_a_shared_reader_error_is_a_profile_error(tmp_path):
    p = tmp_path / "broken.csv"
    p.write_text(HEADER + "\nc,m,100\n")
    with pytest.raises(ProfileError, match=r"^broken.csv:2"):
        read_profiles(p)


def test_read_many_concatenates_files(tmp_path):
    a = _csv(tmp_path, "c,m,100,T4,1,1,,8,,2.0,", name="a.csv")
    b = _csv(tmp_path, "d,n,100,T4,2,1,,8,,4.0,", name="b.csv")
    t = read_many([a, b])
    assert t.cluster == ["c", "d"] and t.source == "a.csv, b.csv" and t.steps_per_s.tolist() == [2.0, 4.0]


# ------------------------------------------------------------------------------ writing
def _written() -> ProfileTable:
    return ProfileTable.build([
        {"cluster": "c", "model": "m", "param_bytes": 4e6, "gpu_type": "V100", "gpus": 3, "placement": "2+1",
         "local_batch": 32, "steps_per_s": 9.25, "comm_s": 0.01, "compute_share": 0.5},
        {"cluster": "c", "model": "m", "param_bytes": 4e6, "gpu_type": "V100", "gpus": 1, "local_batch": 2.5,
         "steps_per_s": 10},
        {"cluster": "c", "model": "ar", "param_bytes": 2.0**53, "gpu_type": "V100", "gpus": 2, "nodes": 2,
         "steps_per_s": 100.0, "kind": "collective"},
    ])


EXPECTED = [
    "cluster,model,param_bytes,gpu_type,gpus,nodes,placement,local_batch,global_batch,steps_per_s,comm_s,"
    "compute_share,kind",
    "c,m,4000000,V100,3,2,2+1,32,96,9.25,0.01,0.5,job",
    "c,m,4000000,V100,1,1,1,2.5,2.5,10,,,job",
    "c,ar,9007199254740992.0,V100,2,2,1+1,,,100,,,collective",  # from 2**53 on, written as floats
]


def test_the_written_csv_is_exactly_these_lines(tmp_path):
    p = tmp_path / "out.csv"
    assert write_profiles(_written(), p) == 3
    assert p.read_text() == "\n".join(EXPECTED) + "\n"
    g = tmp_path / "out.CSV.GZ"
    assert write_profiles(_written(), g) == 3
    with gzip.open(g, "rt") as f:
        assert f.read() == "\n".join(EXPECTED) + "\n"


def test_parquet_reads_back_with_its_columns(tmp_path):
    p = tmp_path / "out.Parquet"
    write_profiles(_written(), p)
    import pyarrow.parquet as pq

    back = pq.read_table(p).to_pydict()
    assert list(back) == EXPECTED[0].split(",")
    assert back["local_batch"] == [32, 2.5, None] and back["compute_share"] == [0.5, None, None]
    t = read_profiles(p)
    assert t.placement == [(2, 1), (1,), (1, 1)] and t.kind == ["job", "job", "collective"]


def test_writing_to_a_bad_name_or_place_is_one_line(tmp_path):
    with pytest.raises(ProfileError, match=r"out.txt: expected an output name ending in .csv, .csv.gz or .parquet$"):
        write_profiles(_written(), tmp_path / "out.txt")
    with pytest.raises(ProfileError, match=r"nowhere/out.csv: cannot write: No such file or directory$"):
        write_profiles(_written(), tmp_path / "nowhere" / "out.csv")


def test_an_empty_selection_is_an_empty_table_that_still_filters():
    """``rows.take(rows.gpus > 1)`` of one-GPU rows is empty; filtering it again must not fail, and
    its integer columns stay integers (an empty list would otherwise become float64)."""
    empty = _table().take(np.zeros(3, dtype=bool))
    assert len(empty) == 0 and empty.gpus.dtype == np.int64
    again = empty.where(cluster="a", model="m", kind="job")
    assert len(again) == 0 and again.model == []
    built = ProfileTable.build([])
    assert len(built) == 0 and built.gpus.dtype == np.int64 and built.cluster == []
    assert len(built.where(cluster="x")) == 0 and len(built.where(model="x")) == 0 and len(built.where(kind="job")) == 0


def test_take_of_no_rows_by_an_empty_list():
    t = _table(lines=np.array([2, 3, 4])).take([])
    assert len(t) == 0 and t.lines.tolist() == [] and t.gpus.dtype == np.int64


def test_a_table_without_either_batch_column_needs_one_unless_all_rows_are_collectives(tmp_path):
    header = "model,param_bytes,gpu_type,gpus,steps_per_s,kind"
    msg = _one_line_error(_csv(tmp_path, "ar,100,T4,2,5,collective", "m,100,T4,2,5,job", header=header))
    assert msg == f"mine.csv:1: local_batch: missing column; the header is {header}"
    t = read_profiles(_csv(tmp_path, "ar,100,T4,2,5,collective", "ar,100,T4,4,3,collective", header=header))
    assert t.local_batch.tolist() == [0.0, 0.0] and t.is_collective.tolist() == [True, True]
    t = read_profiles(_csv(tmp_path, "m,100,T4,2,5,16", header="model,param_bytes,gpu_type,gpus,steps_per_s,"
                                                                "global_batch"))
    assert t.local_batch.tolist() == [8.0]


def test_parquet_without_pyarrow_is_the_readers_one_line(tmp_path, monkeypatch):
    from coddl.traces import native
    from coddl.traces.model import TraceError

    def missing():
        raise TraceError("Parquet needs pyarrow: pip install 'coddl[parquet]'")

    monkeypatch.setattr(native, "_pyarrow", missing)
    with pytest.raises(ProfileError, match=r"^Parquet needs pyarrow: pip install 'coddl\[parquet\]'$"):
        write_profiles(_written(), tmp_path / "out.parquet")


def test_a_typed_parquet_placement_is_named_as_it_was_given(tmp_path):
    """Parquet keeps types: an integer placement (GPUs on one node) that disagrees with gpus is shown
    as the number, not as text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"model": ["m"], "param_bytes": [100.0], "gpu_type": ["T4"], "gpus": [4],
                             "placement": [3], "local_batch": [8.0], "steps_per_s": [2.0]}), p)
    assert _one_line_error(p) == "typed.parquet:1: placement: 3 holds 3 GPUs, but gpus is 4"  # Parquet rows count from 1
    pq.write_table(pa.table({"model": ["m"], "param_bytes": [100.0], "gpu_type": ["T4"], "gpus": [3],
                             "placement": [3], "local_batch": [8.0], "steps_per_s": [2.0]}), p)
    assert read_profiles(p).placement == [(3,)]
