"""Pins of the store's behaviour on a real SQLite database, column by column, with hand-computed
expectations: what each write leaves in the tables, what each read returns, and what a restarted
controller gets back (``recover``: every job it hands back is admitted, keeps its progress, its first
start and its attained service). Raw columns the views do not show are read with ``sqlite3``."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.exc import IntegrityError

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.store import (
    MAX_ID,
    LastAdmin,
    ProgressUpdate,
    Store,
    TokenRow,
    User,
    database_url,
    digest,
    sqlite_url,
)
from coddl.runtime.store.connection import _decode_or_replace, _json_or_placeholder
from coddl.runtime.store.views import EventView, JobView, TokenView, event_view, job_view, token_view


@pytest.fixture
def store(tmp_path: Path):
    s = Store.for_state_dir(tmp_path)
    yield s
    s.close()


def raw(tmp_path: Path) -> sqlite3.Connection:
    """The same database through sqlite3 itself (autocommit: no transaction held between statements)."""
    return sqlite3.connect(tmp_path / "coddl.db", isolation_level=None, timeout=0)


def job(store: Store, name: str = "j", owner: str = "ann", steps: int = 100) -> int:
    return store.add_job(name, owner, {"name": name}, total_steps=steps).id


def start(jid: int, gpus: tuple[int, ...], cores: tuple[int, ...] = ()) -> Action:
    return Action(ActionKind.START, str(jid), (), gpus, cores=cores)


# ---------------------------------------------------------------------------------------- submissions
def test_a_submission_is_queued_unadmitted_with_one_event(store, tmp_path):
    before = time.time()
    v = store.add_job("train", "ann", {"name": "train", "lr": 0.1}, total_steps=500, message="waiting")
    after = time.time()
    assert (v.name, v.owner, v.spec, v.status, v.cancel_requested) == \
        ("train", "ann", {"name": "train", "lr": 0.1}, "queued", False)
    assert (v.started_at, v.finished_at, v.total_steps, v.steps_done, v.loss, v.steps_per_s) == \
        (None, None, 500, 0, None, None)
    assert (v.share, v.resizes, v.message, v.gpus, v.workers, v.attained_service) == (0, 0, "waiting", (), (), 0.0)
    assert before <= v.submitted_at <= after
    assert store.get_job(v.id) == v
    assert [j.id for j in store.unadmitted()] == [v.id]
    [e] = store.events(v.id)
    assert e == EventView(v.id, v.submitted_at, "submitted", None, None, None, None, "by ann")
    row = raw(tmp_path).execute("SELECT admitted, cancel_requested, attained_service FROM jobs").fetchone()
    assert row == (0, 0, 0.0)


def test_get_job_answers_ids_1_to_max_id_only(store, tmp_path):
    a = job(store)
    db = raw(tmp_path)
    # rows at the edges of the id range, written outside coddl: id MAX_ID is a job, 0 is none
    db.execute("INSERT INTO jobs (id, name, owner, spec, status, admitted, cancel_requested, submitted_at, "
               "total_steps, steps_done, share, resizes, attained_service) "
               "SELECT ?, name, owner, spec, status, admitted, cancel_requested, submitted_at, total_steps, "
               "steps_done, share, resizes, attained_service FROM jobs WHERE id = ?", (MAX_ID, a))
    db.execute("INSERT INTO jobs (id, name, owner, spec, status, admitted, cancel_requested, submitted_at, "
               "total_steps, steps_done, share, resizes, attained_service) "
               "SELECT 0, name, owner, spec, status, admitted, cancel_requested, submitted_at, total_steps, "
               "steps_done, share, resizes, attained_service FROM jobs WHERE id = ?", (a,))
    assert store.get_job(MAX_ID).id == MAX_ID
    assert store.get_job(0) is None and store.get_job(-1) is None and store.get_job(MAX_ID + 1) is None
    assert store.get_job(a).id == a and store.get_job(a + 1) is None


def test_list_jobs_pages_newest_first_shown_oldest_first_with_filters(store):
    a, b, c, d = job(store, "a", "ann"), job(store, "b", "bob"), job(store, "c", "ann"), job(store, "d", "ann")
    store.record_plan([start(b, (0, 1))], at=5.0)
    store.record_workers(b, [WorkerRecord(0, 40, started=1.5)])
    store.record_service({b: 7.5})
    store.finish(d, JobStatus.CANCELLED, 6.0)
    assert [j.id for j in store.list_jobs()] == [a, b, c, d]
    assert [j.id for j in store.list_jobs(limit=2)] == [c, d]  # the newest two, oldest first
    assert [j.id for j in store.list_jobs(limit=2, before=c)] == [a, b]  # the page before
    assert [j.id for j in store.list_jobs(owner="ann")] == [a, c, d]
    assert [j.id for j in store.list_jobs(statuses=("queued", "cancelled"))] == [a, c, d]
    assert [j.id for j in store.list_jobs(owner="ann", statuses=("queued",), before=d, limit=1)] == [c]
    assert store.list_jobs() == [store.get_job(j) for j in (a, b, c, d)]
    jb = store.list_jobs(owner="bob")[0]
    assert (jb.gpus, jb.workers, jb.attained_service, jb.status, jb.share) == \
        ((0, 1), (WorkerRecord(0, 40, started=1.5),), 7.5, "running", 2)
    assert store.list_jobs(owner="nobody") == []


def test_a_cancel_request_is_recorded_once_and_never_for_an_ended_job(store):
    a, b = job(store, "a"), job(store, "b")
    store.finish(b, JobStatus.FINISHED, 3.0)
    v = store.request_cancel(a, "root")
    assert v.cancel_requested and v.status == "queued"
    again = store.request_cancel(a, "bob")
    assert again.cancel_requested
    assert [(e.kind, e.detail) for e in store.events(a)][1:] == [("cancel-requested", "by root")]
    assert not store.request_cancel(b, "root").cancel_requested
    assert "cancel-requested" not in [e.kind for e in store.events(b)]
    # the controller sees a request only for a job it has admitted and that has not ended
    assert store.cancel_requests() == []
    store.mark_admitted([a])
    assert store.cancel_requests() == [a]
    store.finish(a, JobStatus.CANCELLED, 4.0)
    assert store.cancel_requests() == []


def test_a_message_changes_while_the_job_runs_and_stays_once_it_ended(store):
    a, b = job(store, "a"), job(store, "b")
    store.set_message(a, "held: quota")
    store.finish(b, JobStatus.FAILED, 2.0, "boom")
    store.set_message(b, "held: quota")
    assert (store.get_job(a).message, store.get_job(b).message) == ("held: quota", "boom")
    store.set_message(a, None)
    assert store.get_job(a).message is None


def test_counts_holders_and_the_oldest_waiting_job(store):
    assert store.oldest_queued() is None and store.counts() == {} and store.holders() == []
    a, b, c = job(store, "a"), job(store, "b"), job(store, "c")
    sub = {j: store.get_job(j).submitted_at for j in (a, b, c)}
    assert store.oldest_queued() == sub[a]
    store.record_plan([start(c, (3,)), start(a, (0, 1))], at=1.0)
    assert store.oldest_queued() == sub[b]
    assert [(h.id, h.gpus) for h in store.holders()] == [(a, (0, 1)), (c, (3,))]
    assert store.counts() == {"running": 2, "queued": 1}
    store.finish(b, JobStatus.FAILED, 2.0)
    assert store.oldest_queued() is None
    assert store.counts() == {"running": 2, "failed": 1}


def test_admission_and_what_is_unfinished(store):
    a, b, c = job(store, "a"), job(store, "b"), job(store, "c")
    store.mark_admitted([])  # nothing to do
    assert [j.id for j in store.unadmitted()] == [a, b, c]
    store.mark_admitted([a, c])
    assert [j.id for j in store.unadmitted()] == [b]
    store.finish(b, JobStatus.FAILED, 1.0)  # a job that ends before admission is not taken in later
    assert store.unadmitted() == []
    assert [j.id for j in store.unfinished()] == [a, c]


# ---------------------------------------------------------------------------------------- the ledger
def test_a_plan_writes_allocations_cores_states_and_events(store, tmp_path):
    a, b = job(store, "a"), job(store, "b")
    store.record_plan([start(a, (0, 1), cores=(0, 1, 2))], at=10.0)
    db = raw(tmp_path)
    alloc = lambda j: db.execute("SELECT gpus, cores, workers, updated_at FROM allocations WHERE job_id = ?",  # noqa: E731
                                 (j,)).fetchone()
    assert alloc(a) == ("[0, 1]", "[0, 1, 2]", "[]", 10.0)
    store.record_workers(a, [WorkerRecord(0, 5)])
    store.record_plan([Action(ActionKind.GROW, str(a), (0, 1), (0, 1, 2, 3), cores=(4,))], at=11.0)
    assert alloc(a) == ("[0, 1, 2, 3]", "[4]", '[{"slot": 0, "pid": 5}]', 11.0)  # the workers stay
    ja = store.get_job(a)
    assert (ja.status, ja.share, ja.resizes, ja.started_at) == ("running", 4, 1, 10.0)
    store.record_plan([Action(ActionKind.RECORE, str(a), (0, 1, 2, 3), (0, 1, 2, 3), cores=(5,)),
                       Action(ActionKind.MIGRATE, str(a), (0, 1, 2, 3), (4, 5, 6, 7)),
                       Action(ActionKind.COTENANTS, str(a), (4, 5, 6, 7), (4, 5, 6, 7))], at=12.0)
    assert store.get_job(a).resizes == 3  # the cotenants change moves nothing
    store.record_plan([Action(ActionKind.SUSPEND, str(a), (4, 5, 6, 7), ())], at=13.0)
    ja = store.get_job(a)
    assert (ja.status, ja.share, ja.resizes, ja.gpus, ja.started_at) == ("suspended", 0, 3, (), 10.0)
    assert alloc(a) is None
    store.record_plan([Action(ActionKind.RESUME, str(a), (), (2,))], at=14.0)
    ja = store.get_job(a)
    assert (ja.status, ja.share, ja.started_at, ja.gpus) == ("running", 1, 10.0, (2,))  # the first start stays
    assert store.get_job(b).status == "queued"
    planned = [(e.at, e.kind, e.action, e.gpus_before, e.gpus_after, e.latency_s, e.detail)
               for e in store.events(a)[1:]]
    assert planned == [
        (10.0, "planned", "start", (), (0, 1), None, None),
        (11.0, "planned", "grow", (0, 1), (0, 1, 2, 3), None, None),
        (12.0, "planned", "recore", (0, 1, 2, 3), (0, 1, 2, 3), None, None),
        (12.0, "planned", "migrate", (0, 1, 2, 3), (4, 5, 6, 7), None, None),
        (12.0, "planned", "cotenants", (4, 5, 6, 7), (4, 5, 6, 7), None, None),
        (13.0, "planned", "suspend", (4, 5, 6, 7), (), None, None),
        (14.0, "planned", "resume", (), (2,), None, None),
    ]


def test_a_first_start_is_never_overwritten(store):
    a = job(store)
    store.record_plan([start(a, (0,))], at=3.0)
    store.record_plan([start(a, (1,))], at=9.0)  # a second start (after a recovery): still the first time
    assert store.get_job(a).started_at == 3.0


def test_applied_events_workers_and_plain_events(store):
    a, b = job(store, "a"), job(store, "b")
    store.record_plan([start(a, (0,))], at=1.0)
    store.record_applied(a, "start", (0,), 0.25, at=1.5)
    store.record_event(a, "worker-lost", 2.0, "slot 0")
    store.record_event(a, "note", 2.5)
    assert [(e.at, e.kind, e.action, e.gpus_before, e.gpus_after, e.latency_s, e.detail) for e in store.events(a)][2:] \
        == [(1.5, "applied", "start", None, (0,), 0.25, None), (2.0, "worker-lost", None, None, None, None, "slot 0"),
            (2.5, "note", None, None, None, None, None)]
    store.record_workers(b, [WorkerRecord(0, 9)])  # b holds nothing: no allocation is created
    assert store.get_job(b).workers == () and store.allocations() == {a: (0,)}
    store.record_workers(a, [WorkerRecord(0, 9, node="n1"), WorkerRecord(1, 10, started=4.0)])
    assert store.get_job(a).workers == (WorkerRecord(0, 9, node="n1"), WorkerRecord(1, 10, started=4.0))


def test_attained_service_only_grows(store):
    a, b, c = job(store, "a"), job(store, "b"), job(store, "c")
    store.record_service({})
    store.record_service({a: 0.5, b: 0})
    assert [store.get_job(j).attained_service for j in (a, b, c)] == [0.5, 0.0, 0.0]
    store.record_service({a: 0.25, b: 3, c: 2.0})  # a's is lower than stored: kept
    assert [store.get_job(j).attained_service for j in (a, b, c)] == [0.5, 3.0, 2.0]
    store.record_service({a: 10.0})
    assert [store.get_job(j).attained_service for j in (a, b, c)] == [10.0, 3.0, 2.0]
    assert isinstance(store.get_job(b).attained_service, float)


def test_progress_never_goes_back_and_keeps_the_last_loss(store):
    a, b = job(store, "a"), job(store, "b")
    store.record_progress([])
    store.record_progress([ProgressUpdate(a, 1.0, 50, 2, 10.0, 0.9),
                           ProgressUpdate(b, 1.0, 7, 1, 3.0, 2.0, sample=False)])
    # a restarted worker reports an older step (its checkpoint): the job's progress stays at 50
    store.record_progress([ProgressUpdate(a, 2.0, 40, 1, 4.0, None)])
    ja, jb = store.get_job(a), store.get_job(b)
    assert (ja.steps_done, ja.steps_per_s, ja.loss) == (50, 4.0, 0.9)
    assert (jb.steps_done, jb.steps_per_s, jb.loss) == (7, 3.0, 2.0)
    store.record_progress([ProgressUpdate(a, 3.0, 51, 1, 5.0, 0.5)])
    assert (store.get_job(a).steps_done, store.get_job(a).loss) == (51, 0.5)
    assert [(s.at, s.step, s.world_size, s.steps_per_s, s.loss) for s in store.samples(a)] == \
        [(1.0, 50, 2, 10.0, 0.9), (2.0, 40, 1, 4.0, None), (3.0, 51, 1, 5.0, 0.5)]
    assert store.samples(b) == []  # not sampled


def test_finish_releases_the_gpus_and_keeps_an_earlier_message_unless_given_one(store):
    a, b, c = job(store, "a"), job(store, "b"), job(store, "c")
    store.record_plan([start(a, (0, 1)), start(b, (2,))], at=1.0)
    store.set_message(b, "slow")
    store.finish(a, JobStatus.FINISHED, 5.0)
    store.finish(b, JobStatus.FAILED, 6.0, "")
    store.finish(c, JobStatus.CANCELLED, 7.0, "by ann")
    ja, jb, jc = store.get_job(a), store.get_job(b), store.get_job(c)
    assert (ja.status, ja.finished_at, ja.share, ja.gpus, ja.message) == ("finished", 5.0, 0, (), None)
    assert (jb.status, jb.finished_at, jb.share, jb.message) == ("failed", 6.0, 0, "slow")
    assert (jc.status, jc.finished_at, jc.message) == ("cancelled", 7.0, "by ann")
    assert store.allocations() == {}
    assert [(e.at, e.kind, e.detail) for e in store.events(c)][-1] == (7.0, "cancelled", "by ann")
    assert [(e.at, e.kind, e.detail) for e in store.events(b)][-1] == (6.0, "failed", "")
    assert store.unadmitted() == []  # c ended before the controller took it in: never admitted later


# ---------------------------------------------------------------------------------------- recovery
def test_recovery_hands_back_every_unfinished_job_admitted_with_its_history(tmp_path):
    store = Store.for_state_dir(tmp_path)
    run, susp, queued, fresh, done = (job(store, n) for n in ("run", "susp", "queued", "fresh", "done"))
    store.mark_admitted([run, susp, queued, done])
    store.record_plan([start(run, (0, 1)), start(susp, (2,)), start(done, (3,))], at=100.0)
    store.record_workers(run, [WorkerRecord(0, 11, started=1.0), WorkerRecord(1, 12, started=1.0)])
    store.record_workers(susp, [WorkerRecord(0, 13, node="n2")])
    store.record_progress([ProgressUpdate(run, 150.0, 70, 2, 1.0, 0.3), ProgressUpdate(susp, 150.0, 20, 1, 1.0, 0.4)])
    store.record_service({run: 100.0, susp: 50.0})
    store.record_plan([Action(ActionKind.SUSPEND, str(susp), (2,), ())], at=160.0)
    store.record_plan([Action(ActionKind.GROW, str(run), (0, 1), (0, 1, 4))], at=170.0)
    store.finish(done, JobStatus.FINISHED, 180.0)
    store.close()

    again = Store.for_state_dir(tmp_path)  # the controller's next incarnation
    jobs, workers = again.recover(at=200.0)
    assert [j.id for j in jobs] == [run, susp, queued, fresh]
    assert workers == [WorkerRecord(0, 11, started=1.0), WorkerRecord(1, 12, started=1.0)]  # susp's went with it
    by = {j.id: j for j in jobs}
    # what it hands back is what the store now holds: suspended, no share, no GPUs
    for j in jobs:
        assert j == again.get_job(j.id)
    assert [(by[j].status, by[j].share, by[j].gpus) for j in (run, susp, queued, fresh)] == \
        [("suspended", 0, ()), ("suspended", 0, ()), ("queued", 0, ()), ("queued", 0, ())]
    # progress, first start, resizes and attained service survive the restart
    assert [(by[j].steps_done, by[j].started_at, by[j].resizes, by[j].attained_service) for j in (run, susp)] == \
        [(70, 100.0, 1, 100.0), (20, 100.0, 0, 50.0)]
    assert (by[queued].started_at, by[queued].attained_service) == (None, 0.0)
    assert again.allocations() == {}
    assert [(e.at, e.kind, e.detail) for e in again.events(run)][-1] == (200.0, "recovered", "was running at step 70")
    assert [(e.at, e.kind, e.detail) for e in again.events(susp)][-1] == (200.0, "recovered", "was suspended at step 20")
    assert "recovered" not in [e.kind for e in again.events(queued) + again.events(fresh) + again.events(done)]
    # taken over means admitted: the next ingest must not admit them (a second time)
    assert again.unadmitted() == []
    # a second restart finds the same jobs, nothing to reap, and loses nothing
    jobs2, workers2 = again.recover(at=300.0)
    assert [j.id for j in jobs2] == [run, susp, queued, fresh] and workers2 == []
    assert [(j.steps_done, j.started_at, j.attained_service) for j in jobs2[:2]] == [(70, 100.0, 100.0),
                                                                                    (20, 100.0, 50.0)]
    # resumed after the restart: the first start and the service carry on from where they were
    again.record_plan([Action(ActionKind.RESUME, str(run), (), (0,))], at=310.0)
    again.record_service({run: 90.0})  # the new controller's tally lags: never below what was stored
    assert (again.get_job(run).started_at, again.get_job(run).attained_service) == (100.0, 100.0)
    again.close()


def test_recovery_of_an_empty_store(store):
    assert store.recover(at=1.0) == ([], [])


# ---------------------------------------------------------------------------------------- history
def test_profiles_are_saved_replaced_and_read_as_copies(store):
    a = job(store)
    assert store.profile(a) is None
    store.save_profile(a, {"rows": {"1": 2.0}}, at=1.0)
    store.save_profile(a, {"rows": {"1": 3.0}, "belief": [1]}, at=2.0)
    p = store.profile(a)
    assert p == {"rows": {"1": 3.0}, "belief": [1]}
    p["rows"]["1"] = 0.0
    assert store.profile(a) == {"rows": {"1": 3.0}, "belief": [1]}


def test_the_event_log_filters_and_pages(store):
    assert store.last_event_id() == 0 and store.event_log() == []
    a, b = job(store, "a", "ann"), job(store, "b", "bob")  # events 1, 2
    store.record_plan([start(a, (0,))], at=10.0)  # 3
    store.finish(a, JobStatus.FINISHED, 20.0)  # 4
    store.record_event(b, "note", 25.0)  # 5
    assert store.last_event_id() == 5
    log = store.event_log()
    assert [(e.id, e.event.job_id, e.event.kind) for e in log] == \
        [(1, a, "submitted"), (2, b, "submitted"), (3, a, "planned"), (4, a, "finished"), (5, b, "note")]
    ja, jb = store.get_job(a), store.get_job(b)
    assert (log[3].owner, log[3].submitted_at, log[3].started_at, log[3].event) == \
        ("ann", ja.submitted_at, 10.0, store.events(a)[2])
    assert (log[4].owner, log[4].submitted_at, log[4].started_at) == ("bob", jb.submitted_at, None)
    assert [e.id for e in store.event_log(after=3)] == [4, 5]
    assert [e.id for e in store.event_log(limit=2)] == [1, 2]
    assert [e.id for e in store.event_log(after=1, limit=2)] == [2, 3]
    assert [e.id for e in store.event_log(alive_since=20.0)] == [1, 2, 3, 4, 5]  # a ended at 20.0: still alive
    assert [e.id for e in store.event_log(alive_since=20.5)] == [2, 5]
    assert [e.id for e in store.event_log(kinds=["submitted", "note"])] == [1, 2, 5]
    assert [e.id for e in store.event_log(kinds=[])] == []
    assert [e.id for e in store.event_log(owner="bob")] == [2, 5]
    assert [e.id for e in store.event_log(1, alive_since=30.0, kinds=("submitted",), owner="bob")] == [2]


def test_samples_since_a_time_by_job(store):
    a, b, c = job(store, "a"), job(store, "b"), job(store, "c")
    store.record_progress([ProgressUpdate(a, 1.0, 1, 1, 1.0, None), ProgressUpdate(b, 2.0, 2, 2, 2.0, 0.5),
                           ProgressUpdate(a, 3.0, 3, 1, 3.0, 0.25)])
    assert store.samples_since(0.0, []) == {}
    got = store.samples_since(2.0, [a, c])
    assert list(got) == [a, c]
    assert [(s.at, s.step, s.world_size, s.steps_per_s, s.loss) for s in got[a]] == [(3.0, 3, 1, 3.0, 0.25)]
    assert got[c] == []
    assert [s.step for s in store.samples_since(1.0, [a, b])[a]] == [1, 3]
    assert [(s.at, s.step, s.world_size, s.steps_per_s, s.loss) for s in store.samples_since(1.0, [b])[b]] == \
        [(2.0, 2, 2, 2.0, 0.5)]


# ---------------------------------------------------------------------------------------- meta, queues
def test_the_epoch_is_written_once_and_key_values_are_replaced(tmp_path):
    store = Store.for_state_dir(tmp_path)
    assert store.get_meta("epoch") is None
    before = time.time()
    first = store.epoch()
    assert before <= first <= time.time()
    assert store.get_meta("epoch") == repr(first)
    assert store.epoch() == first
    store.set_meta("k", "1")
    store.set_meta("k", "2")
    assert store.get_meta("k") == "2" and store.get_meta("other") is None
    store.close()
    assert Store.for_state_dir(tmp_path).epoch() == first


def test_queues_are_kept_in_order_and_a_failed_change_leaves_them(store):
    assert store.queues() == []
    new = store.update_queues(lambda cur: cur + [("b", {"quota": 2}), ("a", {"quota": 1})])
    assert new == [("b", {"quota": 2}), ("a", {"quota": 1})]
    assert store.queues() == new
    q = store.queues()
    q[0][1]["quota"] = 99  # a caller's copy, not the cache
    assert store.queues() == new
    seen = []

    def bad(cur):
        seen.append(cur)
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.update_queues(bad)
    assert seen == [[("b", {"quota": 2}), ("a", {"quota": 1})]]
    assert store.queues() == new
    store.update_queues(lambda cur: list(reversed(cur)))
    assert store.queues() == [("a", {"quota": 1}), ("b", {"quota": 2})]
    other = Store(store.url)  # another process reads what was committed, in order
    assert other.queues() == [("a", {"quota": 1}), ("b", {"quota": 2})]
    other.close()


class _ChangedWhileRead(Store):
    """A store whose queue read is overtaken by a change committed before the read returns (what a
    request on another thread can do): the stale rows must not be kept."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.during: list = []

    def _read_queues(self):
        rows = super()._read_queues()
        while self.during:
            self.update_queues(self.during.pop())
        return rows


