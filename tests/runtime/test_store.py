"""The store: written before acted on, and what a restarted controller gets back."""

from __future__ import annotations

import sqlite3

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.store import ProgressUpdate, Store


def _job(store: Store, name: str = "j") -> int:
    return store.add_job(name, "ann", {"name": name}, total_steps=100).id


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = Store.for_state_dir(tmp_path)
    _job(store)
    mode = sqlite3.connect(tmp_path / "coddl.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    store.close()


def test_a_plan_is_recorded_with_allocations_states_and_events(tmp_path):
    store = Store.for_state_dir(tmp_path)
    a, b = _job(store, "a"), _job(store, "b")
    store.record_plan([Action(ActionKind.START, str(a), (), (0, 1, 2, 3))], at=1.0)
    store.record_plan([Action(ActionKind.SHRINK, str(a), (0, 1, 2, 3), (0, 1)),
                       Action(ActionKind.START, str(b), (), (2, 3))], at=2.0)
    assert store.allocations() == {a: (0, 1), b: (2, 3)}
    ja = store.get_job(a)
    assert (ja.status, ja.share, ja.resizes, ja.started_at, ja.gpus) == ("running", 2, 1, 1.0, (0, 1))
    planned = [(e.action, e.gpus_before, e.gpus_after) for e in store.events(a) if e.kind == "planned"]
    assert planned == [("start", (), (0, 1, 2, 3)), ("shrink", (0, 1, 2, 3), (0, 1))]
    store.record_plan([Action(ActionKind.SUSPEND, str(b), (2, 3), ())], at=3.0)
    assert store.get_job(b).status == "suspended" and b not in store.allocations()


def test_progress_and_finish(tmp_path):
    store = Store.for_state_dir(tmp_path)
    a = _job(store)
    store.record_plan([Action(ActionKind.START, str(a), (), (0,))], at=1.0)
    store.record_progress([ProgressUpdate(a, 2.0, 40, 1, 10.0, 0.5), ProgressUpdate(a, 3.0, 80, 1, 12.0, None)])
    j = store.get_job(a)
    assert (j.steps_done, j.loss, j.steps_per_s) == (80, 0.5, 12.0)
    assert [s.step for s in store.samples(a)] == [40, 80]
    store.finish(a, JobStatus.FINISHED, 4.0)
    j = store.get_job(a)
    assert j.terminal and j.finished_at == 4.0 and j.share == 0 and store.allocations() == {}


def test_recovery_takes_over_unfinished_jobs_and_hands_back_worker_records(tmp_path):
    store = Store.for_state_dir(tmp_path)
    done, running, queued, cancelling = (_job(store, n) for n in ("done", "running", "queued", "cancelling"))
    store.mark_admitted([done, running, queued, cancelling])
    store.record_plan([Action(ActionKind.START, str(done), (), (0,)),
                       Action(ActionKind.START, str(running), (), (1, 2))], at=1.0)
    store.record_workers(running, [{"slot": 1, "pid": 11, "started": 5.0}, {"slot": 2, "pid": 12, "started": 5.0}])
    store.finish(done, JobStatus.FINISHED, 2.0)
    store.request_cancel(cancelling, "ann")
    store.close()

    again = Store.for_state_dir(tmp_path)  # a new process would do exactly this
    jobs, workers = again.recover(at=3.0)
    assert [j.id for j in jobs] == [running, queued, cancelling]
    assert [w["pid"] for w in workers] == [11, 12]
    assert again.get_job(done).status == "finished" and again.get_job(done).finished_at == 2.0
    assert again.get_job(running).status == "suspended" and again.allocations() == {}
    assert [e.kind for e in again.events(running)][-1] == "recovered"
    assert again.cancel_requests() == [cancelling]
    assert again.unadmitted() == []


def test_epoch_is_fixed_when_the_state_is_created(tmp_path):
    first = Store.for_state_dir(tmp_path).epoch()
    assert Store.for_state_dir(tmp_path).epoch() == first
