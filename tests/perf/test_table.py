"""The profile format: the bundled conversions read back as written, and every kind of bad input is
one line naming file, line and field (and exits with status 2 in the CLI, tested there)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from coddl.perf.convert import gavel_table, pollux_table
from coddl.perf.curves import data_path
from coddl.perf.profiles import load_gavel_throughputs
from coddl.perf.table import ProfileError, ProfileTable, even_spread, read_profiles, write_profiles

HEADER = "cluster,model,param_bytes,gpu_type,gpus,nodes,placement,local_batch,global_batch,steps_per_s,comm_s"


def _write(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    p = tmp_path / "mine.csv"
    p.write_text("\n".join([header, *lines]) + "\n")
    return p


def test_the_bundled_tables_are_the_conversions_of_the_original_files():
    assert read_profiles(data_path("profiles/pollux-t4.csv")) .model == pollux_table().model
    bundled = read_profiles(data_path("profiles/gavel.csv"))
    fresh = gavel_table()
    assert bundled.model == fresh.model and np.allclose(bundled.steps_per_s, fresh.steps_per_s)


def test_pollux_rows_keep_their_placement_and_step_time():
    t = pollux_table().where(model="cifar10")
    first = t.take([0])
    assert first.placement == [(1,)] and first.local_batch[0] == 32
    assert first.steps_per_s[0] == pytest.approx(1 / 0.0427886962890625)
    assert (2, 2, 1, 1) in t.placement  # placements.csv "1212", stored largest first
    assert even_spread(10, 6) == (2, 2, 2, 2, 1, 1)  # scalability rows: replicas spread evenly
    assert np.isfinite(t.comm_s).all()


def test_gavel_multi_gpu_steps_count_every_worker():
    """Gavel's k-GPU figure counts all workers' steps: one step of the job is k of them."""
    raw = load_gavel_throughputs().steps
    t = gavel_table().where(cluster="gavel-k80", model="ResNet-50")
    row = [i for i in range(len(t)) if t.gpus[i] == 4 and t.local_batch[i] == 32 and t.placement[i] == (4,)]
    assert t.steps_per_s[row[0]] == pytest.approx(raw[("K80", "ResNet-50 (batch size 32)", 4)] / 4)
    unconsolidated = [i for i in range(len(t)) if t.placement[i] == (1, 1, 1, 1)]
    assert unconsolidated and all(t.nodes[i] == 4 for i in unconsolidated)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_a_table_reads_back_exactly_as_written(tmp_path, suffix):
    t = ProfileTable.build([
        {"cluster": "c", "model": "m", "param_bytes": 4e6, "gpu_type": "V100", "gpus": 1, "local_batch": 32,
         "steps_per_s": 10.5},
        {"cluster": "c", "model": "m", "param_bytes": 4e6, "gpu_type": "V100", "gpus": 3, "placement": "2+1",
         "local_batch": 32, "steps_per_s": 9.25, "comm_s": 0.01, "compute_share": 0.5},
        {"cluster": "c", "model": "ar", "param_bytes": 1e6, "gpu_type": "V100", "gpus": 2, "nodes": 2,
         "steps_per_s": 100.0, "kind": "collective"},
    ])
    path = tmp_path / f"t{suffix}"
    write_profiles(t, path)
    back = read_profiles(path)
    assert back.model == t.model and back.placement == [(1,), (2, 1), (1, 1)]
    assert back.steps_per_s.tolist() == t.steps_per_s.tolist()
    assert back.compute_share.tolist() == [1.0, 0.5, 1.0]
    assert math.isnan(back.comm_s[0]) and back.comm_s[1] == 0.01
    assert back.kind == ["job", "job", "collective"] and back.local_batch[2] == 0.0


def test_optional_columns_have_defaults(tmp_path):
    p = _write(tmp_path, "m,100,T4,4,2,5", header="model,param_bytes,gpu_type,gpus,global_batch,steps_per_s")
    t = read_profiles(p)
    assert t.cluster == ["mine"] and t.placement == [(4,)] and t.local_batch[0] == 0.5 and t.kind == ["job"]


@pytest.mark.parametrize("line, where", [
    ("c,m,100,T4,x,1,,8,,2.0,", "mine.csv:2: gpus: expected a positive integer, got 'x'"),
    ("c,m,100,T4,4,1,2+1,8,,2.0,", "mine.csv:2: placement: '2+1' holds 3 GPUs, but gpus is 4"),
    ("c,m,100,T4,3,3,2+1,8,,2.0,", "mine.csv:2: nodes: placement '2+1' spans 2 nodes, but nodes is 3"),
    ("c,m,100,T4,2,3,,8,,2.0,", "mine.csv:2: nodes: 3 nodes cannot hold 2 GPUs"),
    ("c,m,100,T4,2,1,2+a,8,,2.0,", "mine.csv:2: placement: expected GPUs per node joined by '+'"),
    ("c,m,100,T4,2,1,,8,20,2.0,", "mine.csv:2: global_batch: 20 over 2 GPUs is 10 per GPU, but local_batch is 8"),
    ("c,m,100,T4,2,1,,,,2.0,", "mine.csv:2: local_batch: a job row needs local_batch or global_batch"),
    ("c,m,100,T4,2,1,,8,,2.0,0.9", "mine.csv:2: comm_s: 0.9 s of communication exceeds the step itself"),
    ("c,m,100,T4,2,1,,8,,-2.0,", "mine.csv:2: steps_per_s: expected a positive number, got '-2.0'"),
    ("c,,100,T4,2,1,,8,,2.0,", "mine.csv:2: model: expected a non-empty value"),
    ("c,m,0,T4,2,1,,8,,2.0,", "mine.csv:2: param_bytes: expected a positive number, got '0'"),
])
def test_a_bad_cell_names_file_line_and_field(tmp_path, line, where):
    good = "c,m,100,T4,1,1,,8,,2.0,"
    with pytest.raises(ProfileError) as e:
        read_profiles(_write(tmp_path, good, line))
    assert str(e.value).startswith(where.replace(":2:", ":3:"))


def test_a_job_s_gradient_bytes_must_not_change_between_rows(tmp_path):
    with pytest.raises(ProfileError, match=r"mine.csv:3: param_bytes: m on c all-reduces 100 bytes on line 2"):
        read_profiles(_write(tmp_path, "c,m,100,T4,1,1,,8,,2.0,", "c,m,200,T4,2,1,,8,,2.0,"))


def test_kind_compute_share_and_collective_rows_are_checked(tmp_path):
    header = HEADER + ",compute_share,kind"
    with pytest.raises(ProfileError, match=r"mine.csv:2: kind: expected one of job, collective, got 'jobs'"):
        read_profiles(_write(tmp_path, "c,m,100,T4,1,1,,8,,2.0,,,jobs", header=header))
    with pytest.raises(ProfileError, match=r"mine.csv:2: compute_share: expected a share of a device in \(0, 1\]"):
        read_profiles(_write(tmp_path, "c,m,100,T4,1,1,,8,,2.0,,1.5,job", header=header))
    with pytest.raises(ProfileError, match=r"mine.csv:2: local_batch: a collective micro-benchmark has no batch"):
        read_profiles(_write(tmp_path, "c,ar,100,T4,2,1,,8,,2.0,,,collective", header=header))


def test_missing_columns_empty_and_missing_files(tmp_path):
    with pytest.raises(ProfileError, match=r"mine.csv:1: steps_per_s: missing column; the header is"):
        read_profiles(_write(tmp_path, "m,1,T4,1", header="model,param_bytes,gpu_type,gpus"))
    with pytest.raises(ProfileError, match=r"mine.csv:1: rows: no jobs"):
        read_profiles(_write(tmp_path))
    with pytest.raises(ProfileError, match="nope.csv: no such file"):
        read_profiles(tmp_path / "nope.csv")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(ProfileError, match="x.parquet: not a readable Parquet file"):
        read_profiles(tmp_path / "x.parquet")


def test_a_table_written_with_the_former_column_name_still_reads(tmp_path):
    """``iterations_per_s`` was the column's name before coddl spoke of steps only: such files read
    the same, and a bad cell is named as the file spells it."""
    old = HEADER.replace("steps_per_s", "iterations_per_s")
    t = read_profiles(_write(tmp_path, "c,m,100,T4,2,1,,8,,2.5,", header=old))
    assert t.steps_per_s.tolist() == [2.5] and t.gpus.tolist() == [2]
    with pytest.raises(ProfileError, match=r"mine.csv:2: iterations_per_s: expected a positive number, got '0'"):
        read_profiles(_write(tmp_path, "c,m,100,T4,2,1,,8,,0,", header=old))


def test_stored_rows_under_the_former_key_build_the_same_table():
    """The real system's store keeps a job's profile as dicts; ones stored before the rename say
    ``iterations_per_s`` and must still build after an upgrade."""
    row = {"model": "m", "param_bytes": 4e6, "gpu_type": "cpu", "gpus": 2, "placement": [1, 1], "local_batch": 16.0}
    old = ProfileTable.build([row | {"iterations_per_s": 3.5}])
    new = ProfileTable.build([row | {"steps_per_s": 3.5}])
    assert old.steps_per_s.tolist() == new.steps_per_s.tolist() == [3.5] and old.placement == [(1, 1)]