def test_a_queue_read_overtaken_by_a_change_is_not_kept(tmp_path):
    store = _ChangedWhileRead(sqlite_url(tmp_path))
    store.update_queues(lambda cur: [("a", {})])  # one change before: the counter is not at its start
    store.during.append(lambda cur: [("b", {})])
    assert store.queues() == [("a", {})]  # the read began before the change
    assert store.queues() == [("b", {})]  # ... and was not kept
    store.during.append(lambda cur: [("c", {})])
    assert store.queues() == [("b", {})]  # kept: no read runs, so nothing overtakes it
    store.close()


def test_waiting_jobs_by_owner(store):
    a1, a2, a3, b1, b2 = job(store, "a1", "ann"), job(store, "a2", "ann"), job(store, "a3", "ann"), \
        job(store, "b1", "bob"), job(store, "b2", "bob")
    assert store.waiting_by_owner() == {"ann": 3, "bob": 2}
    store.record_plan([start(a1, (0,)), start(b1, (1,))], at=1.0)
    store.record_plan([Action(ActionKind.SUSPEND, str(b1), (1,), ())], at=2.0)
    store.request_cancel(a2, "ann")
    store.finish(b2, JobStatus.FAILED, 3.0)
    assert store.waiting_by_owner() == {"ann": 1, "bob": 1}  # a3 queued; b1 suspended


