"""What the store keeps across a controller restart, each rule on its own: progress never goes back,
the first start is never overwritten, attained service survives, a suspended job stays suspended,
and a state directory written before a column existed still opens."""

from __future__ import annotations

import sqlite3

from coddl.core.allocation import Action, ActionKind
from coddl.runtime.store import ProgressUpdate, Store


def _job(store: Store, name: str = "j") -> int:
    return store.add_job(name, "ann", {"name": name}, total_steps=100).id


def test_steps_done_never_goes_back(store_url):
    store = Store(store_url)
    a = _job(store)
    store.record_progress([ProgressUpdate(a, 1.0, 50, 1, 10.0, None)])
    # a report from a rank that restored an older checkpoint arrives late
    store.record_progress([ProgressUpdate(a, 2.0, 40, 1, 11.0, 0.3)])
    j = store.get_job(a)
    assert (j.steps_done, j.steps_per_s, j.loss) == (50, 11.0, 0.3)
    assert [s.step for s in store.samples(a)] == [50, 40]  # the history keeps what was reported


def test_the_first_start_is_kept_through_suspensions_and_resumes(store_url):
    store = Store(store_url)
    a = _job(store)
    store.record_plan([Action(ActionKind.START, str(a), (), (0,))], at=10.0)
    store.record_plan([Action(ActionKind.SUSPEND, str(a), (0,), ())], at=20.0)
    assert (store.get_job(a).status, store.get_job(a).started_at) == ("suspended", 10.0)
    store.record_plan([Action(ActionKind.RESUME, str(a), (), (1, 2))], at=30.0)
    j = store.get_job(a)
    assert (j.status, j.started_at, j.share, j.resizes) == ("running", 10.0, 2, 0)
    store.record_plan([Action(ActionKind.GROW, str(a), (1, 2), (1, 2, 3))], at=40.0)
    assert (store.get_job(a).started_at, store.get_job(a).resizes) == (10.0, 1)


def test_attained_service_is_persisted_and_never_goes_back(store_url):
    store = Store(store_url)
    a, b = _job(store, "a"), _job(store, "b")
    assert store.get_job(a).attained_service == 0.0
    store.record_service({a: 120.5, b: 7.0})
    store.record_service({a: 100.0})  # an older value written late must not win
    store.close()
    again = Store(store_url)
    jobs, _ = again.recover(at=1.0)
    assert {j.id: j.attained_service for j in jobs} == {a: 120.5, b: 7.0}
    assert {j.id: j.attained_service for j in again.list_jobs()} == {a: 120.5, b: 7.0}


def test_recovering_twice_keeps_a_suspended_job_suspended(store_url):
    store = Store(store_url)
    a = _job(store)
    store.mark_admitted([a])
    store.record_plan([Action(ActionKind.START, str(a), (), (0,))], at=1.0)
    store.recover(at=2.0)
    jobs, workers = store.recover(at=3.0)  # the restarted controller died before planning
    assert [j.status for j in jobs] == ["suspended"] and workers == []
    assert [e.kind for e in store.events(a)].count("recovered") == 2


def test_a_store_created_before_attained_service_existed_opens(tmp_path):
    store = Store.for_state_dir(tmp_path)
    a = _job(store)
    store.close()
    db = sqlite3.connect(tmp_path / "coddl.db")
    db.execute("ALTER TABLE jobs DROP COLUMN attained_service")
    db.commit()
    db.close()
    again = Store.for_state_dir(tmp_path)
    assert again.get_job(a).attained_service == 0.0
    again.record_service({a: 5.0})
    assert again.get_job(a).attained_service == 5.0
