"""Jobs sharing a slot on a real server: ``coddl server start`` with real worker processes (gloo on
CPU, where a GPU slot is its CPU cores), jobs submitted over HTTP, the event log read back.

Two jobs asking for half a GPU each run at the same time on slot 0, their workers pinned to that
slot's cores; a job needing the whole slot waits until both have left; ``--sharing exclusive`` gives
each half-GPU job a slot of its own, so on one slot they run one after the other."""

from __future__ import annotations

import os

import pytest
from runtime_live import Server, tiny_job, wait_for

pytestmark = pytest.mark.slow


def half(name: str, steps: int = 80) -> dict:
    return {**tiny_job(name, steps=steps, max_gpus=1, step_s=0.05), "gpu_fraction": 0.5}


def events(job: dict, kind: str, action: str) -> list[dict]:
    return [e for e in job["events"] if e["kind"] == kind and e["action"] == action]


def first(job: dict, kind: str, action: str | None = None) -> float:
    return min(e["at"] for e in job["events"] if e["kind"] == kind and (action is None or e["action"] == action))


def tenants(srv: Server, gpu: int) -> list[int]:
    node = srv.admin.get("/cluster").json()["nodes"][0]
    return node["gpus"][gpu]["jobs"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    # the default --sharing (pack); fifo, so that who waits for whom is the arrival order
    s = Server(tmp_path_factory.mktemp("sharing") / "state", gpus=2, policy="fifo")
    yield s
    s.cleanup()


def test_two_half_gpu_jobs_share_slot_0_while_a_two_slot_job_waits_for_it(srv):
    a, b = srv.submit(half("half-a")), srv.submit(half("half-b"))
    running = wait_for(lambda: tenants(srv, 0) == [a, b] and srv.job(a)["workers"] and srv.job(b)["workers"]
                       and (srv.job(a), srv.job(b)), 120, "both half-GPU jobs running on slot 0")
    # one slot, two jobs: each job's worker is pinned to the same cores (the slot's)
    cores = [os.sched_getaffinity(j["workers"][0]["pid"]) for j in running]
    assert cores[0] == cores[1], cores
    assert srv.admin.get("/cluster").json()["gpus_in_use"] == 1
    c = srv.submit(tiny_job("whole", steps=20, min_gpus=2, max_gpus=2, step_s=0.05))

    ja = srv.wait_job(a, lambda j: j["status"] == "finished", 180, "finished")
    jb = srv.wait_job(b, lambda j: j["status"] == "finished", 180, "finished")
    jc = srv.wait_job(c, lambda j: j["status"] == "finished", 180, "finished")
    for j in (ja, jb):
        assert [e["gpus_after"] for e in events(j, "applied", "start")] == [[0]]
        assert j["resizes"] == 0 and j["spec"]["gpu_fraction"] == 0.5 and j["steps_done"] == 80
    # they trained at the same time: each started before the other finished
    assert first(ja, "applied", "start") < first(jb, "finished") and first(jb, "applied", "start") < first(ja, "finished")
    # a job whose GPU got (or lost) a co-tenant is told so in a plan, and nothing is carried out for it
    starts = sorted((first(j, "planned", "start"), j["id"]) for j in (ja, jb))
    if starts[0][0] < starts[1][0]:  # planned in two decisions: the first one's GPU got a co-tenant
        earlier = ja if starts[0][1] == a else jb
        assert starts[1][0] in [e["at"] for e in events(earlier, "planned", "cotenants")]
    assert not events(ja, "applied", "cotenants") and not events(jb, "applied", "cotenants")
    # the two-slot job waited for slot 0 to be free of both
    assert first(jc, "planned", "start") >= max(first(ja, "finished"), first(jb, "finished"))
    assert [e["gpus_after"] for e in events(jc, "applied", "start")] == [[0, 1]]
    # each worker was told its share before the job's code ran
    log = srv.admin.get(f"/jobs/{a}/logs").text
    assert "coddl: gpu_fraction 0.5:" in log


def test_a_half_gpu_job_on_two_gpus_is_refused_with_one_line(srv):
    r = srv.admin.post("/jobs", json={**half("greedy"), "min_gpus": 2, "max_gpus": 2})
    assert r.status_code == 422
    assert r.json()["detail"] == ("job: min_gpus: a job sharing a GPU (gpu_fraction < 1 or shareable) runs on one "
                                  "GPU: min_gpus must be 1, got 2")


def test_on_one_slot_two_half_gpu_jobs_run_at_once_and_a_whole_gpu_job_waits(server_factory):
    srv = server_factory(gpus=1, policy="fifo", extra=("--sharing", "pack"))
    a, b = srv.submit(half("half-a", steps=120)), srv.submit(half("half-b", steps=120))
    c = srv.submit(tiny_job("whole", steps=20, max_gpus=1, step_s=0.05))
    wait_for(lambda: tenants(srv, 0) == [a, b], 120, "both half-GPU jobs on slot 0")
    assert srv.job(c)["status"] == "queued"
    jc = srv.wait_job(c, lambda j: j["status"] == "finished", 180, "finished")
    ends = [first(srv.job(j), "finished") for j in (a, b)]
    assert first(jc, "planned", "start") >= max(ends)


def test_with_sharing_exclusive_half_gpu_jobs_on_one_slot_run_one_after_the_other(server_factory):
    srv = server_factory(gpus=1, policy="fifo", extra=("--sharing", "exclusive"))
    a, b = srv.submit(half("half-a", steps=40)), srv.submit(half("half-b", steps=40))
    ja = srv.wait_job(a, lambda j: j["status"] == "finished", 180, "finished")
    jb = srv.wait_job(b, lambda j: j["status"] == "finished", 180, "finished")
    assert first(jb, "planned", "start") >= first(ja, "finished")
    for j in (ja, jb):
        assert [e["gpus_after"] for e in events(j, "applied", "start")] == [[0]]
        assert not events(j, "planned", "cotenants")
    # alone on its GPU, a job is not limited to the part it asked for
    assert "coddl: gpu_fraction" not in srv.admin.get(f"/jobs/{a}/logs").text