# ---------------------------------------------------------------------------------------- tokens
def test_tokens_issued_authenticated_expired_and_listed(store):
    t1, v1 = store.issue_token("root", admin=True)
    t2 = store.create_token("ann", expires_at=1000.0)
    t3, v3 = store.issue_token("ann")
    assert (v1.user, v1.admin, v1.expires_at, v1.revoked_at, v1.revoked_by) == ("root", True, None, None, None)
    assert v1.fingerprint == digest(t1)[:8] and len(t1) >= 40 and t1 != t2
    assert digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert abs(v1.created_at - time.time()) < 60
    assert store.authenticate(t1) == store.authenticate(t1, now=1e12) == User("root", True)
    assert store.authenticate(t2, now=999.0) is not None and store.authenticate(t2, now=999.0).admin is False
    assert store.authenticate(t2, now=1000.0) is None  # expires at that instant
    assert store.authenticate(t2) is None  # long expired
    assert store.authenticate("nope") is None
    assert (store.token_state(t2), store.token_state(t3), store.token_state("nope")) == ("expired", "active", None)
    assert [v.user for v in store.list_tokens()] == ["root", "ann", "ann"]
    assert [v.id for v in store.list_tokens("ann")] == [v1.id + 1, v3.id]
    assert store.list_tokens("bob") == []
    assert store.get_token(v3.id) == v3 and store.get_token(v3.id + 1) is None
    assert store.get_token(0) is None and store.get_token(MAX_ID + 1) is None


