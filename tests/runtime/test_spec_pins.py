"""Hand-computed pins of ``runtime/spec.py``: every cross-field rule with its exact one-line message and
the field it blames, each numeric bound at its edge, and what a valid job turns into (its entry point,
environment, absolute script path and the scheduler's view)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coddl.runtime.spec import (DEFAULT_GRACE_S, GANG_ENV, MAX_GRACE_S, STORED, JobFile, SpecError, load_job,
                                parse_job, script_argv, user_name_problem, validate)

E = {"name": "j", "entrypoint": "pkg.mod:main", "steps": 10}
C = {"name": "j", "kind": "command", "command": ["/bin/train", "--x"], "steps": 10}
P = {"name": "j", "command": "python /abs/train.py --lr 1", "steps": 10}


def _err(data, source: str = "f") -> tuple[str, str | None]:
    with pytest.raises(SpecError) as e:
        parse_job(data, source)
    assert "\n" not in str(e.value)
    return str(e.value), e.value.field


@pytest.mark.parametrize("data, message, field", [
    # counts: positive, store-sized, strict
    ({**E, "steps": 0}, "steps: must be >= 1, got 0", "steps"),
    ({**E, "steps": 2**31 - 1}, None, None),
    ({**E, "steps": 2**31}, "steps: must be <= 2147483647 (the largest integer the store holds), got 2147483648",
     "steps"),
    ({**E, "steps": 2.0}, "steps: must be an integer, got 2.0", "steps"),
    ({**E, "steps": "2"}, "steps: must be an integer, got '2'", "steps"),
    ({**E, "steps": True}, "steps: must be an integer, got True", "steps"),
    ({**E, "min_gpus": 2**31}, "min_gpus: must be <= 2147483647 (the largest integer the store holds), got "
                               "2147483648", "min_gpus"),
    ({**E, "batch_size": 0}, "batch_size: must be >= 1, got 0", "batch_size"),
    ({**E, "max_gpus": 1}, None, None),
    ({**E, "min_gpus": 3, "max_gpus": 2}, "max_gpus: must be >= min_gpus (3), got 2", "max_gpus"),
    ({**E, "min_gpus": 3, "max_gpus": 3}, None, None),
    # floats with bounds not of the store
    ({**E, "gpu_fraction": 0.01, "gpu_memory_gb": 0.5}, None, None),
    ({**E, "gpu_fraction": 0.009}, "gpu_fraction: must be >= 0.01, got 0.009", "gpu_fraction"),
    ({**E, "gpu_fraction": 1.5}, "gpu_fraction: must be <= 1.0, got 1.5", "gpu_fraction"),
    ({**E, "gpu_fraction": 1}, None, None),  # an integer is a number
    ({**E, "gpu_fraction": "0.5"}, "gpu_fraction: input should be a valid number, got '0.5'", "gpu_fraction"),
    ({**E, "shareable": True, "gpu_memory_gb": 0.0}, "gpu_memory_gb: must be > 0.0, got 0.0", "gpu_memory_gb"),
    ({**E, "shareable": True, "gpu_memory_gb": float("inf")}, "gpu_memory_gb: input should be a finite number, "
                                                              "got inf", "gpu_memory_gb"),
    ({**C, "grace_s": 0.0}, None, None),
    ({**C, "grace_s": 3600.0}, None, None),
    ({**C, "grace_s": 3600.5}, "grace_s: must be <= 3600.0, got 3600.5", "grace_s"),
    ({**C, "grace_s": -0.5}, "grace_s: must be >= 0.0, got -0.5", "grace_s"),
    # types
    ({**E, "name": 5}, "name: must be text, got 5", "name"),
    ({**E, "env": {"A": 1}}, "env.A: must be text, got 1", "env.A"),
    ({**E, "kind": "x"}, "kind: input should be 'elastic' or 'command', got 'x'", "kind"),
    ({**E, "entrypoint": None, "command": 5}, "command: input should be a valid list, got 5", "command"),
    ({**E, "nope": 1, "also": 2}, "nope: unknown field (valid fields: name, kind, command, restartable, grace_s, "
                                  "entrypoint, args, model, min_gpus, max_gpus, steps, epochs, steps_per_epoch, "
                                  "batch_size, gpu_fraction, shareable, gpu_memory_gb, env, user)", "nope"),
    ({"entrypoint": "m:f", "steps": 1}, "name: required", "name"),
])
def test_fields_at_their_bounds(data, message, field):
    if message is None:
        parse_job(data)
        return
    assert _err(data) == (f"f: {message}", field)


@pytest.mark.parametrize("data, message, field", [
    ({**E, "command": P["command"]}, "command: give exactly one of command or entrypoint", "command"),
    ({**P, "args": ["x"]}, "args: only with entrypoint (a command carries its own arguments)", "args"),
    ({**E, "restartable": True}, "restartable: only with kind: command (an elastic job is resized in place)",
     "restartable"),
    ({**E, "grace_s": 10.0}, "grace_s: only with kind: command (an elastic job is resized in place)", "grace_s"),
    ({**E, "grace_s": DEFAULT_GRACE_S}, None, None),
    ({**C, "command": None, "entrypoint": "m:f"}, "entrypoint: kind: command runs a program: give command",
     "entrypoint"),
    ({**C, "min_gpus": 2, "max_gpus": 4}, "max_gpus: a command job that is not restartable runs on exactly "
                                          "min_gpus (2) GPUs, got 4", "max_gpus"),
    ({**C, "min_gpus": 2, "max_gpus": 2}, None, None),
    ({**C, "min_gpus": 2, "max_gpus": 4, "restartable": True}, None, None),
    ({**C, "env": {"OK": "1", "WORLD_SIZE": "2", "RANK": "0"}},
     "env: RANK: set by coddl for each process of a command job", "env"),
    ({**E, "env": {"RANK": "0"}}, None, None),  # an elastic job's environment is its own
    ({**E, "gpu_fraction": 0.5, "min_gpus": 2}, "min_gpus: a job sharing a GPU (gpu_fraction < 1 or shareable) runs "
                                                "on one GPU: min_gpus must be 1, got 2", "min_gpus"),
    ({**E, "shareable": True, "max_gpus": 2}, "max_gpus: a job sharing a GPU (gpu_fraction < 1 or shareable) runs "
                                              "on one GPU: max_gpus must be 1, got 2", "max_gpus"),
    ({**E, "shareable": True, "max_gpus": 1}, None, None),
    ({**E, "gpu_memory_gb": 8.0}, "gpu_memory_gb: only for a job sharing a GPU (gpu_fraction < 1 or shareable: "
                                  "true); a whole-GPU job has all of its GPU's memory", "gpu_memory_gb"),
    ({**E, "steps": None, "epochs": 2, "steps_per_epoch": 3}, None, None),
    ({**E, "steps_per_epoch": 3}, "steps_per_epoch: only with epochs", "steps_per_epoch"),
    ({**E, "steps": None, "epochs": 2}, "steps_per_epoch: required with epochs (the scheduler plans in steps)",
     "steps_per_epoch"),
    ({**E, "steps": None}, "steps: give exactly one of steps or epochs", "steps"),
    ({**E, "steps": None, "epochs": 2, "steps_per_epoch": 2**30}, "steps_per_epoch: epochs × steps_per_epoch = "
                                                                  "2147483648 steps, more than the store holds "
                                                                  "(2147483647)", "steps_per_epoch"),
    ({**E, "steps": None, "epochs": 1, "steps_per_epoch": 2**31 - 1}, None, None),
    ({**E, "entrypoint": "pkg.mod"}, "entrypoint: must be 'package.module:function', got 'pkg.mod'", "entrypoint"),
    ({**E, "name": "-j"}, "name: must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, "
                          "got '-j'", "name"),
    ({**E, "name": "a" * 65}, "name: must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, "
                              "got '" + "a" * 58 + "…", "name"),
    ({**E, "name": "a" * 64}, None, None),
    ({**E, "model": " "}, "model: must not be empty", "model"),
    ({**E, "model": "m" * 129}, "model: must be a printable name of at most 128 characters, got '" + "m" * 58 + "…",
     "model"),
    ({**E, "model": "m\tx"}, "model: must be a printable name of at most 128 characters, got 'm\\tx'", "model"),
    ({**E, "model": "m" * 128}, None, None),
    ({**E, "user": " al"}, "user: must be 1-64 printable characters without leading or trailing blanks, got ' al'",
     "user"),
    ({**E, "env": {"CODDL_X": "1"}}, "env: CODDL_X: names starting with CODDL_ are set by coddl for each worker",
     "env"),
    ({**E, "env": {"1A": "1"}}, "env: '1A' is not a valid environment variable name", "env"),
    ({**E, "entrypoint": None, "command": []}, "command: must not be empty", "command"),
    ({**E, "entrypoint": None, "command": [""]}, "command: must not be empty", "command"),
    ({**E, "entrypoint": None, "command": 'python "x'}, "command: No closing quotation", "command"),
    ({**E, "entrypoint": None, "command": "python"}, "command: names no script to run", "command"),
    ({**E, "entrypoint": None, "command": "python -X dev a.py"}, "command: unsupported interpreter option '-X'",
     "command"),
])
def test_cross_field_rules(data, message, field):
    if message is None:
        parse_job(data)
        return
    assert _err(data) == (f"f: {message}", field)


def test_user_names():
    assert user_name_problem("alice") is None and user_name_problem("a" * 64) is None
    assert user_name_problem("Ann Lee") is None  # inner blanks are fine
    bad = "must be 1-64 printable characters without leading or trailing blanks, got "
    assert user_name_problem("") == bad + "''"
    assert user_name_problem("a" * 65) == bad + "'" + "a" * 58 + "…"
    assert user_name_problem("al\n") == bad + "'al\\n'"
    assert user_name_problem("al ") == bad + "'al '"


def test_validate_names_what_is_not_a_mapping():
    assert str(pytest.raises(SpecError, validate, JobFile, [1], "req").value) == \
        "req: expected a mapping of job fields, got a list"
    assert str(pytest.raises(SpecError, validate, JobFile, None, "req", "token").value) == \
        "req: expected a mapping of token fields, got nothing (null)"
    assert str(pytest.raises(SpecError, validate, JobFile, 3.5, "req").value) == \
        "req: expected a mapping of job fields, got a number"
    e = pytest.raises(SpecError, validate, JobFile, {**E, "env": {"X": "\x00"}}, "req").value
    assert (str(e), e.field) == ("req: env.X: must not contain a NUL character", "env.X")
    e = pytest.raises(SpecError, validate, JobFile, {**E, "steps": 0}, "req", context=STORED).value
    assert (str(e), e.field) == ("req: steps: must be >= 1, got 0", "steps")


def test_script_argv():
    assert script_argv(["python3.11", "-u", "-O", "-B", "t.py", "-u"]) == ("t.py", ["-u"])
    assert script_argv(["/usr/bin/python3", "t.py"]) == ("t.py", [])
    assert script_argv(["python", "t.py", "a", "b"]) == ("t.py", ["a", "b"])
    assert script_argv(["t.py", "x"]) == ("t.py", ["x"])  # no interpreter: the script itself
    assert script_argv(["python3.py"]) == ("python3.py", [])  # a script that looks like an interpreter name
    for argv, message in ((["python", "-m", "pkg"], "'python -m MODULE' is not supported; use entrypoint: "
                                                    "'module:function'"),
                          (["python", "-c", "x"], "unsupported interpreter option '-c'"),
                          (["python", "-u"], "names no script to run"),
                          (["python2x", "t.py"], "must run a Python script (python SCRIPT.py ARGS...), got 'python2x'"),
                          (["python", "t.sh"], "must run a Python script (python SCRIPT.py ARGS...), got 't.sh'")):
        with pytest.raises(ValueError) as e:
            script_argv(argv)
        assert str(e.value) == message


def test_what_a_valid_job_turns_into(tmp_path: Path):
    e = parse_job({**E, "args": ["--a", "1"], "env": {"K": "v"}, "batch_size": 32})
    assert e.entry_and_args() == ("pkg.mod:main", ("--a", "1"))
    assert e.environment() == {"K": "v", "STEPS": "10", "GLOBAL_BATCH": "32"}
    assert e.with_absolute_paths(tmp_path) is e
    c = parse_job({**C, "env": {"K": "v"}})
    assert c.entry_and_args() == ("/bin/train", ("--x",))
    assert c.environment() == {"K": "v", "STEPS": "10"}
    rel = parse_job({**C, "command": ["train.py", "a"]})
    assert rel.with_absolute_paths(tmp_path) is rel  # a command job's words are left alone
    p = parse_job({**P, "command": "python -u sub/train.py train.py --out sub/train.py"})
    assert p.entry_and_args() == ("sub/train.py", ("train.py", "--out", "sub/train.py"))
    moved = p.with_absolute_paths(tmp_path)
    abs_script = str((tmp_path / "sub" / "train.py").resolve())
    assert moved.command == ["python", "-u", abs_script, "train.py", "--out", abs_script]
    absolute = parse_job(P)
    assert absolute.with_absolute_paths(tmp_path) is absolute
    ep = parse_job({**E, "steps": None, "epochs": 4, "steps_per_epoch": 25})
    assert ep.total_steps == 100 and ep.environment() == {"EPOCHS": "4"}
    assert GANG_ENV[0] == "RANK" and MAX_GRACE_S == 3600.0


@pytest.mark.parametrize("data, done, expected", [
    # (min, max) of the scheduler's view, and the work left
    ({**E, "min_gpus": 2, "max_gpus": 8}, 4, (2, 8, 6.0)),
    ({**E, "min_gpus": 2}, 10, (2, None, 1.0)),  # all done (a recovered job): at least one step left
    ({**E, "min_gpus": 2}, 12, (2, None, 1.0)),
    ({**E, "min_gpus": 2}, 9, (2, None, 1.0)),
    ({**E, "min_gpus": 2}, 8, (2, None, 2.0)),
    ({**C, "min_gpus": 3, "max_gpus": 3}, 0, (3, 3, 10.0)),
    ({**C, "min_gpus": 3}, 0, (3, 3, 10.0)),  # rigid: exactly min_gpus
    ({**C, "min_gpus": 3, "restartable": True}, 0, (3, None, 10.0)),
    ({**C, "min_gpus": 3, "max_gpus": 6, "restartable": True}, 0, (3, 6, 10.0)),
    ({**E, "gpu_fraction": 0.25, "gpu_memory_gb": 4.0}, 0, (1, 1, 10.0)),  # a shared GPU: one
    ({**E, "shareable": True}, 0, (1, 1, 10.0)),
])
def test_the_schedulers_view(data, done, expected):
    job = parse_job(data)
    core = job.to_core("7", 3.5, "ann", "Resnet50Model128", steps_done=done)
    assert (core.min_gpus, core.max_gpus, core.total_work) == expected
    assert (core.job_id, core.arrival, core.requested_gpus, core.model, core.user) == \
        ("7", 3.5, data.get("min_gpus", 1), "Resnet50Model128", "ann")
    assert (core.gpu_fraction, core.shareable, core.gpu_memory_gb) == \
        (data.get("gpu_fraction", 1.0), data.get("shareable", False), data.get("gpu_memory_gb"))


def test_load_job_names_the_line_of_the_field(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    f = tmp_path / "j.yaml"
    f.write_text("name: j\ncommand: python train.py\n\nsteps: 10\nenv:\n  A: x\n  CODDL_B: y\nmin_gpus: 2\n"
                 "max_gpus: 1\n")
    e = pytest.raises(SpecError, load_job, f).value
    # the line of env's value (its first entry): env as a whole is blamed
    assert (str(e), e.field) == (f"{f}: line 6: env: CODDL_B: names starting with CODDL_ are set by coddl for "
                                 "each worker", "env")
    f.write_text("name: j\ncommand: python train.py\n\nsteps: 10\nmin_gpus: 2\nmax_gpus: 1\n")
    e = pytest.raises(SpecError, load_job, str(f)).value
    assert (str(e), e.field) == (f"{f}: line 6: max_gpus: must be >= min_gpus (2), got 1", "max_gpus")
    f.write_text("name: j\ncommand: python train.py\n")  # the field to blame is absent: no line
    e = pytest.raises(SpecError, load_job, f).value
    assert (str(e), e.field) == (f"{f}: steps: give exactly one of steps or epochs", "steps")
    f.write_text("- 1\n")
    assert str(pytest.raises(SpecError, load_job, f).value) == f"{f}: expected a mapping of job fields, got a list"
    f.write_text("name: j\ncommand: python train.py\nsteps: 3\n")
    assert load_job(f).command == ["python", str(tmp_path / "train.py")]
    f.write_text("name: j\ncommand: python other.py\nsteps: 3\n")
    assert str(pytest.raises(SpecError, load_job, f).value) == \
        f"{f}: command: no such script {tmp_path / 'other.py'}"
    f.write_text("name: j\nkind: command\ncommand: ./anything\nsteps: 3\n")  # a program: not looked for
    assert load_job(f).command == ["./anything"]
    f.write_text("name: j\nentrypoint: m:f\nsteps: 3\nenv: {A: yes\n")
    e = pytest.raises(SpecError, load_job, f).value
    assert str(e).startswith(f"{f}: line 5: ") and e.field is None
    f.write_text("name: j\nentrypoint: m:f\nsteps: yes\n")
    e = pytest.raises(SpecError, load_job, f).value
    assert (str(e), e.field) == (f"{f}: line 3: steps: 'yes' is a boolean only in YAML 1.1: write true or false, "
                                 "or quote it for text", "steps")


def test_max_gpus_zero_is_blamed_on_min_gpus_and_the_defaults_of_to_core():
    """max_gpus has no bound of its own (only >= min_gpus); to_core plans the whole work by default."""
    assert _err({**E, "max_gpus": 0}) == ("f: max_gpus: must be >= min_gpus (1), got 0", "max_gpus")
    core = parse_job({**E, "steps": 10}).to_core("1", 0.0, "ann", "default")
    assert core.total_work == 10.0


def test_the_schema_documents_the_counts():
    props = JobFile.model_json_schema()["properties"]
    assert props["steps"]["description"] == "the work in optimizer steps at the global batch size (or epochs)"
    assert props["max_gpus"]["description"].startswith("the most GPUs the scheduler may give it")
