"""The native format: what is written is read back unchanged, in CSV and in Parquet."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from coddl.traces import TraceError, TraceJob, load_trace, write_native, write_specs

pytest.importorskip("pyarrow")

_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,11}", fullmatch=True)
_counts = st.integers(1, 4096)
_times = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
_work = st.floats(1e-6, 1e12, allow_nan=False, allow_infinity=False)


@st.composite
def _jobs(draw) -> list[TraceJob]:
    ids = draw(st.lists(_names, min_size=1, max_size=25, unique=True))
    arrivals = sorted(draw(st.lists(_times, min_size=len(ids), max_size=len(ids))))
    arrivals[0] = 0.0  # readers make arrivals relative to the first job
    jobs = []
    for job_id, arrival in zip(ids, arrivals):
        duration, steps = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
        lo = draw(st.none() | st.integers(1, 64))
        jobs.append(TraceJob(
            job_id, arrival, draw(_counts),
            duration=draw(_work) if duration else None,
            steps=draw(_work) if steps else None,
            model=draw(st.none() | _names),
            min_gpus=lo,
            max_gpus=draw(st.none() | st.integers(lo or 1, 128)),
            cpus=draw(st.none() | st.integers(1, 256)),
            user=draw(st.none() | _names),
            batch_size=draw(st.none() | _counts),
            group=draw(st.none() | st.sampled_from(["vc1", "vc2"])),
        ))
    return jobs


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
@settings(max_examples=25, deadline=None)
@given(jobs=_jobs())
def test_write_then_read_gives_the_same_jobs(suffix, jobs):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"t{suffix}"
        assert write_native(jobs, path) == len(jobs)
        assert load_trace(str(path)).jobs == jobs


def test_convert_itp_round_trip(tmp_path):
    itp = load_trace("itp", limit=3000)
    for name in ("itp.csv", "itp.parquet"):
        write_native(itp.jobs, tmp_path / name)
        back = load_trace(str(tmp_path / name))
        assert back.jobs == itp.jobs and back.meta["format"] == "native"
        cluster = [j for j in itp.jobs if j.group == "cluster04"]
        shift = cluster[0].arrival
        assert load_trace(str(tmp_path / name), vc="cluster04").jobs == [
            dataclasses.replace(j, arrival=j.arrival - shift) for j in cluster]


def test_native_is_sorted_and_shifted_like_every_trace(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,arrival,num_gpus,steps,model\nb,30,2,10,m\na,10,1,5,m\nc,30,1,5,m\n")
    t = load_trace(str(p))
    assert [(j.job_id, j.arrival) for j in t.jobs] == [("a", 0.0), ("b", 20.0), ("c", 20.0)]


def test_parquet_errors_name_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"job_id": ["a", "b"], "arrival": [0.0, 1.0], "num_gpus": [1, -4],
                             "duration": [5.0, 5.0]}), tmp_path / "t.parquet")
    with pytest.raises(TraceError, match=r"^t\.parquet:2: num_gpus: expected a positive integer, got '-4'$"):
        load_trace(str(tmp_path / "t.parquet"))
    pq.write_table(pa.table({"job_id": ["a"], "arrival": [0.0]}), tmp_path / "m.parquet")
    with pytest.raises(TraceError, match=r"^m\.parquet: num_gpus: missing column; the header is job_id,arrival$"):
        load_trace(str(tmp_path / "m.parquet"))


def test_jobs_without_duration_or_steps_cannot_be_written(tmp_path):
    with pytest.raises(TraceError, match="^cifar10-0: duration: the native format needs"):
        write_native(load_trace("pollux-1").jobs, tmp_path / "p.csv")
    with pytest.raises(TraceError, match=r"expected an output name ending in \.csv, \.csv\.gz or \.parquet"):
        write_native(load_trace("tiresias-60").jobs, tmp_path / "p.txt")


def test_exported_workload_replays_exactly(tmp_path):
    workload = pytest.importorskip("coddl.sim.workload")
    from coddl.perf.curves import load_coddl_curves

    curves = load_coddl_curves()
    trace = load_trace("itp-4", limit=2000)
    specs = workload.build_workload(trace, curves, seed=3)
    for name in ("w.csv", "w.parquet"):
        write_specs(specs, tmp_path / name)
        again = workload.build_workload(load_trace(str(tmp_path / name)), curves, seed=99)
        assert again == specs



def test_parquet_with_integer_ids_and_float_counts(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"job_id": [7, 8], "arrival": [0, 5], "num_gpus": [2.0, 4.0],
                             "duration": [10, None], "steps": [None, 3.5]}), tmp_path / "t.parquet")
    t = load_trace(str(tmp_path / "t.parquet"))
    assert t.jobs == [TraceJob("7", 0.0, 2, duration=10.0), TraceJob("8", 5.0, 4, steps=3.5)]
    pq.write_table(pa.table({"job_id": ["a"], "arrival": [0.0], "num_gpus": [2.5], "duration": [1.0]}),
                   tmp_path / "u.parquet")
    with pytest.raises(TraceError, match=r"^u\.parquet:1: num_gpus: expected a positive integer, got '2\.5'$"):
        load_trace(str(tmp_path / "u.parquet"))
