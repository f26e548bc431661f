"""Slurm's ``sacct -P`` output read as a history: the hand-written sample (tests/replay/history.sacct)
to the documented format, its edge cases (array tasks, ``CANCELLED by``, ``Unknown``/``None`` times,
an explicit offset, typed GPUs, CPU-only jobs), and every bad cell as one line naming file:line:field."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from coddl.traces import TraceError, load_trace
from coddl.traces.sacct import COMMAND, REQUIRED, read_sacct

SAMPLE = Path(__file__).resolve().parents[1] / "replay" / "history.sacct"
LINES = SAMPLE.read_text().splitlines()


def utc(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp()


def test_the_sample_reads_as_documented():
    h = read_sacct(SAMPLE)
    by_id = {r.job.job_id: r for r in h.jobs}
    assert sorted(by_id) == ["100", "101", "102_1", "102_2", "105"]
    assert h.rows == 9 and h.skipped == {"never started": 2, "not ended when exported": 1, "no GPUs (CPU-only)": 1}
    assert by_id["102_1"].state == "CANCELLED" and by_id["102_1"].job.num_gpus == 1  # typed gres summed
    assert by_id["102_2"].job.num_gpus == 1  # gres/gpu=1 is the total; the typed entry is not added twice
    assert by_id["101"].state == "FAILED" and by_id["101"].job.num_gpus == 2
    assert by_id["105"].submit == utc("2024-03-04T10:40:00")  # 11:40+01:00
    assert (by_id["100"].account, by_id["100"].partition, by_id["100"].job.user) == ("vision", "gpu", "alice")
    assert by_id["100"].job.duration == 7200 and by_id["100"].gpu_seconds == 2 * 7200
    assert h.peak_gpus == 4 and h.usage[0] == (utc("2024-03-04T09:00:00"), 2) and h.usage[-1][1] == 0
    arrivals = {j.job_id: j.arrival for j in h.trace().jobs}
    assert arrivals == {"100": 0.0, "101": 1800.0, "102_1": 3600.0, "102_2": 3600.0, "105": 6000.0}


def test_the_documented_command_names_every_required_field():
    assert all(f in COMMAND for f in REQUIRED) and "-X" in COMMAND and "-P" in COMMAND and "TZ=UTC" in COMMAND


def test_naive_times_are_read_in_the_given_zone_and_offsets_are_kept(tmp_path):
    berlin = {r.job.job_id: r for r in read_sacct(SAMPLE, tz="Europe/Berlin").jobs}
    assert berlin["100"].submit == utc("2024-03-04T08:00:00")  # CET is UTC+1 in March
    assert berlin["105"].submit == utc("2024-03-04T10:40:00") and berlin["105"].end == utc("2024-03-04T12:00:00")  # offsets kept
    # across the spring change (2024-03-31 02:00 CET → 03:00 CEST) a 1-hour wait stays 1 hour
    p = tmp_path / "dst.sacct"
    p.write_text(LINES[0] + "\n1|u|a|p|2024-03-31T01:30:00|2024-03-31T03:30:00|2024-03-31T04:30:00|3600|COMPLETED|gres/gpu=1\n")
    r = read_sacct(p, tz="Europe/Berlin").jobs[0]
    assert r.start - r.submit == 3600


def test_sacct_p_with_its_trailing_bar_and_any_header_case_reads_the_same(tmp_path):
    p = tmp_path / "p.sacct"
    p.write_text("\n".join([LINES[0].lower() + "|"] + [line + "|" for line in LINES[1:]]) + "\n")
    assert read_sacct(p).jobs == read_sacct(SAMPLE).jobs


def test_load_trace_reads_sacct_and_selects_an_account():
    t = load_trace(str(SAMPLE), vc="nlp")
    assert t.meta["format"] == "sacct" and [j.job_id for j in t.jobs] == ["101", "102_1", "102_2"]
    assert [j.arrival for j in t.jobs] == [0.0, 1800.0, 1800.0]


def _bad(tmp_path: Path, line: int, row: str) -> str:
    lines = list(LINES)
    lines[line - 1] = row
    p = tmp_path / "bad.sacct"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as e:
        read_sacct(p)
    assert "\n" not in str(e.value)
    return str(e.value)


GOOD = "100|alice|vision|gpu|2024-03-04T09:00:00|2024-03-04T09:00:00|2024-03-04T11:00:00|7200|COMPLETED|gres/gpu=2"


@pytest.mark.parametrize("field_index, value, message", [
    (4, "yesterday", "bad.sacct:3: Submit: expected a date-time like 2024-03-04T09:00:00, got 'yesterday' "
                     "(export with SLURM_TIME_FORMAT=standard)"),
    (6, "soon", "bad.sacct:3: End: expected a date-time like 2024-03-04T09:00:00 or Unknown/None, got 'soon'"),
    (4, "Unknown", "bad.sacct:3: Submit: expected a date-time like 2024-03-04T09:00:00, got 'Unknown'"),
    (5, "Mar 4 09:00", "bad.sacct:3: Start: expected a date-time like 2024-03-04T09:00:00 or Unknown/None, got 'Mar 4 09:00'"),
    (5, "2024-03-04T08:00:00", "bad.sacct:3: Start: 2024-03-04T08:00:00 is before Submit 2024-03-04T09:00:00"),
    (6, "2024-03-04T08:59:00", "bad.sacct:3: End: 2024-03-04T08:59:00 is before Start 2024-03-04T09:00:00"),
    (7, "2h", "bad.sacct:3: ElapsedRaw: expected whole seconds, got '2h'"),
    (8, "EXPLODED", "bad.sacct:3: State: unknown Slurm job state 'EXPLODED'"),
    (9, "cpu=4,gres/gpu=two", "bad.sacct:3: AllocTRES: gres/gpu: expected a whole number of GPUs, got 'two'"),
    (9, "cpu=4,gres/gpu:a100=-1", "bad.sacct:3: AllocTRES: gres/gpu:a100: expected a whole number of GPUs, got '-1'"),
    (9, "cpu=4,gpus", "bad.sacct:3: AllocTRES: expected key=value items like cpu=8,gres/gpu=2, got 'gpus'"),
    (0, "100", "bad.sacct:3: JobID: duplicate job id '100' (first on line 2)"),
    (0, "", "bad.sacct:3: JobID: expected a non-empty value, got ''"),
    (0, "101.batch", "bad.sacct:3: JobID: '101.batch' is a job step, not a job: export with -X"),
])
def test_a_bad_cell_names_file_line_and_field(tmp_path, field_index, value, message):
    cells = GOOD.split("|")
    cells[0] = "101"
    cells[field_index] = value
    assert _bad(tmp_path, 3, "|".join(cells)).startswith(message)


def test_a_short_row_a_missing_column_and_a_bad_zone_are_one_line_each(tmp_path):
    assert _bad(tmp_path, 4, "102_1|carol|nlp").startswith("bad.sacct:4: Partition: missing value (the row has 3 of 10")
    p = tmp_path / "nocol.sacct"
    p.write_text("JobID|User|Account|Partition|Submit|Start|End|State\n1|u|a|p|2024-03-04T09:00:00|None|None|PENDING\n")
    with pytest.raises(TraceError, match=r"^nocol.sacct:1: AllocTRES: missing column; the header is JobID,User"):
        read_sacct(p)
    with pytest.raises(TraceError, match="^tz: unknown time zone 'Mars/Olympus'"):
        read_sacct(SAMPLE, tz="Mars/Olympus")


def test_a_history_with_nothing_to_replay_says_why(tmp_path):
    p = tmp_path / "idle.sacct"
    p.write_text("\n".join([LINES[0], LINES[5], LINES[7]]) + "\n")
    with pytest.raises(TraceError, match=r"^idle.sacct: no job to replay: every row was skipped \(1 never started, "
                                         r"1 no GPUs \(CPU-only\)\)$"):
        read_sacct(p)


def _one(tmp_path: Path, row: str, header: str = LINES[0]) -> list:
    p = tmp_path / "one.sacct"
    p.write_text(f"{header}\n{row}\n")
    return read_sacct(p).jobs


def test_cells_sacct_writes_in_other_ways_read_as_the_same_job(tmp_path):
    r = _one(tmp_path, "7|u||p|2024-03-04T09:00:00|2024-03-04T09:00:00|2024-03-04T09:10:00|600|cancelled+|"
                       "gres/gpu=4,gres/gpu:a100=3,gres/gpu:v100=1")[0]
    assert (r.account, r.state, r.job.num_gpus) == ("(none)", "CANCELLED", 4)  # the total, not the last typed entry
    r = _one(tmp_path, "8|u|a|p|2024-03-04T09:00:00|2024-03-04T09:00:00|2024-03-04T09:10:00|600|COMPLETED|"
                       "gres/gpu:a100=2,gres/gpu:v100=1")[0]
    assert r.job.num_gpus == 3  # typed entries only: their sum
    assert read_sacct(SAMPLE, tz="utc").jobs == read_sacct(SAMPLE).jobs


def test_run_time_is_elapsed_raw_when_given_else_end_minus_start(tmp_path):
    suspended = "9|u|a|p|2024-03-04T09:00:00|2024-03-04T09:00:00|2024-03-04T10:00:00|{}|COMPLETED|gres/gpu=1"
    assert _one(tmp_path, suspended.format(1800))[0].job.duration == 1800  # 30 min of the hour suspended
    assert _one(tmp_path, suspended.format(""))[0].job.duration == 3600
    no_column = "|".join(c for i, c in enumerate(suspended.format(0).split("|")) if i != 7)
    assert _one(tmp_path, no_column, LINES[0].replace("|ElapsedRaw", ""))[0].job.duration == 3600
    instant = "10|u|a|p|2024-03-04T09:00:00|2024-03-04T09:00:00|2024-03-04T09:00:00|0|FAILED|gres/gpu=1"
    assert _one(tmp_path, instant)[0].job.duration == 1.0  # ended as it started: a one-second job


def test_every_skipped_row_is_counted_wherever_it_is(tmp_path):
    running = "20|u|a|p|2024-03-04T09:00:00|2024-03-04T09:05:00|Unknown|300|RUNNING|gres/gpu=1"
    cpu = "21|u|a|p|2024-03-04T09:00:00|2024-03-04T09:05:00|2024-03-04T09:06:00|60|COMPLETED|cpu=2"
    p = tmp_path / "mixed.sacct"
    p.write_text("\n".join([LINES[0], running, cpu, running.replace("20|", "22|"), cpu.replace("21|", "23|"),
                            LINES[1]]) + "\n")
    h = read_sacct(p)
    assert [r.job.job_id for r in h.jobs] == ["100"]
    assert h.skipped == {"not ended when exported": 2, "no GPUs (CPU-only)": 2}


def test_an_empty_file_and_a_bar_separated_file_of_another_kind(tmp_path):
    empty = tmp_path / "empty.sacct"
    empty.write_text("\n\n")
    with pytest.raises(TraceError, match=r"^empty.sacct:1: header: the file is empty$"):
        read_sacct(empty)
    other = tmp_path / "other.csv"
    other.write_text("a|b\n1|2\n")  # bars, but no JobID: not sacct's
    with pytest.raises(TraceError, match=r"^other.csv:1: header: unrecognised trace format"):
        load_trace(str(other))