def test_get_token_answers_ids_up_to_max_id(store, tmp_path):
    _, v = store.issue_token("ann")
    raw(tmp_path).execute("UPDATE tokens SET id = ? WHERE id = ?", (MAX_ID, v.id))
    assert store.get_token(MAX_ID).user == "ann"
    raw(tmp_path).execute("UPDATE tokens SET id = 0 WHERE id = ?", (MAX_ID,))
    assert store.get_token(0) is None


def test_the_last_active_admin_token_cannot_be_revoked(store):
    assert not store.has_admin()
    _, admin = store.issue_token("root", admin=True)
    _, user = store.issue_token("ann")
    _, old = store.issue_token("root", admin=True, expires_at=1.0)  # expired: counts for nothing
    assert store.has_admin()
    with pytest.raises(LastAdmin, match=f"token {admin.id} is the only active admin token"):
        store.revoke_token(admin.id, "root")
    assert store.get_token(admin.id).revoked_at is None
    before = time.time()
    r = store.revoke_token(old.id, "root")  # an expired admin token can go
    assert r.revoked_by == "root" and before <= r.revoked_at <= time.time() and r.state(0.0) == "revoked"
    r = store.revoke_token(user.id, "bob")
    assert (r.revoked_by, r.state(time.time())) == ("bob", "revoked")
    again = store.revoke_token(user.id, "carl")  # already revoked: unchanged
    assert again == r
    _, later = store.issue_token("root", admin=True, expires_at=time.time() + 3600)
    gone = store.revoke_token(admin.id, "root")  # another admin token works now
    assert gone.state(time.time()) == "revoked"
    assert store.has_admin()
    with pytest.raises(LastAdmin):
        store.revoke_token(later.id, "root")


