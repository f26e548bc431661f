"""The store: written before acted on, and what a restarted controller gets back. Every test taking
``store_url`` runs on SQLite and on a real PostgreSQL server (see conftest)."""

from __future__ import annotations

import sqlite3
import threading
from typing import Callable

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.store import ProgressUpdate, Store, database_url
from coddl.runtime.store.views import worker_records


def _job(store: Store, name: str = "j") -> int:
    return store.add_job(name, "ann", {"name": name}, total_steps=100).id


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = Store.for_state_dir(tmp_path)
    _job(store)
    mode = sqlite3.connect(tmp_path / "coddl.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    store.close()


def test_a_plan_is_recorded_with_allocations_states_and_events(store_url):
    store = Store(store_url)
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


def test_progress_and_finish(store_url):
    store = Store(store_url)
    a = _job(store)
    store.record_plan([Action(ActionKind.START, str(a), (), (0,))], at=1.0)
    store.record_progress([ProgressUpdate(a, 2.0, 40, 1, 10.0, 0.5), ProgressUpdate(a, 3.0, 80, 1, 12.0, None)])
    j = store.get_job(a)
    assert (j.steps_done, j.loss, j.steps_per_s) == (80, 0.5, 12.0)
    assert [s.step for s in store.samples(a)] == [40, 80]
    store.finish(a, JobStatus.FINISHED, 4.0)
    j = store.get_job(a)
    assert j.terminal and j.finished_at == 4.0 and j.share == 0 and store.allocations() == {}


def test_recovery_takes_over_unfinished_jobs_and_hands_back_worker_records(store_url):
    store = Store(store_url)
    done, running, queued, cancelling = (_job(store, n) for n in ("done", "running", "queued", "cancelling"))
    store.mark_admitted([done, running, queued, cancelling])
    fresh = _job(store, "fresh")  # submitted, not yet taken in by the controller when it died
    store.record_plan([Action(ActionKind.START, str(done), (), (0,)),
                       Action(ActionKind.START, str(running), (), (1, 2))], at=1.0)
    records = [WorkerRecord(1, 11, started=5.0), WorkerRecord(2, 12, started=5.0)]
    store.record_workers(running, records)
    assert store.get_job(running).workers == tuple(records)
    assert [j.workers for j in store.list_jobs() if j.id == running] == [tuple(records)]
    store.record_progress([ProgressUpdate(running, 1.5, 30, 2, 20.0, 0.1)])
    store.finish(done, JobStatus.FINISHED, 2.0)
    store.request_cancel(cancelling, "ann")
    store.close()

    again = Store(store_url)  # a new process would do exactly this
    jobs, workers = again.recover(at=3.0)
    assert [j.id for j in jobs] == [running, queued, cancelling, fresh]
    assert workers == records
    assert again.get_job(done).status == "finished" and again.get_job(done).finished_at == 2.0
    assert "recovered" not in [e.kind for e in again.events(done)]
    r = again.get_job(running)
    assert (r.status, r.share, r.gpus, r.steps_done, r.started_at) == ("suspended", 0, (), 30, 1.0)
    assert again.allocations() == {}
    assert [(e.kind, e.detail) for e in again.events(running)][-1] == ("recovered", "was running at step 30")
    assert again.get_job(queued).status == "queued"  # never ran: nothing to resume
    assert "recovered" not in [e.kind for e in again.events(queued)]
    assert again.cancel_requests() == [cancelling]
    # every job recover() handed back is the controller's now: none is admitted a second time
    assert again.unadmitted() == []
    assert [j.share for j in jobs] == [0, 0, 0, 0]


def test_epoch_is_fixed_when_the_state_is_created(store_url):
    first = Store(store_url).epoch()
    assert Store(store_url).epoch() == first


def _together(n: int, fn: Callable[[int], object]) -> list[object]:
    """Run ``fn(0..n-1)`` in threads released at the same instant; their results, or what they raised."""
    start, out = threading.Barrier(n), [None] * n

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_processes_opening_a_new_store_at_once_create_it_once(store_url):
    """A server and ``coddl token create`` started together: both create the tables, one epoch."""
    stores = _together(6, lambda _: Store(store_url))
    assert all(isinstance(s, Store) for s in stores), stores
    epochs = _together(6, lambda i: stores[i].epoch())
    assert len(set(epochs)) == 1 and isinstance(epochs[0], float), epochs
    for s in stores:
        s.close()


def test_concurrent_writers_queue_and_lose_no_update(store_url):
    store = Store(store_url)
    a = _job(store)
    store.record_plan([Action(ActionKind.START, str(a), (), (0,))], at=1.0)
    grow = Action(ActionKind.GROW, str(a), (0,), (0, 1))

    def resize(_: int) -> None:
        for _ in range(5):
            store.record_plan([grow], at=2.0)

    assert _together(6, resize) == [None] * 6
    assert store.get_job(a).resizes == 30
    store.close()


def test_text_ids_and_times_round_trip_on_every_backend(store_url):
    store = Store(store_url)
    a = _job(store, "a" * 64)
    spec = {"name": "x", "env": {"K": "v\x00w ünï"}, "args": ["--lr", "0.1"], "n": 3, "f": 0.25, "b": True}
    b = store.add_job("b", "bob", spec, total_steps=2**31 - 1).id
    at = 1_712_345_678.123456  # wall-clock seconds keep their microseconds (double precision, no timezone)
    store.finish(a, JobStatus.FAILED, at, "Traceback: bad byte \x00 in the log")
    ja, jb = store.get_job(a), store.get_job(b)
    assert ja.name == "a" * 64 and ja.finished_at == at and ja.submitted_at > 1e9
    assert ja.message == "Traceback: bad byte \ufffd in the log"  # PostgreSQL stores no NUL
    assert [e.detail for e in store.events(a)][-1] == ja.message
    assert jb.spec == spec and jb.total_steps == 2**31 - 1
    assert [j.id for j in store.list_jobs()] == [a, b] and store.list_jobs(owner="bob")[0].spec == spec
    assert store.get_job(0) is None and store.get_job(2**31) is None and store.get_job(2**70) is None
    assert store.counts() == {"failed": 1, "queued": 1}
    store.close()


def test_a_plain_postgresql_url_means_psycopg_3():
    assert database_url("postgresql://u:p@db.example:5433/coddl").render_as_string(hide_password=False) \
        == "postgresql+psycopg://u:p@db.example:5433/coddl"
    assert database_url("postgresql+psycopg2://u@h/d").drivername == "postgresql+psycopg2"
    assert database_url("sqlite:////tmp/x.db").drivername == "sqlite"


def test_postgresql_store_with_a_plain_url(postgres):
    url = postgres.database().replace("postgresql+psycopg://", "postgresql://")
    store = Store(url)
    assert store.postgres and not store.sqlite
    a = _job(store)
    assert store.get_job(a).status == "queued"
    store.close()


def test_worker_records_are_stored_as_json_and_damaged_ones_are_left_out():
    local, ray = WorkerRecord(0, 7, started=1712.25), WorkerRecord(3, 8, node="node-1/a")
    assert local.to_dict() == {"slot": 0, "pid": 7, "started": 1712.25}
    assert ray.to_dict() == {"slot": 3, "pid": 8, "node": "node-1/a"}
    assert [WorkerRecord.from_dict(r.to_dict()) for r in (local, ray)] == [local, ray]
    stored = [local.to_dict(), {"pid": 9}, "text", {"slot": 1, "pid": "x"}, ray.to_dict()]
    assert worker_records(stored) == (local, ray)
    assert worker_records({"unreadable": "[{"}) == () and worker_records(None) == ()
