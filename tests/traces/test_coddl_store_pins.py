"""Hand-computed pins of ``traces/coddl_store.py``: which stored jobs are replayed, which are
counted as skipped and why (each reason counted per job, a job after a skipped one still read), the
work a job did on its own model's curve, and the messages that say why nothing can be replayed."""

from __future__ import annotations

from pathlib import Path

import pytest

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.models import runtime_curves
from coddl.runtime.store import ProgressUpdate, Store
from coddl.traces.coddl_store import read_store
from coddl.traces.model import TraceError

SPEC = {"name": "j", "entrypoint": "m:f", "steps": 100, "min_gpus": 1, "max_gpus": 2}


def _err(fn, *a) -> str:
    with pytest.raises(TraceError) as e:
        fn(*a)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'coddl.db'}"


def _ran(store: Store, job_id: int, at: float, gpus: tuple[int, ...], samples, end: float,
         status: JobStatus = JobStatus.FINISHED) -> None:
    """Start ``job_id`` at ``at`` on ``gpus``, record ``samples`` (step, world size, steps/s), end it."""
    store.record_plan([Action(ActionKind.START, str(job_id), (), gpus)], at=at)
    store.record_progress([ProgressUpdate(job_id, at + 1 + i, step, world, rate, None)
                           for i, (step, world, rate) in enumerate(samples)])
    store.finish(job_id, status, end)


def test_each_skipped_job_is_counted_and_the_jobs_after_it_are_still_read(tmp_path: Path):
    """Two jobs per reason, each followed by a job that ran: the counts are 2 each, and the five jobs
    that ran (one after every skipped pair, oldest first as the store lists them) are all replayed.
    A stored spec this version refuses even as stored (no steps, no command) is unreadable; one whose
    name only today's submission rule refuses ("old name!") is read as stored."""
    store = Store.for_state_dir(tmp_path)
    ok, t = [], None

    def good(name: str, spec: dict | None = None) -> None:
        j = store.add_job(name, "alice", spec or {**SPEC, "name": name}, 100)
        ok.append(j.id)

    for i in range(2):  # never started
        store.add_job(f"n{i}", "bob", {**SPEC, "name": f"n{i}"}, 100)
    good("g0")
    unfinished = [store.add_job(f"u{i}", "bob", {**SPEC, "name": f"u{i}"}, 100).id for i in range(2)]
    good("g1")
    unreadable = [store.add_job(f"r{i}", "bob", {"name": f"r{i}"}, 100).id for i in range(2)]
    good("g2")
    silent = [store.add_job(f"s{i}", "bob", {**SPEC, "name": f"s{i}"}, 100).id for i in range(2)]
    good("g3")
    good("old name!", {**SPEC, "name": "old name!"})
    t = store.get_job(ok[0]).submitted_at
    for k, jid in enumerate(unfinished):
        store.record_plan([Action(ActionKind.START, str(jid), (), (k,))], at=t + 1)
    for jid in unreadable + silent:
        _ran(store, jid, t + 2, (0,), [], t + 3)
    for k, jid in enumerate(ok):
        _ran(store, jid, t + 10 * k, (0,), [(10, 1, 2.0)], t + 10 * k + 5)
    store.close()

    h = read_store(_url(tmp_path), runtime_curves())
    assert h.rows == 13
    assert h.skipped == {"never started": 2, "not ended yet": 2, "no progress recorded": 2,
                         "a stored spec this version cannot read": 2}
    assert [r.job.job_id for r in h.jobs] == [f"coddl-{j}" for j in ok]


def test_work_is_measured_on_the_jobs_own_model_curve(tmp_path: Path):
    """A Resnet50Model128 job (curve 2.10537397 steps/s on 2 GPUs) that ran 30 steps at 0.5 steps/s on
    2 GPUs (below one step a second, still a rate) did 30 / (0.5 / 2.10537397) = 126.32 steps of
    its curve; one that did a single step at 1 step/s on 1 GPU of the default curve (1.0 there) did 1."""
    curves = runtime_curves()
    m = curves.index["Resnet50Model128"]
    assert curves.rate[m, 2] == pytest.approx(2.10537397)
    store = Store.for_state_dir(tmp_path)
    a = store.add_job("a", "alice", {**SPEC, "name": "a", "model": "Resnet50Model128"}, 100)
    b = store.add_job("b", "bob", {**SPEC, "name": "b"}, 100)
    t = a.submitted_at
    _ran(store, a.id, t + 1, (0, 1), [(30, 2, 0.5)], t + 61)
    _ran(store, b.id, t + 70, (0,), [(1, 1, 1.0)], t + 71)
    store.close()

    ra, rb = read_store(_url(tmp_path), curves).jobs
    assert ra.job.model == "Resnet50Model128"
    assert ra.job.steps == pytest.approx(30 / (0.5 / 2.10537397))
    assert ra.gpu_seconds == pytest.approx(2 * 60)
    assert rb.job.model == "default" and rb.job.steps == pytest.approx(1.0)