def test_token_views_state_and_json():
    v = TokenView(3, "ann", False, 1.0, 10.0, None, None, "abcd1234")
    assert [v.state(t) for t in (9.0, 10.0, 11.0)] == ["active", "expired", "expired"]
    assert TokenView(3, "ann", False, 1.0, None, None, None, "x").state(1e12) == "active"
    r = TokenView(4, "bob", True, 1.0, 10.0, 5.0, "root", "ffff0000")
    assert r.state(1.0) == "revoked" and r.state(20.0) == "revoked"
    assert v.as_json(9.5) == {"id": 3, "user": "ann", "admin": False, "created_at": 1.0, "expires_at": 10.0,
                              "revoked_at": None, "revoked_by": None, "fingerprint": "abcd1234", "state": "active"}
    assert r.as_json(1.0)["state"] == "revoked" and r.as_json(1.0)["revoked_by"] == "root"
    row = TokenRow(id=7, user="u", digest="0123456789abcdef", admin=True, created_at=2.0, expires_at=None,
                   revoked_at=None, revoked_by=None)
    assert token_view(row) == TokenView(7, "u", True, 2.0, None, None, None, "01234567")


# ---------------------------------------------------------------------------------------- views
def test_job_and_event_views_of_rows(store, tmp_path):
    a = job(store)
    assert store.get_job(a).attained_service == 0.0 and store.list_jobs()[0].attained_service == 0.0
    from coddl.runtime.store import AllocationRow, EventRow, JobRow
    row = JobRow(id=1, name="n", owner="o", spec={}, status="finished", cancel_requested=True, submitted_at=1.0,
                 started_at=2.0, finished_at=3.0, total_steps=4, steps_done=5, loss=0.5, steps_per_s=6.0, share=7,
                 resizes=8, message="m", attained_service=9.0)
    alloc = AllocationRow(job_id=1, gpus=[3, 1], cores=[], workers=[{"slot": 0, "pid": 2}, "bad"], updated_at=0.0)
    v = job_view(row, alloc)
    assert v == JobView(1, "n", "o", {}, "finished", True, 1.0, 2.0, 3.0, 4, 5, 0.5, 6.0, 7, 8, "m", (3, 1),
                        (WorkerRecord(0, 2),), 9.0)
    assert v.terminal
    assert job_view(row).gpus == () and job_view(row).workers == ()
    e = EventRow(job_id=1, at=2.0, kind="k", action="a", gpus_before=[1], gpus_after=[], latency_s=0.5, detail="d")
    assert event_view(e) == EventView(1, 2.0, "k", "a", (1,), (), 0.5, "d")
    e2 = EventRow(job_id=1, at=2.0, kind="k", action=None, gpus_before=None, gpus_after=None)
    assert event_view(e2) == EventView(1, 2.0, "k", None, None, None, None, None)


