"""Sharing a GPU in the real system, piece by piece (the whole of it on a live server is
``test_sharing_live.py``): the job file's fields and their one-line errors, what the store keeps of
them across a restart, ``--sharing`` on the server, the executor's ordering on a shared GPU and its
``cotenants`` actions, and the controller's online correction of the co-location model."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from runtime_live import TINY_JOB, coddl

from coddl.core.allocation import Action, ActionKind, Plan
from coddl.core.job import JobSpec
from coddl.elastic.job import JobPhase
from coddl.perf.correction import OnlineCorrection
from coddl.perf.interference import ColocationTable
from coddl.placement.sharing import SharingRule
from coddl.policies.registry import make_policy
from coddl.runtime.controller import SOLO_SAMPLES, Controller, ControllerSettings
from coddl.runtime.executors.base import LaunchSpec, ProgressEvent
from coddl.runtime.executors.driver import ElasticExecutor, ExecutorSettings, _Running
from coddl.runtime.executors.local import gpu_memory_gib, local_cluster
from coddl.runtime.render import cluster_view
from coddl.runtime.server import sharing_scheduler
from coddl.runtime.spec import STORED, JobFile, SpecError, load_job, parse_job, validate
from coddl.runtime.store import Store

BASE = {"name": "j", "command": f"python {TINY_JOB}", "steps": 10}


# ---------------------------------------------------------------------------- the job file
@pytest.mark.parametrize("change,message", [
    ({"gpu_fraction": 0}, "job.yaml: gpu_fraction: must be >= 0.01"),
    ({"gpu_fraction": 1e-300}, "job.yaml: gpu_fraction: must be >= 0.01"),  # no crowding a GPU without bound
    ({"gpu_fraction": 1.5}, "job.yaml: gpu_fraction: must be <= 1"),
    ({"gpu_fraction": True}, "job.yaml: gpu_fraction: input should be a valid number, got True"),
    ({"gpu_fraction": "0.5"}, "job.yaml: gpu_fraction: input should be a valid number, got '0.5'"),
    ({"shareable": "yes"}, "job.yaml: shareable: input should be a valid boolean, got 'yes'"),
    ({"gpu_memory_gb": 0, "gpu_fraction": 0.5}, "job.yaml: gpu_memory_gb: must be > 0"),
    ({"gpu_memory_gb": float("inf"), "shareable": True}, "job.yaml: gpu_memory_gb: input should be a finite number"),
    ({"gpu_memory_gb": 4}, "job.yaml: gpu_memory_gb: only for a job sharing a GPU"),
    ({"gpu_fraction": 0.5, "min_gpus": 2}, "job.yaml: min_gpus: a job sharing a GPU (gpu_fraction < 1 or "
                                           "shareable) runs on one GPU: min_gpus must be 1, got 2"),
    ({"gpu_fraction": 0.5, "max_gpus": 4}, "job.yaml: max_gpus: a job sharing a GPU (gpu_fraction < 1 or "
                                           "shareable) runs on one GPU: max_gpus must be 1, got 4"),
    ({"shareable": True, "max_gpus": 2}, "job.yaml: max_gpus: a job sharing a GPU"),
])
def test_sharing_field_errors_are_one_line_naming_the_field(change, message):
    with pytest.raises(SpecError) as e:
        parse_job({**BASE, **change}, "job.yaml")
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_a_sharing_job_reaches_the_scheduler_as_a_one_gpu_sharing_spec():
    job = parse_job({**BASE, "gpu_fraction": 0.25, "gpu_memory_gb": 3, "max_gpus": 1})
    core = job.to_core("7", 1.0, "ann", "default")
    assert (core.gpu_fraction, core.shareable, core.gpu_memory_gb) == (0.25, False, 3.0)
    assert (core.requested_gpus, core.min_gpus, core.max_gpus, core.shares_gpu) == (1, 1, 1, True)
    shareable = parse_job({**BASE, "shareable": True}).to_core("8", 0.0, "ann", "default")
    assert shareable.shares_gpu and shareable.packing_fraction == 0.5 and shareable.max_gpus == 1
    whole = parse_job({**BASE, "gpu_fraction": 1, "max_gpus": 4}).to_core("9", 0.0, "ann", "default")
    assert not whole.shares_gpu and whole.max_gpus == 4 and whole.gpu_fraction == 1.0


def test_a_sharing_job_file_with_two_gpus_is_refused_by_submit_with_one_line(tmp_path):
    (tmp_path / "job.yaml").write_text(f"name: half\ncommand: python {TINY_JOB}\nsteps: 10\n"
                                       f"gpu_fraction: 0.5\nmin_gpus: 2\n")
    with pytest.raises(SpecError, match=r"job.yaml: line 5: min_gpus: a job sharing a GPU"):
        load_job(tmp_path / "job.yaml")
    r = coddl("submit", str(tmp_path / "job.yaml"), env={"CODDL_SERVER": "http://127.0.0.1:9", "CODDL_TOKEN": "x"})
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "line 5: min_gpus: a job sharing a GPU" in r.stderr


def test_the_store_keeps_the_sharing_fields_for_a_restarted_server(store_url):
    store = Store(store_url)
    job = parse_job({**BASE, "gpu_fraction": 0.5, "gpu_memory_gb": 6.5})
    shareable = parse_job({**BASE, "name": "s", "shareable": True})
    old = {k: v for k, v in parse_job(BASE).model_dump(mode="json").items()
           if k not in ("gpu_fraction", "shareable", "gpu_memory_gb")}  # a row an earlier version wrote
    for name, spec in (("j", job.model_dump(mode="json")), ("s", shareable.model_dump(mode="json")), ("old", old)):
        store.add_job(name, "ann", spec, 10)
    store.close()
    again = Store(store_url)  # what the next server reads
    back = {j.name: validate(JobFile, j.spec, "stored job", context=STORED) for j in again.unfinished()}
    assert (back["j"].gpu_fraction, back["j"].gpu_memory_gb, back["j"].shareable) == (0.5, 6.5, False)
    assert back["s"].shareable and back["s"].shares_gpu
    assert not back["old"].shares_gpu and back["old"].gpu_fraction == 1.0
    again.close()


def test_a_cotenants_action_is_recorded_as_planned_and_counts_as_no_resize(store_url):
    store = Store(store_url)
    a = store.add_job("a", "ann", {"name": "a"}, 10).id
    store.record_plan([Action(ActionKind.START, str(a), (), (0,), 2, (0, 1))], at=1.0)
    store.record_plan([Action(ActionKind.COTENANTS, str(a), (0,), (0,), 2, (0, 1))], at=2.0)
    j = store.get_job(a)
    assert (j.status, j.share, j.resizes, j.gpus) == ("running", 1, 0, (0,))
    assert [(e.kind, e.action) for e in store.events(a)][-1] == ("planned", "cotenants")
    store.close()


# ---------------------------------------------------------------------------- the server's option
def test_a_bad_sharing_rule_stops_the_server_with_one_line(tmp_path):
    r = coddl("server", "start", "--gpus", "1", "--port", "0", "--state-dir", str(tmp_path / "state"),
              "--sharing", "squeeze", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == ("error: --sharing: unknown sharing rule 'squeeze'; valid: exclusive, pack, "
                                "aware[:min_retained=F]")


def test_a_policy_that_assigns_cores_stops_a_sharing_server_with_one_line(tmp_path):
    r = coddl("server", "start", "--gpus", "1", "--port", "0", "--state-dir", str(tmp_path / "state"),
              "--policy", "aiturbo", "--sharing", "pack", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == ("error: --sharing: policy aiturbo assigns each job its CPU cores, which jobs sharing "
                                "a GPU cannot have (they run on their GPU's cores): use sharing 'exclusive' or "
                                "aiturbo:unified=false")


def test_the_default_sharing_rule_follows_the_policy():
    from coddl.placement.sharing import SharingRuleError
    from coddl.queues.model import QueueSet
    from coddl.queues.policy import QueuedPolicy
    from coddl.runtime.server import sharing_rule

    assert str(sharing_rule(None, make_policy("afs-p"))) == "pack"
    assert str(sharing_rule(None, make_policy("aiturbo"))) == "exclusive"
    assert str(sharing_rule(None, make_policy("aiturbo:unified=false"))) == "pack"
    assert str(sharing_rule("aware", make_policy("fifo"))) == "aware:min_retained=0.5"
    queued = QueuedPolicy(QueueSet(), lambda: make_policy("aiturbo"))
    with pytest.raises(SharingRuleError, match="policy aiturbo assigns each job its CPU cores"):
        sharing_scheduler(local_cluster(2), queued, SharingRule.parse("pack"))


def test_the_servers_scheduler_shares_with_the_colocation_table_or_not_at_all():
    cluster = local_cluster(2)
    packing = sharing_scheduler(cluster, make_policy("fifo"), SharingRule.parse("aware:min_retained=0.4"))
    assert packing.sharing is not None and packing.sharing.rule.min_retained == 0.4
    names = packing.curves.names
    a, b = names.index("Resnet50Model128"), names.index("default")
    assert 0 < packing.sharing.retained_pair(a, b, 0) < 1  # Gavel's V100 pairs price a local slot's
    table = packing.sharing.retained_pair
    assert isinstance(table, ColocationTable) and packing.sharing.clash == table.clashes
    assert sharing_scheduler(cluster, make_policy("fifo"), SharingRule.parse("exclusive")).sharing is None


def test_gpu_memory_comes_from_nvidia_smi_or_stays_unknown():
    def smi(stdout: str, code: int = 0):
        return lambda *a, **kw: SimpleNamespace(returncode=code, stdout=stdout)

    assert gpu_memory_gib(2, smi("81559\n81559\n40960\n")) == pytest.approx(79.647, abs=1e-3)
    assert gpu_memory_gib(3, smi("81559\n40960\n")) is None  # fewer GPUs than slots
    assert gpu_memory_gib(1, smi("N/A\n")) is None
    assert gpu_memory_gib(1, smi("", 9)) is None

    def missing(*a, **kw):
        raise FileNotFoundError("nvidia-smi")

    assert gpu_memory_gib(1, missing) is None


def test_the_cluster_view_names_every_tenant_of_a_shared_gpu():
    view = {"executor": "local", "policy": "fifo", "total_gpus": 2, "gpus_in_use": 1, "jobs": {"running": 3},
            "nodes": [{"name": "n", "gpu_type": "local", "cpus": 2,
                       "gpus": [{"gpu": 0, "job": 4, "jobs": [4, 5], "tenants": 3, "busy": True, "owner": "ann"},
                                {"gpu": 1, "job": None, "jobs": [], "tenants": 0, "busy": False, "owner": None}]}]}
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(cluster_view(view))
    text = console.export_text()
    assert "0:4+5+x" in text and "1:·" in text and "1/2 GPUs in use" in text


# ---------------------------------------------------------------------------- the executor
class FakeJob:
    """An elastic job handle whose start and stop block until the test lets them go."""

    def __init__(self, job_id: str, log: list) -> None:
        self.config = SimpleNamespace(job_id=job_id)
        self.log = log
        self.phase = JobPhase.IDLE
        self.go = {"start": threading.Event(), "stop": threading.Event()}

    def poll(self):
        return SimpleNamespace(phase=self.phase)

    def ended(self) -> bool:
        return False

    def start(self, slots) -> float:
        self.log.append(("starting", self.config.job_id))
        assert self.go["start"].wait(10)
        self.phase = JobPhase.RUNNING
        self.log.append(("started", self.config.job_id))
        return 0.0

    def resize(self, slots) -> float:
        self.log.append(("resize", self.config.job_id))
        return 0.0

    def stop(self, grace_s=None) -> None:
        self.log.append(("stopping", self.config.job_id))
        assert self.go["stop"].wait(10)
        self.phase = JobPhase.STOPPED
        self.log.append(("stopped", self.config.job_id))

    def close(self) -> None:
        pass

    def worker_pids(self) -> dict:
        return {}


class FakeExecutor(ElasticExecutor):
    def __init__(self) -> None:
        super().__init__(local_cluster(2), launcher=None, host="127.0.0.1",
                         settings=ExecutorSettings(poll_s=3600.0, start_timeout_s=10.0))
        self.log: list = []
        self.handles: dict[str, FakeJob] = {}

    def _open(self, job_id):
        job = self.handles[job_id] = FakeJob(job_id, self.log)
        r = _Running(job)
        self._jobs[job_id] = r
        return r


def _launch(ex: FakeExecutor, *jobs: str) -> None:
    for j in jobs:
        ex.register(LaunchSpec(j, "m:f", (), {}, Path("/nonexistent") / j))


def _wait(what, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_jobs_sharing_a_gpu_start_together_not_one_after_the_other():
    ex = FakeExecutor()
    try:
        _launch(ex, "a", "b")
        ex.apply(Plan([Action(ActionKind.START, "a", (), (0,)), Action(ActionKind.START, "b", (), (0,))]))
        _wait(lambda: {("starting", "a"), ("starting", "b")} <= set(ex.log))  # b did not wait for a
        for j in "ab":
            ex.handles[j].go["start"].set()
        _wait(lambda: {("started", "a"), ("started", "b")} <= set(ex.log))
    finally:
        for h in ex.handles.values():
            h.go["start"].set()
            h.go["stop"].set()
        ex.close(timeout_s=5)


def test_a_gpu_its_tenants_leave_is_taken_only_once_every_one_has_let_go():
    ex = FakeExecutor()
    try:
        _launch(ex, "a", "b", "c")
        ex.apply(Plan([Action(ActionKind.START, "a", (), (0,)), Action(ActionKind.START, "b", (), (0,))]))
        for j in "ab":
            ex.handles[j].go["start"].set()
        _wait(lambda: {("started", "a"), ("started", "b")} <= set(ex.log))
        ex.cancel("a")
        ex.cancel("b")
        _wait(lambda: {("stopping", "a"), ("stopping", "b")} <= set(ex.log))
        ex.apply(Plan([Action(ActionKind.START, "c", (), (0,))]))
        ex.handles["b"].go["stop"].set()  # the later of the two releases: the one a single slot would remember
        _wait(lambda: ("stopped", "b") in ex.log)
        time.sleep(0.3)
        assert ("starting", "c") not in ex.log  # a still holds the GPU
        ex.handles["a"].go["stop"].set()
        _wait(lambda: ("starting", "c") in ex.log)
        assert ex.log.index(("stopped", "a")) < ex.log.index(("starting", "c"))
    finally:
        for h in ex.handles.values():
            h.go["start"].set()
            h.go["stop"].set()
        ex.close(timeout_s=5)


def test_a_cotenants_action_moves_nothing_and_reports_nothing():
    ex = FakeExecutor()
    try:
        _launch(ex, "a", "b")
        ex.apply(Plan([Action(ActionKind.START, "a", (), (0,), 2, (0, 1))]))
        ex.handles["a"].go["start"].set()
        _wait(lambda: ("started", "a") in ex.log)
        _wait(lambda: any(e.action == "start" for e in ex.events()))
        before = list(ex.log)
        chain = ex._jobs["a"].chain
        ex.apply(Plan([Action(ActionKind.COTENANTS, "a", (0,), (0,), 2, (0, 1)),
                       Action(ActionKind.COTENANTS, "b", (0,), (0,), 2, (0, 1))]))  # b: never started here
        time.sleep(0.2)
        assert ex.log == before and ex.events() == []
        assert ex._jobs["a"].chain is chain and "b" not in ex._jobs
    finally:
        for h in ex.handles.values():
            h.go["start"].set()
            h.go["stop"].set()
        ex.close(timeout_s=5)


# ---------------------------------------------------------------------------- online correction
class QuietExecutor:
    notify = None

    def events(self):
        return []


def _controller(tmp_path: Path) -> Controller:
    scheduler = sharing_scheduler(local_cluster(2), make_policy("fifo"), SharingRule.parse("pack"))
    store = Store.for_state_dir(tmp_path)
    return Controller(store, scheduler, QuietExecutor(), tmp_path / "jobs", ControllerSettings(job_inspection=False))


def _report(ctrl: Controller, jid: str, rate: float, at: float) -> None:
    ctrl._observe(jid, ProgressEvent(jid, at, int(at), 1, rate, None), at)


def test_a_tenants_throughput_corrects_the_pair_not_the_job(tmp_path):
    ctrl = _controller(tmp_path)
    s = ctrl.scheduler
    for jid in ("a", "b"):
        ctrl._corrections[jid] = OnlineCorrection()
    s.submit(JobSpec("a", 0.0, 1, 1e6, "default", max_gpus=1, gpu_fraction=0.5), 0.0)
    s.step(0.0)
    m = int(s.table.model[s.table.row["a"]])
    solo = float(s.curves.rate[m, 1])
    for i in range(SOLO_SAMPLES):  # alone: its own correction learns it runs 2× its curve
        _report(ctrl, "a", 2.0 * solo, 1.0 + i)
    corr_a = ctrl._corrections["a"]
    assert corr_a.samples == SOLO_SAMPLES and corr_a.factor == pytest.approx(2.0)

    s.submit(JobSpec("b", 5.0, 1, 1e6, "default", max_gpus=1, gpu_fraction=0.5), 5.0)
    plan = s.step(5.0).plan
    assert [(a.kind, a.job_id, a.new) for a in plan] == [(ActionKind.START, "b", (0,)),
                                                         (ActionKind.COTENANTS, "a", (0,))]
    sharing = s.sharing
    key = (m, int(s.table.model[s.table.row["b"]]), 0)
    prior = sharing.retained_pair(*key)
    _report(ctrl, "a", 1.2 * solo, 6.0)  # beside b: 0.6 of its solo speed (2 × curve)
    assert sharing.measured[key] == pytest.approx(0.5 * prior + 0.5 * 0.6)
    assert corr_a.samples == SOLO_SAMPLES and corr_a.factor == pytest.approx(2.0)  # not mistaken for its own speed
    assert s.sharing.retained("a") == pytest.approx(0.5 * prior + 0.5 * 0.6)

    # b was never measured alone: its solo speed is the prior's guess, so its reports teach nothing
    learnt = dict(sharing.measured)
    _report(ctrl, "b", 0.3 * solo, 7.0)
    assert sharing.measured == learnt and ctrl._corrections["b"].samples == 0

    s.complete("b", 8.0)  # alone again: its reports are its own once more
    s.step(8.0)
    _report(ctrl, "a", 2.0 * solo, 9.0)
    assert corr_a.samples == SOLO_SAMPLES + 1
    ctrl.store.close()


def test_a_sharing_job_is_not_inspected_and_its_workers_get_its_share(tmp_path):
    ctrl = _controller(tmp_path)
    ctrl.settings = ControllerSettings(job_inspection=True)
    launched = []
    ctrl.executor.register = launched.append
    view = SimpleNamespace(id=1, submitted_at=ctrl.epoch, started_at=None, owner="ann", steps_done=0,
                           attained_service=0.0)
    ctrl._admit(view, parse_job({**BASE, "gpu_fraction": 0.5, "gpu_memory_gb": 2}), 0.0)
    view2 = SimpleNamespace(**{**vars(view), "id": 2})
    ctrl._admit(view2, parse_job(BASE), 0.0)
    env, whole = launched[0].env, launched[1].env
    assert env["CODDL_GPU_FRACTION"] == "0.5" and env["CODDL_GPU_MEMORY_GB"] == "2.0" and "CODDL_INSPECT" not in env
    assert not any(k.startswith("CODDL_GPU_") for k in whole) and whole["CODDL_INSPECT"] == "1"
    ctrl.store.close()


def test_without_sharing_a_fraction_job_runs_alone_unlimited_and_inspected(tmp_path):
    scheduler = sharing_scheduler(local_cluster(2), make_policy("fifo"), SharingRule.parse("exclusive"))
    ctrl = Controller(Store.for_state_dir(tmp_path), scheduler, QuietExecutor(), tmp_path / "jobs")
    launched = []
    ctrl.executor.register = launched.append
    view = SimpleNamespace(id=1, submitted_at=ctrl.epoch, started_at=None, owner="ann", steps_done=0,
                           attained_service=0.0)
    ctrl._admit(view, parse_job({**BASE, "gpu_fraction": 0.5}), 0.0)
    assert "CODDL_GPU_FRACTION" not in launched[0].env and launched[0].env["CODDL_INSPECT"] == "1"
    ctrl.store.close()