def test_a_job_needs_both_steps_done_and_a_positive_rate(tmp_path: Path):
    """Job a reported a rate (2 steps/s) but no step done; job b did 10 steps but only ever reported a
    rate of 0 (and a sample on no GPU): neither has a measurable work, both are skipped, so nothing is
    left to replay and the message says why."""
    store = Store.for_state_dir(tmp_path)
    a = store.add_job("a", "alice", {**SPEC, "name": "a"}, 100)
    b = store.add_job("b", "bob", {**SPEC, "name": "b"}, 100)
    t = a.submitted_at
    _ran(store, a.id, t + 1, (0,), [(0, 1, 2.0)], t + 5)
    _ran(store, b.id, t + 6, (0,), [(10, 1, 0.0), (10, 0, 3.0)], t + 9)
    store.close()
    url = _url(tmp_path)
    assert _err(read_store, url, runtime_curves()) == f"{url}: no job to replay (2 no progress recorded)"


def test_the_message_lists_every_reason_nothing_was_replayed(tmp_path: Path):
    store = Store.for_state_dir(tmp_path)
    for i in range(2):
        store.add_job(f"n{i}", "bob", {**SPEC, "name": f"n{i}"}, 100)
    u = store.add_job("u", "bob", {**SPEC, "name": "u"}, 100)
    store.record_plan([Action(ActionKind.START, str(u.id), (), (0,))], at=u.submitted_at + 1)
    store.close()
    url = _url(tmp_path)
    assert _err(read_store, url, runtime_curves()) == \
        f"{url}: no job to replay (2 never started, 1 not ended yet)"


def test_a_store_with_no_jobs_says_so(tmp_path: Path):
    Store.for_state_dir(tmp_path).close()
    url = _url(tmp_path)
    assert _err(read_store, url, runtime_curves()) == f"{url}: no job to replay (no jobs)"


def test_a_job_marked_ended_without_an_end_time_is_not_replayed(tmp_path: Path):
    """A row the store did not write through ``finish`` (status set by hand, or by an interrupted
    older version) that says "finished" with no end time is counted as not ended, not replayed with
    no end; likewise a running row that carries an end time."""
    from sqlalchemy import update

    from coddl.runtime.store.schema import JobRow

    store = Store.for_state_dir(tmp_path)
    a = store.add_job("a", "alice", {**SPEC, "name": "a"}, 100)
    b = store.add_job("b", "bob", {**SPEC, "name": "b"}, 100)
    t = a.submitted_at
    _ran(store, a.id, t + 1, (0,), [(10, 1, 2.0)], t + 5)
    _ran(store, b.id, t + 6, (0,), [(10, 1, 2.0)], t + 9)
    with store.transaction() as s:
        s.execute(update(JobRow).where(JobRow.id == a.id).values(finished_at=None))
        s.execute(update(JobRow).where(JobRow.id == b.id).values(status=JobStatus.RUNNING.value))
    store.close()
    url = _url(tmp_path)
    assert _err(read_store, url, runtime_curves()) == f"{url}: no job to replay (2 not ended yet)"


def test_every_job_of_a_store_larger_than_a_page_is_read(tmp_path: Path):
    """1001 jobs (more than the store's default page of 1000 and than any small limit): all counted."""
    from coddl.runtime.store.schema import EventRow, JobRow

    store = Store.for_state_dir(tmp_path)
    with store.transaction() as s:
        rows = [JobRow(name=f"n{i}", owner="bob", spec={**SPEC, "name": f"n{i}"}, status="queued",
                       admitted=False, cancel_requested=False, submitted_at=1.0 + i, total_steps=100,
                       steps_done=0, share=0, resizes=0) for i in range(1001)]
        s.add_all(rows)
        s.flush()
        s.add_all([EventRow(job_id=r.id, at=r.submitted_at, kind="submitted") for r in rows])
    store.close()
    url = _url(tmp_path)
    assert _err(read_store, url, runtime_curves()) == f"{url}: no job to replay (1001 never started)"


def test_a_store_that_cannot_be_opened_gives_its_reason_on_one_line_cut_at_200(monkeypatch):
    """The reason is the opening error's text with its blanks and line breaks collapsed to single
    spaces, cut at 200 characters."""
    import coddl.runtime.store as store_module

    reason = "unable to open\n   database file: " + "x" * 300

    def refuse(url):
        raise OSError(reason)

    monkeypatch.setattr(store_module, "Store", refuse)
    shown = ("unable to open database file: " + "x" * 300)[:200]
    assert _err(read_store, "sqlite:////nowhere/coddl.db", runtime_curves()) == \
        f"sqlite:////nowhere/coddl.db: cannot open the coddl store ({shown})"


def test_a_job_whose_plan_events_are_missing_is_replayed_with_no_gpu_time(tmp_path: Path):
    """A row marked started and finished by hand (its planned and end events lost, say a store restored
    from a partial backup) still has its progress: it is replayed with its work, and no GPU time held."""
    from sqlalchemy import update

    from coddl.runtime.store.schema import JobRow

    store = Store.for_state_dir(tmp_path)
    a = store.add_job("a", "alice", {**SPEC, "name": "a"}, 100)
    t = a.submitted_at
    store.record_progress([ProgressUpdate(a.id, t + 2, 20, 1, 4.0, None)])
    with store.transaction() as s:
        s.execute(update(JobRow).where(JobRow.id == a.id).values(status=JobStatus.FINISHED.value, started_at=t + 1,
                                                                 finished_at=t + 6))
    store.close()
    (r,) = read_store(_url(tmp_path), runtime_curves()).jobs
    assert (r.start, r.end, r.gpu_seconds, r.state) == (t + 1, t + 6, 0.0, "finished")
    assert r.job.steps == pytest.approx(20 / 4.0)  # default curve: 1 step/s on one GPU
