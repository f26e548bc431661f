"""Every user mistake in a trace file is one line: ``<file>:<line>: <field>: <problem>``."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from coddl.traces import TraceError, load_trace

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"
NATIVE = "job_id,arrival,num_gpus,duration\n"


def _error(path: Path, **kw) -> str:
    with pytest.raises(TraceError) as e:
        load_trace(str(path), **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("row, message", [
    ("2017-10-09 07:01:55,66.0,x,66.0,vc1", "num_gpus: expected a positive integer, got 'x'"),
    ("2017-10-09 07:01:55,66.0,0,66.0,vc1", "num_gpus: expected a positive integer, got '0'"),
    ("2017-10-09 07:01:55,66.0,-2,66.0,vc1", "num_gpus: expected a positive integer, got '-2'"),
    ("2017-10-09 07:01:55,66.0,1.5,66.0,vc1", "num_gpus: expected a positive integer, got '1.5'"),
    ("2017-10-09 07:01:55,-5,1,66.0,vc1", "duration: expected a positive number, got '-5'"),
    ("2017-10-09 07:01:55,abc,1,66.0,vc1", "duration: expected a positive number, got 'abc'"),
    ("2017-10-09 07:01:55,nan,1,66.0,vc1", "duration: expected a positive number, got 'nan'"),
    ("yesterday,66.0,1,66.0,vc1", "timestamp: expected a date-time like '2017-10-09 07:01:55', got 'yesterday'"),
    ("2017-10-09 07:01:55,66.0,1,66.0,", "cluster: expected a non-empty value, got ''"),
    ("2017-10-09 07:01:55,66.0,1", "gpu_time: missing value (the row has 3 of 5 fields)"),
    ("2017-10-09 07:01:55,66.0,1,66.0,vc1,extra", "row: expected 5 fields (timestamp,duration,num_gpus,gpu_time,cluster), got 6"),
])
def test_philly_bad_cell_names_file_line_and_field(tmp_path, row, message):
    good = "2017-10-09 07:01:55,66.0,1,66.0,vc1\n"
    p = _write(tmp_path, "philly-digest.csv", PHILLY + good * 2 + row + "\n" + good)
    assert _error(p) == f"philly-digest.csv:4: {message}"


def test_line_numbers_count_blank_lines_and_work_in_gzip(tmp_path):
    text = PHILLY + "2017-10-09 07:01:55,66.0,1,66.0,vc1\n\n2017-10-09 07:01:56,66.0,x,66.0,vc1\n"
    p = tmp_path / "t.csv.gz"
    p.write_bytes(gzip.compress(text.encode()))
    assert _error(p) == "t.csv.gz:4: num_gpus: expected a positive integer, got 'x'"


def test_missing_column_is_named_with_the_header_found(tmp_path):
    p = _write(tmp_path, "t.csv", "job_id,arrival,duration\na,0,5\n")
    assert _error(p) == "t.csv:1: num_gpus: missing column; the header is job_id,arrival,duration"
    p = _write(tmp_path, "p.csv", "timestamp,duration,gpu_time,cluster\n2017-10-09 07:01:55,1,1,a\n")
    assert _error(p) == "p.csv:1: num_gpus: missing column; the header is timestamp,duration,gpu_time,cluster"
    p = _write(tmp_path, "n.csv", "job_id,arrival,num_gpus\na,0,1\n")
    assert _error(p) == "n.csv:1: duration: missing column; the header is job_id,arrival,num_gpus"


def test_negative_arrival(tmp_path):
    p = _write(tmp_path, "t.csv", NATIVE + "a,0,1,10\nb,-3,1,10\n")
    assert _error(p) == "t.csv:3: arrival: expected a non-negative number, got '-3'"
    p = _write(tmp_path, "itp.csv", "job_id,submission_time,duration,num_gpu\nx,-1,5,1\n")
    assert _error(p) == "itp.csv:2: submission_time: expected a non-negative number, got '-1'"


@pytest.mark.parametrize("text, message", [
    ("", "t.csv:1: header: the file is empty"),
    ("\n\n", "t.csv:1: header: the file is empty"),
    (NATIVE, "t.csv:1: rows: no jobs: the file has only a header"),
    (NATIVE + "\n", "t.csv:1: rows: no jobs: the file has only a header"),
])
def test_empty_file(tmp_path, text, message):
    assert _error(_write(tmp_path, "t.csv", text)) == message


def test_duplicate_job_id_names_both_lines(tmp_path):
    p = _write(tmp_path, "t.csv", NATIVE + "a,0,1,10\nb,1,1,10\na,2,1,10\n")
    assert _error(p) == "t.csv:4: job_id: duplicate job id 'a' (first on line 2)"
    p = _write(tmp_path, "w.csv", "name,time,application,num_replicas,batch_size\nj,0,ncf,1,8\nj,5,ncf,1,8\n")
    assert _error(p) == "w.csv:3: name: duplicate job id 'j' (first on line 2)"


def test_native_row_without_duration_or_steps(tmp_path):
    p = _write(tmp_path, "t.csv", "job_id,arrival,num_gpus,duration,steps\na,0,1,,5\nb,0,1,,\n")
    assert _error(p) == "t.csv:3: duration: each job needs a duration or steps; both are empty"


def test_native_former_column_name_reads_as_steps(tmp_path):
    """Files written when the column was called ``iterations`` still read, and a bad cell in it is
    named as the file spells it."""
    p = _write(tmp_path, "t.csv", "job_id,arrival,num_gpus,iterations,model\na,0,1,250,resnet50\n")
    (job,) = load_trace(str(p)).jobs
    assert (job.steps, job.duration, job.model) == (250.0, None, "resnet50")
    p = _write(tmp_path, "t.csv", "job_id,arrival,num_gpus,iterations\na,0,1,-5\n")
    assert _error(p) == "t.csv:2: iterations: expected a positive number, got '-5'"
    both = _write(tmp_path, "t.csv", "job_id,arrival,num_gpus,iterations,steps\na,0,1,7,9\n")
    assert load_trace(str(both)).jobs[0].steps == 9.0  # the current name wins


def test_native_max_below_min(tmp_path):
    p = _write(tmp_path, "t.csv", "job_id,arrival,num_gpus,steps,min_gpus,max_gpus\na,0,2,5,4,2\n")
    assert _error(p) == "t.csv:2: max_gpus: expected at least min_gpus (4), got 2"


def test_unrecognised_header(tmp_path):
    p = _write(tmp_path, "t.csv", "foo,bar\n1,2\n")
    msg = _error(p)
    assert msg.startswith("t.csv:1: header: unrecognised trace format, header is foo,bar; expected one of: native")


def test_tiresias_and_gavel_errors(tmp_path):
    p = _write(tmp_path, "60_job.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                                       "0,1,0,606,vgg19,164,30\n1,8,30,-1,vgg11,147,23\n")
    assert _error(p) == "60_job.csv:3: iterations: expected a positive number, got '-1'"  # Tiresias's name
    p = _write(tmp_path, "vc.trace", "ResNet-18 (batch size 32)\tcmd\t--num_steps\t1\t100\t0.0\t1\n"
                                     "ResNet-18 (batch size 32)\tcmd\t--num_steps\t1\t100\t5.0\n")
    assert _error(p) == "vc.trace:2: scale_factor: missing value (the row has 6 of 7 fields)"
    assert _error(_write(tmp_path, "e.trace", "")) == "e.trace:1: rows: no jobs: the file is empty"


def test_missing_file_and_unreadable_parquet(tmp_path):
    assert _error(tmp_path / "nope.csv").startswith(f"{tmp_path / 'nope.csv'}: no such file, and not a bundled trace")
    p = _write(tmp_path, "bad.parquet", "not parquet")
    assert _error(p).startswith("bad.parquet: not a readable Parquet file (")
    assert _error(tmp_path).endswith(": is a directory, expected a trace file")