# ---------------------------------------------------------------------------------------- connection
def test_urls():
    assert sqlite_url(Path("/x/y")) == "sqlite:////x/y/coddl.db"
    assert database_url("postgresql://u@h/d").drivername == "postgresql+psycopg"
    assert database_url("postgresql+psycopg://u@h/d").drivername == "postgresql+psycopg"
    assert database_url("sqlite:///a.db").drivername == "sqlite"


def test_the_sqlite_connections_settings(store, tmp_path):
    assert store.sqlite and not store.postgres and store.url == sqlite_url(tmp_path)
    for engine in (store._read, store._write_engine):
        with engine.connect() as c:
            got = [c.exec_driver_sql(f"PRAGMA {p}").scalar() for p in
                   ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")]
            assert got == ["wal", 1, 1, 30000]
    with pytest.raises(IntegrityError):  # foreign keys are enforced: no event of a job that does not exist
        store.record_event(99, "note", 1.0)


def test_writes_take_the_write_lock_at_once_and_reads_do_not(store, tmp_path):
    job(store)
    other = raw(tmp_path)
    with store.transaction() as s:  # nothing written yet: BEGIN IMMEDIATE already holds the lock
        s.execute(select(TokenRow.id)).all()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    with store._r() as s:  # a read holds no write lock
        s.execute(select(TokenRow.id)).all()
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")


def test_a_write_in_a_transaction_commits_and_a_failure_rolls_it_back(store):
    a = job(store)
    with store.transaction() as s:
        s.execute(text("UPDATE jobs SET name = 'x' WHERE id = :i"), {"i": a})
    assert store.get_job(a).name == "x"
    with pytest.raises(RuntimeError):
        with store.transaction() as s:
            s.execute(text("UPDATE jobs SET name = 'y' WHERE id = :i"), {"i": a})
            raise RuntimeError
    assert store.get_job(a).name == "x"


def test_a_fenced_store_refuses_writes_when_its_fence_raises(store):
    a = job(store)
    calls = []

    class Lost(Exception):
        pass

    def fence(s):
        calls.append(s)
        if len(calls) > 1:
            raise Lost

    fenced = store.fenced(fence)
    assert fenced is not store and store._fence is None
    fenced.record_event(a, "one", 1.0)  # the fence lets the first write through
    with pytest.raises(Lost):
        fenced.record_event(a, "two", 2.0)
    store.record_event(a, "three", 3.0)  # the unfenced store is unaffected
    assert [e.kind for e in store.events(a)] == ["submitted", "one", "three"]
    assert fenced.get_job(a).id == a  # reads are not fenced
    assert len(calls) == 2


def test_damaged_json_and_text_read_as_placeholders(store, tmp_path):
    a, b = job(store, "a"), job(store, "b")
    store.record_plan([start(a, (0,))], at=1.0)
    db = raw(tmp_path)
    db.execute("UPDATE jobs SET spec = ? WHERE id = ?", ("{not json" + "x" * 100, a))
    db.execute("UPDATE allocations SET workers = '[{' WHERE job_id = ?", (a,))
    db.execute("UPDATE jobs SET name = CAST(X'61ff62' AS TEXT) WHERE id = ?", (b,))
    db.execute("UPDATE events SET detail = CAST(X'ff' AS TEXT) WHERE job_id = ?", (b,))
    ja = store.get_job(a)
    assert ja.spec == {"unreadable": ("{not json" + "x" * 100)[:60]} and ja.workers == () and ja.gpus == (0,)
    assert store.get_job(b).name == "a\ufffdb"
    assert [j.name for j in store.list_jobs()] == ["a", "a\ufffdb"]
    assert [j.name for j in store.unadmitted()] == ["a", "a\ufffdb"]
    assert [e.detail for e in store.events(b)] == ["\ufffd"]
    assert store.counts() == {"running": 1, "queued": 1}
    # writes always replace: a restarted controller takes the damaged job over
    jobs, _ = store.recover(at=2.0)
    assert [j.name for j in jobs] == ["a", "a\ufffdb"]
    assert store.get_job(b).name == "a\ufffdb"  # the normal read path works again after the retry
    assert _json_or_placeholder('{"a": 1}') == {"a": 1}
    assert _decode_or_replace(b"a\xffb") == "a\ufffdb"


def test_a_tolerant_read_reraises_what_is_not_a_decoding_error(store, tmp_path):
    job(store)
    raw(tmp_path).execute("DROP TABLE allocations")
    with pytest.raises(Exception, match="no such table"):
        store.get_job(1)
    with pytest.raises(Exception, match="no such table"):
        store.allocations()


def test_tolerant_reads_of_tokens_queues_and_waiting(store, tmp_path):
    store.issue_token("ann")
    store.update_queues(lambda cur: [("q", {"quota": 1})])
    job(store, "a", "ann")
    db = raw(tmp_path)
    db.execute("UPDATE tokens SET user = CAST(X'ff' AS TEXT)")
    db.execute("UPDATE queues SET name = CAST(X'71ff' AS TEXT)")
    db.execute("UPDATE jobs SET owner = CAST(X'ff' AS TEXT)")
    assert [v.user for v in store.list_tokens()] == ["\ufffd"]
    assert Store(store.url).queues() == [("q\ufffd", {"quota": 1})]
    assert store.waiting_by_owner() == {"\ufffd": 1}
    db.execute("INSERT INTO samples (job_id, at, step, world_size, steps_per_s) VALUES (1, 1.0, 1, 1, 1.0)")
    assert [s.step for s in store.samples(1)] == [1]
    assert store.unfinished()[0].owner == "\ufffd"


def test_a_store_opened_from_threads_at_once_and_used_across_threads(tmp_path):
    store = Store.for_state_dir(tmp_path / "new" / "dir")
    a = job(store)
    out = []
    t = threading.Thread(target=lambda: out.append(store.get_job(a).id))
    t.start()
    t.join()
    assert out == [a]
    store.close()
    store.close()  # closing twice is harmless


def test_columns_added_since_are_added_to_an_older_store(tmp_path):
    store = Store.for_state_dir(tmp_path)
    a = job(store)
    store.close()
    db = raw(tmp_path)
    db.execute("ALTER TABLE jobs DROP COLUMN attained_service")
    db.execute("ALTER TABLE tokens DROP COLUMN revoked_by")
    again = Store.for_state_dir(tmp_path)
    cols = {r[1]: (r[2], r[4]) for r in db.execute("PRAGMA table_info(jobs)")}
    assert cols["attained_service"] == ("FLOAT", "0")
    assert {r[1]: r[4] for r in db.execute("PRAGMA table_info(tokens)")}["revoked_by"] is None
    assert again.get_job(a).attained_service == 0.0
    again.record_service({a: 2.0})
    assert again.get_job(a).attained_service == 2.0
    again.close()


def test_text_is_stored_without_nul(store, tmp_path):
    a = job(store)
    store.finish(a, JobStatus.FAILED, 1.0, "x\x00y")
    store.set_meta("k", "a\x00")
    assert raw(tmp_path).execute("SELECT message FROM jobs").fetchone() == ("x\ufffdy",)
    assert store.get_meta("k") == "a\ufffd"
    assert json.loads(raw(tmp_path).execute("SELECT spec FROM jobs").fetchone()[0]) == {"name": "j"}


def test_closing_releases_every_connection(tmp_path):
    store = Store.for_state_dir(tmp_path)
    a = job(store)
    store.record_event(a, "note", 1.0)
    raw(tmp_path).execute("UPDATE events SET detail = CAST(X'ff' AS TEXT) WHERE kind = 'note'")
    assert [e.detail for e in store.events(a)] == ["by ann", "\ufffd"]  # a tolerant retry: a third engine
    assert store._tolerant_engine is not None
    assert (tmp_path / "coddl.db-wal").exists()
    store.close()
    # the last connection to a WAL database removes its log when it closes: none is left open
    assert not (tmp_path / "coddl.db-wal").exists()


def test_reads_keep_sqlites_decoder_and_writes_replace(store):
    assert store.postgres is False and store.sqlite is True
    with store._read.connect() as c:
        assert c.connection.driver_connection.text_factory is str  # only the tolerant retry replaces
    with store._write_engine.connect() as c:
        assert c.connection.driver_connection.text_factory is _decode_or_replace


def test_the_event_log_returns_at_most_ten_thousand_events_by_default(store, tmp_path):
    a = job(store)
    db = raw(tmp_path)
    db.execute("BEGIN")
    db.executemany("INSERT INTO events (job_id, at, kind) VALUES (?, ?, 'note')", [(a, float(i)) for i in range(10_001)])
    db.execute("COMMIT")
    log = store.event_log()
    assert len(log) == 10_000 and log[0].event.kind == "submitted" and log[-1].event.at == 9_998.0
    assert len(store.event_log(limit=20_000)) == 10_002


def reversed_unordered(store: Store) -> None:
    """Make SQLite return rows a query does not order in reverse (its own test aid,
    ``PRAGMA reverse_unordered_selects``): a read that relies on the table's order shows."""
    for engine in (store._read, store._write_engine):
        event.listen(engine, "connect", lambda c, _r: c.execute("PRAGMA reverse_unordered_selects=ON"))
        engine.dispose()


def test_every_list_the_store_returns_is_ordered_by_id(store):
    reversed_unordered(store)
    a, b, c = job(store, "a"), job(store, "b"), job(store, "c")
    store.mark_admitted([a, b, c])
    store.record_progress([ProgressUpdate(j, float(i), i, 1, 1.0, None) for i, j in enumerate((a, b, c, a, b, c))])
    for j in (a, b, c):
        store.record_event(j, "note", 9.0)
        store.request_cancel(j, "ann")
    assert [s.step for s in store.samples(a)] == [0, 3]
    assert {j: [s.step for s in v] for j, v in store.samples_since(0.0, [a, b, c]).items()} == \
        {a: [0, 3], b: [1, 4], c: [2, 5]}
    assert [e.kind for e in store.events(b)] == ["submitted", "note", "cancel-requested"]
    assert [e.id for e in store.event_log()] == list(range(1, 10))
    assert [e.id for e in store.event_log(kinds=["note"], owner="ann", alive_since=0.0)] == [4, 6, 8]
    assert store.cancel_requests() == [a, b, c]
    assert [j.id for j in store.unfinished()] == [a, b, c]
    store.record_plan([start(c, (2,)), start(a, (0,)), start(b, (1,))], at=1.0)
    assert [h.id for h in store.holders()] == [a, b, c]
    assert list(store.allocations()) == [c, b, a]  # (the aid works: this read has no order)
    store.issue_token("x")
    store.issue_token("y")
    assert [t.user for t in store.list_tokens()] == ["x", "y"]
    jobs, _ = store.recover(at=2.0)
    assert [j.id for j in jobs] == [a, b, c]
    store.add_job("d", "ann", {}, 1)
    assert [j.name for j in store.unadmitted()] == ["d"]


def test_queues_are_kept_from_the_last_read_until_this_store_changes_them(tmp_path):
    mine, other = Store.for_state_dir(tmp_path), Store.for_state_dir(tmp_path)
    reversed_unordered(mine)
    mine.update_queues(lambda cur: [("a", {"i": 0}), ("b", {"i": 1}), ("c", {"i": 2})])
    seen = []
    mine.update_queues(lambda cur: seen.append(cur) or cur)  # what a change is given: the queues in order
    assert seen == [[("a", {"i": 0}), ("b", {"i": 1}), ("c", {"i": 2})]]
    assert [n for n, _ in mine.queues()] == ["a", "b", "c"]
    other.update_queues(lambda cur: [("z", {})])  # written behind this store's back (not done while it runs)
    assert [n for n, _ in mine.queues()] == ["a", "b", "c"]  # the kept read
    mine.update_queues(lambda cur: cur + [("y", {})])  # this store's change reads the table itself
    assert mine.queues() == [("z", {}), ("y", {})]
    mine.close()
    other.close()


def test_a_token_is_256_random_bits_and_an_admin_token_can_be_created(store):
    t = store.create_token("root", admin=True)
    assert len(t) == 43 and store.authenticate(t).admin is True  # 32 bytes, URL-safe base64 without padding
    assert store.authenticate(store.create_token("ann")).admin is False


def test_an_admin_token_counts_as_active_until_the_instant_it_expires(store):
    from coddl.runtime.store.tokens import TokenStore

    store.issue_token("root", admin=True, expires_at=1000.0)
    _, gone = store.issue_token("root", admin=True)
    store.issue_token("ann", expires_at=None)
    with store.transaction() as s:
        assert [TokenStore._active_admins(s, t) for t in (999.0, 1000.0)] == [2, 1]
    later = time.time() + 3600.0
    store.issue_token("root", admin=True, expires_at=later)
    store.revoke_token(gone.id, "root")  # a revoked token counts for nothing
    with store.transaction() as s:
        assert [TokenStore._active_admins(s, t) for t in (999.0, 1000.0, later - 1.0, later)] == [2, 1, 1, 0]


def test_opening_a_store_waits_for_another_process_holding_the_database(tmp_path):
    """A connection's first statements (the pragmas) run before ``busy_timeout`` is set: the 30 s
    connect timeout is what makes them wait, not fail, while another process holds the lock."""
    other = sqlite3.connect(tmp_path / "coddl.db", isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE outside (a)")
    other.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(6.0, lambda: other.execute("COMMIT"))
    release.start()
    t0 = time.monotonic()
    store = Store.for_state_dir(tmp_path)
    assert time.monotonic() - t0 >= 5.5
    assert store.get_job(job(store)).status == "queued"
    release.join()
    store.close()
