"""Job files: one-line errors naming the field, and what a valid job turns into."""

from __future__ import annotations

import pytest
from runtime_live import EXAMPLES, TINY_JOB, coddl

from coddl.runtime.spec import JobFile, SpecError, load_job, parse_job

BASE = {"name": "j", "command": f"python {TINY_JOB}", "steps": 10}


@pytest.mark.parametrize("change,message", [
    ({"max_gpus": 0}, "job.yaml: max_gpus: must be >= min_gpus (1), got 0"),
    ({"min_gpus": 0}, "job.yaml: min_gpus: must be >= 1, got 0"),
    ({"steps": -5}, "job.yaml: steps: must be >= 1, got -5"),
    ({"steps": "lots"}, "job.yaml: steps: must be an integer, got 'lots'"),
    ({"steps": None}, "job.yaml: steps: give exactly one of steps or epochs"),
    ({"epochs": 2}, "job.yaml: steps: give exactly one of steps or epochs"),
    ({"steps": None, "epochs": 2}, "job.yaml: steps_per_epoch: required with epochs"),
    ({"name": "has space"}, "job.yaml: name: must be 1-64 letters"),
    ({"command": None}, "job.yaml: command: give exactly one of command or entrypoint"),
    ({"entrypoint": "pkg.mod:main"}, "job.yaml: command: give exactly one of command or entrypoint"),
    ({"command": "python -m pkg.train"}, "job.yaml: command: 'python -m MODULE' is not supported"),
    ({"command": "./run.sh"}, "job.yaml: command: must run a Python script"),
    ({"command": None, "entrypoint": "not an entry"}, "job.yaml: entrypoint: must be 'package.module:function'"),
    ({"env": {"BAD NAME": "1"}}, "job.yaml: env: 'BAD NAME' is not a valid environment variable name"),
    ({"args": ["--lr", "1"]}, "job.yaml: args: only with entrypoint"),
    ({"bogus": 1}, "job.yaml: bogus: unknown field"),
])
def test_errors_are_one_line_naming_the_field(change, message):
    with pytest.raises(SpecError) as e:
        parse_job({**BASE, **change}, "job.yaml")
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_a_valid_job_becomes_entry_args_environment_and_core_spec():
    job = parse_job({**BASE, "command": ["python", "-u", str(TINY_JOB), "--lr", "0.1"], "max_gpus": 4,
                     "batch_size": 64, "env": {"LR": "0.5", "FLAG": "true"}, "model": "mlp"})
    assert job.entry_and_args() == (str(TINY_JOB), ("--lr", "0.1"))
    assert job.environment() == {"LR": "0.5", "FLAG": "true", "STEPS": "10", "GLOBAL_BATCH": "64"}
    core = job.to_core("7", arrival=3.0, owner="ann", model="default", steps_done=4)
    assert (core.job_id, core.total_work, core.min_gpus, core.max_gpus, core.user) == ("7", 6.0, 1, 4, "ann")
    epochs = parse_job({**BASE, "steps": None, "epochs": 3, "steps_per_epoch": 50})
    assert epochs.total_steps == 150 and epochs.environment()["EPOCHS"] == "3"


def test_load_job_resolves_the_script_against_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text("name: j\ncommand: python train.py --x 1\nsteps: 5\n")
    monkeypatch.chdir(tmp_path)
    job = load_job("job.yaml")
    assert job.command == ["python", str(tmp_path / "train.py"), "--x", "1"]


def test_env_values_in_a_job_file_are_the_text_as_written(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text("name: 2024\ncommand: python train.py --lr 0.10 --amp yes\nsteps: 5\n"
                                       "env:\n  LR: 0.001\n  VERSION: 1.10\n  DEBUG: yes\n  MASK: 0x10\n"
                                       "  DAY: 2024-01-02\n  QUOTED: '007'\n")
    monkeypatch.chdir(tmp_path)
    job = load_job("job.yaml")
    assert job.name == "2024"
    assert job.command[2:] == ["--lr", "0.10", "--amp", "yes"]
    assert job.env == {"LR": "0.001", "VERSION": "1.10", "DEBUG": "yes", "MASK": "0x10", "DAY": "2024-01-02",
                       "QUOTED": "007"}


def test_load_job_reports_yaml_and_file_problems(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: line \d+: "):
        load_job(tmp_path / "bad.yaml")
    with pytest.raises(SpecError, match="nope.yaml: no such file"):
        load_job(tmp_path / "nope.yaml")
    (tmp_path / "gone.yaml").write_text("name: j\ncommand: python /no/such/train.py\nsteps: 5\n")
    with pytest.raises(SpecError, match="command: no such script /no/such/train.py"):
        load_job(tmp_path / "gone.yaml")


def test_cli_submit_of_a_malformed_job_exits_2_naming_the_field(tmp_path):
    (tmp_path / "job.yaml").write_text(f"name: j\ncommand: python {TINY_JOB}\nsteps: 10\nmin_gpus: 1\nmax_gpus: 0\n")
    r = coddl("submit", str(tmp_path / "job.yaml"), "--state-dir", str(tmp_path))
    assert r.returncode == 2
    assert f"{tmp_path / 'job.yaml'}: line 5: max_gpus: must be >= min_gpus (1), got 0" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_example_job_files_are_valid(monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    files = sorted((EXAMPLES / "jobs").glob("*.yaml"))
    assert files
    for f in files:
        load_job(f)


def test_a_stored_spec_is_held_to_what_running_it_needs():
    """Rules added for new submissions (whole-name matches, printable names, reserved env names) do
    not fail a job an earlier version accepted and stored; what the store or a worker cannot carry does."""
    from coddl.runtime.spec import STORED, validate

    old = {**BASE, "name": "j\n", "model": "m\tx", "user": " al", "env": {"CODDL_MINE": "1"},
           "entrypoint": None}
    with pytest.raises(SpecError, match="job: name: must be 1-64 letters"):
        validate(JobFile, old, "job")
    assert validate(JobFile, old, "stored job", context=STORED).env == {"CODDL_MINE": "1"}
    with pytest.raises(SpecError, match="stored job: env.X: must not contain a NUL"):
        validate(JobFile, {**old, "env": {"X": "\x00"}}, "stored job", context=STORED)
    with pytest.raises(SpecError, match="stored job: steps: must be <= 2147483647"):
        validate(JobFile, {**old, "steps": 2**40}, "stored job", context=STORED)
