"""The pieces of a worker's confinement that need no worker: which directories get a tmpfs, what of the
environment a job inherits, how its log is opened, how the server reads logs a job could have tampered
with, and how failures and progress reports are read back. (Real confined workers: ``tests/runtime``.)"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from coddl.elastic.failure import Failure, ScriptMistake
from coddl.elastic.protocol import Progress
from coddl.elastic.sandbox import ConfinementError, _overlays, clean_environment, open_log
from coddl.runtime.logs import last_line, stream_logs


def test_overlays_cover_outermost_first_and_keep_tmp_private():
    state = Path(tempfile.mkdtemp(dir="/var/tmp")) / "state"
    try:
        (state / "jobs").mkdir(parents=True)
        got = _overlays((str(state / "jobs"), str(state), "/no/such/dir"))
        # /tmp and /dev/shm: private and writable; the state: hidden; its jobs dir: already under that
        assert got == [("/tmp", True), ("/dev/shm", True), (str(state), False)]
        inside_tmp = tempfile.mkdtemp()  # under /tmp: the private /tmp hides it already
        assert _overlays((inside_tmp,)) == [("/tmp", True), ("/dev/shm", True)]
        os.rmdir(inside_tmp)
    finally:
        shutil.rmtree(state.parent)


def test_a_job_inherits_none_of_the_servers_secrets():
    env = clean_environment({"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
                             "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1", "CODDL_TOKEN": "t", "CODDL_SERVER": "u",
                             "PGPASSWORD": "p", "AWS_SECRET_ACCESS_KEY": "k", "RAY_AUTH_TOKEN": "r", "HOME": "/root"})
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
                   "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1"}


def test_a_log_is_never_opened_through_a_planted_link_or_fifo(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("token")
    job = tmp_path / "job"
    (job / "logs").mkdir(parents=True)
    (job / "logs" / "w0.log").symlink_to(secret)
    with pytest.raises(OSError):
        open_log(str(job), "w0.log")
    os.mkfifo(job / "logs" / "w1.log")
    with pytest.raises(OSError):  # no reader: refused at once rather than blocking the launcher
        open_log(str(job), "w1.log")
    os.link(secret, job / "logs" / "w2.log")
    with pytest.raises(ConfinementError, match="not a plain file of its own"):
        open_log(str(job), "w2.log")
    assert secret.read_text() == "token"
    fd = open_log(str(job), "w3.log")
    os.write(fd, b"hello\n")
    os.close(fd)
    assert (job / "logs" / "w3.log").stat().st_mode & 0o777 == 0o600


def test_the_server_reads_no_log_a_job_pointed_elsewhere(tmp_path):
    other = tmp_path / "other-users-job" / "logs"
    other.mkdir(parents=True)
    (other / "w0.log").write_text("someone else's secret\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "logs").symlink_to(other)  # the whole logs directory replaced by a link
    assert last_line(job) is None and list(stream_logs(job, False, lambda: True)) == []
    (job / "logs").unlink()
    (job / "logs").mkdir()
    (job / "logs" / "w0.log").symlink_to(other / "w0.log")
    os.mkfifo(job / "logs" / "w1.log")  # would block a reader
    (job / "logs" / "w2.log").write_text("mine\n")
    assert last_line(job) == ("w2.log", "mine")
    assert list(stream_logs(job, False, lambda: True)) == ["[w2] mine\n"]


def _raise_here() -> None:
    raise RuntimeError("boom 17")


def _raise_there() -> None:
    raise RuntimeError("boom 18")


def _failure(fn, generation: int = 1) -> Failure:  # noqa: ANN001
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return Failure.of(e, generation)
    raise AssertionError("did not raise")


def test_a_failure_is_recognised_by_its_type_and_place_not_its_message():
    a, b, c = _failure(_raise_here), _failure(_raise_here, 2), _failure(_raise_there)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert a.summary == "RuntimeError: boom 17" and a.where.startswith("test_confinement_parts.py:")
    assert not a.fatal and a.kind == "exception"
    def mistake() -> None:
        raise ScriptMistake("rule broken")
    m = _failure(mistake)
    assert m.fatal and m.kind == "mistake" and Failure.loads(m.dumps()) == m


@pytest.mark.parametrize("raw", ["", "{", "[]", json.dumps({"kind": "other", "summary": "", "where": "",
                                                           "fingerprint": "", "generation": 1, "fatal": True}),
                                 "x" * 5000, json.dumps({"kind": "exception"})])
def test_a_failure_record_that_no_worker_wrote_is_ignored(raw):
    assert Failure.loads(raw) is None


def test_progress_reports_are_checked_before_they_reach_the_controller():
    good = Progress(generation=1, world_size=2, step=10, epoch=0, samples=320, samples_per_s=100.0,
                    steps_per_s=3.0, loss=float("nan"), global_batch=32, regroup_s=None, time=1.0)
    assert Progress.loads(good.dumps()).step == 10
    for bad in ({"step": 2**63}, {"step": -1}, {"world_size": 1.5}, {"steps_per_s": float("inf")},
                {"time": "now"}, {"extra": 1}):
        d = json.loads(good.dumps()) | bad
        with pytest.raises(ValueError):
            Progress.loads(json.dumps(d))


def test_a_confined_spec_survives_the_trip_to_a_cold_worker():
    from coddl.elastic.sandbox import Confinement
    from coddl.elastic.worker import WorkerSpec

    spec = WorkerSpec(entry="train.py", args=("--x",), env={"A": "1"}, confinement=Confinement(
        job_dir="/s/jobs/1", hide=("/s",), expose=("/opt/py",), owner="alice", uid=1001, gid=1001, account="alice"))
    assert WorkerSpec.from_json(spec.to_json()) == spec


def test_the_installation_is_shown_through_a_private_tmp_but_never_what_it_holds_hidden(tmp_path):
    from coddl.elastic.sandbox import put_back

    venv, src, state = tmp_path / "p" / ".venv", tmp_path / "p" / "src", tmp_path / "state"
    for d in (venv / "lib", src, state, tmp_path / "outside"):
        d.mkdir(parents=True)
    covered = ("/tmp", str(tmp_path))  # the job's /tmp is its own (here tmp_path stands for it)
    # (put_back's hidden directories are passed apart: the state, here tmp_path/state)
    # the outermost of nested installation directories, each once
    assert put_back((str(venv), str(venv / "lib"), str(src), str(venv)), covered, (str(state),)) == [str(venv), str(src)]
    # a directory outside every covered one needs no putting back; a missing one is left out
    assert put_back(("/usr", str(tmp_path / "gone")), covered, ()) == []
    # a PYTHONPATH entry that holds the state directory would carry it along: never shown
    assert put_back((str(tmp_path),), ("/tmp", "/var"), (str(state),)) == []
    assert put_back((str(tmp_path / "p"),), covered, (str(state),)) == [str(tmp_path / "p")]
    # nothing reached through a link is shown: one to the state's parent, one to the state's tokens,
    # nor even one to a harmless directory (a link in /tmp may be swapped by anyone)
    (state / "tokens").mkdir()
    for name, target in (("link", tmp_path), ("to-tokens", state / "tokens"), ("to-src", src)):
        (tmp_path / "p" / name).symlink_to(target)
        assert put_back((str(tmp_path / "p" / name),), covered, (str(state),)) == [], name
    # nor anything inside a hidden directory, given plainly
    assert put_back((str(state / "tokens"), str(state / "jobs")), covered, (str(state),)) == []
    # nor a covered directory itself (a PYTHONPATH of /tmp would show the host's /tmp), nor its parent
    assert put_back(("/tmp", str(tmp_path), "/"), covered, ()) == []


def test_a_pythonpath_directory_is_part_of_the_installation(tmp_path, monkeypatch):
    from coddl.runtime.isolation import installation

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), "relative/dir", str(tmp_path / "missing")]))
    got = installation()
    assert str(tmp_path) in got and "relative/dir" not in got and str(tmp_path / "missing") not in got
