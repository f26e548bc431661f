"""The study file as users write it: every mistake one line naming file, line and field (exit 2 from
the CLI), and what a valid file becomes (the parameters Optuna suggests, the pruner it builds)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.runtime.spec import SpecError
from coddl.studies.runner import env_value, make_pruner, suggest
from coddl.studies.spec import Parameter, load_study

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parents[1] / "runtime" / "tiny_job.py"  # a script that exists
HEAD = f"name: s\ntrials: 4\njob: {{command: python {SCRIPT}, steps: 10}}\n"


def study(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(text)
    return p


def test_the_bundled_example_loads_with_its_script_made_absolute(monkeypatch):
    monkeypatch.chdir(REPO)
    spec, job = load_study("examples/studies/mlp-lr.yaml")
    assert spec.name == "mlp-lr" and spec.trials == 8 and spec.in_flight == 4 and set(spec.space) == {"LR", "GLOBAL_BATCH"}
    assert Path(job.command[1]) == REPO / "examples" / "train_mlp.py" and job.max_gpus == 4 and job.steps == 200


@pytest.mark.parametrize("text, says", [
    (HEAD + "space: {LR: {low: 0.1, high: 0.01}}\n", "line 4: space.LR: must have finite low <= high"),
    (HEAD + "space: {LR: {low: 0.1}}\n", "space.LR: needs low and high (a range) or choices (a list)"),
    (HEAD + "space: {LR: {low: 0, high: 1, log: true}}\n", "space.LR: log: needs low > 0"),
    (HEAD + "space: {LR: {low: 0.1, high: 1, choices: [1]}}\n", "give either choices or a range"),
    (HEAD + "space: {LR: {choices: []}}\n", "choices: must list at least one value"),
    (HEAD + "space: {X: {low: -1.0e308, high: 1.0e308}}\n", "space.X: the range from -1e+308 to 1e+308 is wider than"),
    (HEAD + "space: {X: {low: 0, high: 10, step: 1.0e-30}}\n", "space.X: step: 1e-30 makes more than 1,000,000,000"),
    (HEAD + "space: {X: {choices: [null]}}\n", "line 4: space.X.choices: each choice must be a number, text or true/false, got None"),
    (HEAD + "space: {X: {choices: [[1, 2]]}}\n", "each choice must be a number, text or true/false, got [1, 2]"),
    (HEAD + "space: {X: {choices: [1]}}\nsampler: {seed: -1}\n", "line 5: sampler.seed: must be >= 0"),
    ("name: s\ntrials: 2\njob: {name: mine, command: python x.py}\nspace: {B: {choices: [1]}}\n",
     "line 3: job.name: trials are named <study>-<n> (here s-0, s-1, ...)"),
    (f"name: s\ntrials: 2\npruner: {{min_resource: 50}}\njob: {{command: python {SCRIPT}, steps: 50}}\nspace: {{B: {{choices: [1]}}}}\n",
     "line 3: pruner.min_resource: 50 is not below the job's 50 steps"),
    (HEAD + "space: {N: {low: 1, high: 8, step: 2}}\n", "step: high - low (8 - 1) must be a multiple of step (2)"),
    (HEAD + "space: {LR: {low: '0.1', high: 1}}\n", "space.LR.low"),
    (HEAD + "space: {1LR: {low: 0.1, high: 1}}\n", "'1LR' is not an environment variable"),
    (HEAD + "space: {CODDL_LR: {low: 0.1, high: 1}}\n", "not starting with a digit or CODDL_"),
    (HEAD + "space: {}\n", "space: must name at least one parameter"),
    (HEAD + "space: {LR: {low: 0.1, high: 1}}\nenqueue: [{LR: 5}]\n", "line 5: enqueue.0.LR: 5 is outside"),
    (HEAD + "space: {LR: {low: 0.1, high: 1}}\nenqueue: [{LX: 0.5}]\n", "enqueue.0.LX: not a parameter of the space"),
    (HEAD + "space: {B: {choices: [64, 128]}}\nenqueue: [{B: 96}]\n", "enqueue.0.B: 96 is outside the parameter's choices"),
    (HEAD + "space: {B: {choices: [64]}}\nenqueue: [{B: 64}, {B: 64}, {B: 64}, {B: 64}, {B: 64}]\n",
     "enqueue: lists 5 configurations for 4 trials"),
    (HEAD + "space: {B: {choices: [64]}}\npruner: {kind: threshold}\n", "pruner: threshold: needs upper or lower"),
    (HEAD + "space: {B: {choices: [64]}}\npruner: {kind: median, upper: 3}\n", "belong to the threshold pruner"),
    (HEAD + "space: {B: {choices: [64]}}\npruner: {kind: asha}\n", "pruner.kind"),
    (HEAD + "space: {B: {choices: [64]}}\nparallel: 0\n", "parallel: must be >= 1"),
    ("name: s\ntrials: ten\njob: {command: python x.py}\nspace: {B: {choices: [1]}}\n", "line 2: trials: must be an integer"),
    ("name: s/../x\ntrials: 2\njob: {command: python x.py}\nspace: {B: {choices: [1]}}\n", "name: must be 1-58"),
    ("name: s\ntrials: 2\njob:\n  command: python x.py\n  max_gpus: 0\n  steps: 3\nspace: {B: {choices: [1]}}\n",
     "line 5: job.max_gpus: must be >= min_gpus"),
    ("name: s\ntrials: 2\njob: {command: python nowhere.py, steps: 3}\nspace: {B: {choices: [1]}}\n",
     "job.command: no such script"),
    (f"name: s\ntrials: 2\njob:\n  command: python {SCRIPT}\n  steps: 3\n  env: {{B: '1'}}\nspace: {{B: {{choices: [1]}}}}\n",
     "job.env.B: is set by the search space"),
    ("name: s\ntrials: 2\njob: {command: python x.py}\nspace: {B: {choices: [1]}}\ncolour: red\n", "colour: unknown field"),
    # an unknown field lists the valid fields of the mapping it is in, not the study's
    ("name: s\ntrials: 2\njob: {command: python x.py}\nspace: {B: {low: 1, high: 2, foo: 3}}\n",
     "line 4: space.B.foo: unknown field (valid fields: low, high, log, step, choices)"),
    ("name: s\ntrials: 2\npruner: {kind: none, bar: 1}\njob: {command: python x.py}\nspace: {B: {choices: [1]}}\n",
     "line 3: pruner.bar: unknown field (valid fields: kind, min_resource, reduction_factor, startup_trials, upper, "
     "lower)"),
    ("- a list\n", "expected a mapping of study fields"),
])
def test_a_mistake_is_one_line_naming_the_field(tmp_path, text, says):
    with pytest.raises(SpecError) as e:
        load_study(study(tmp_path, text))
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "study.yaml")) and says in msg and "\n" not in msg, msg


def test_the_cli_says_it_in_one_line_with_exit_code_2(tmp_path):
    p = study(tmp_path, HEAD + "space: {LR: {low: 0.1, high: 0.01}}\n")
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "study", "run", str(p), "--server", "http://127.0.0.1:9",
                        "--token", "t"], capture_output=True, text=True, timeout=120, env={"COLUMNS": "300", "PATH": ""})
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "space.LR: must have finite low <= high" in r.stderr


def test_an_unreachable_server_is_one_line_and_exit_1(tmp_path):
    p = study(tmp_path, HEAD + "space: {LR: {low: 0.01, high: 0.1}}\n")
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "study", "run", str(p), "--server", "http://127.0.0.1:9",
                        "--token", "t"], capture_output=True, text=True, timeout=120, env={"COLUMNS": "300", "PATH": ""})
    assert r.returncode == 1 and "Traceback" not in r.stderr and "cannot reach the coddl server" in r.stderr, r.stderr


def test_an_output_file_in_no_directory_is_refused_before_anything_runs(tmp_path):
    p = study(tmp_path, HEAD + "space: {LR: {low: 0.01, high: 0.1}}\n")
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "study", "run", str(p), "--out", str(tmp_path / "no" / "o.json"),
                        "--server", "http://127.0.0.1:9", "--token", "t"],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "300", "PATH": ""})
    assert r.returncode == 2 and f"--out: no such directory {tmp_path / 'no'}" in r.stderr, r.stderr


def test_a_storage_optuna_cannot_open_is_one_line(tmp_path):
    p = study(tmp_path, HEAD + "space: {LR: {low: 0.01, high: 0.1}}\n")
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "study", "run", str(p), "--storage", "nosuch://x",
                        "--server", "http://127.0.0.1:9", "--token", "t"],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "300", "PATH": ""})
    assert r.returncode == 2 and "--storage: cannot open 'nosuch://x'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "study", "run", str(p), "--storage",
                        "postgresql+psycopg://u:s3cret@127.0.0.1:9/db", "--server", "http://127.0.0.1:9", "--token", "t"],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "300", "PATH": ""})
    assert r.returncode == 2 and "--storage: cannot open 'postgresql+psycopg://u:***@127.0.0.1:9/db'" in r.stderr, r.stderr
    assert "s3cret" not in r.stderr


ranges = st.tuples(st.integers(-1000, 1000), st.integers(0, 1000), st.booleans(), st.sampled_from([None, 1, 3]))


@settings(max_examples=60, deadline=None)
@given(ranges, st.integers(0, 2**31))
def test_suggested_values_lie_in_the_parameters_range_and_type(r, seed):
    low, width, as_float, step = r
    width -= width % (step or 1)
    if as_float:
        p = Parameter(low=float(low), high=float(low + width), step=None if step is None else float(step))
    else:
        p = Parameter(low=low, high=low + width, step=step)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(3):
        v = suggest(study.ask(), "x", p)
        assert p.admits(v) and p.low <= v <= p.high
        assert isinstance(v, int) is (not as_float)
        if step is not None:
            assert math.isclose((v - p.low) / step, round((v - p.low) / step), abs_tol=1e-6)


def test_log_ranges_and_choices():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    p = Parameter(low=1e-5, high=1e-1, log=True)
    values = [suggest(study.ask(), "lr", p) for _ in range(200)]
    assert all(1e-5 <= v <= 1e-1 for v in values)
    assert sum(v < 1e-3 for v in values) > 60  # log-uniform: half the decades lie below 1e-3 (linear: 1%)
    c = Parameter(choices=[64, "adam", True])
    assert {repr(suggest(study.ask(), "c", c)) for _ in range(60)} == {"64", "'adam'", "True"}
    assert c.admits(64) and not c.admits(64.0) and not c.admits(1) and c.admits(True)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_reaches_the_trial_with_every_digit(x):
    assert float(env_value(x)) == x


def test_env_values_of_other_types():
    assert (env_value(True), env_value(False), env_value(128), env_value("adam")) == ("1", "0", "128", "adam")


def test_each_pruner_kind_is_optunas_with_the_files_settings(tmp_path):
    from coddl.studies.spec import Pruner

    sh = make_pruner(Pruner(kind="successive-halving", min_resource=40, reduction_factor=3), 200)
    assert isinstance(sh, optuna.pruners.SuccessiveHalvingPruner)
    assert (sh._min_resource, sh._reduction_factor) == (40, 3)
    hb = make_pruner(Pruner(kind="hyperband", min_resource=10, reduction_factor=2), 300)
    assert isinstance(hb, optuna.pruners.HyperbandPruner)
    assert (hb._min_resource, hb._max_resource, hb._reduction_factor) == (10, 300, 2)
    md = make_pruner(Pruner(kind="median", min_resource=5, startup_trials=2), None)
    assert isinstance(md, optuna.pruners.MedianPruner) and (md._n_startup_trials, md._n_warmup_steps) == (2, 5)
    th = make_pruner(Pruner(kind="threshold", upper=1.5, min_resource=7), None)
    assert isinstance(th, optuna.pruners.ThresholdPruner) and (th._upper, th._n_warmup_steps) == (1.5, 7)
    assert math.isinf(th._lower)
    assert isinstance(make_pruner(Pruner(kind="none"), None), optuna.pruners.NopPruner)


def test_the_job_templates_text_stays_text_and_the_space_keeps_its_types(tmp_path):
    spec, job = load_study(study(tmp_path, f"""name: s
trials: 2
job:
  command: python {SCRIPT}
  model: 2.0
  steps: 10
  env: {{VERSION: 1.10, FLAG: yes}}
space:
  X: {{choices: [1.10, 2, true, text]}}
sampler: {{seed: 1}}
"""))
    assert job.model == "2.0" and job.env == {"VERSION": "1.10", "FLAG": "yes"}
    assert spec.space["X"].choices == [1.1, 2, True, "text"] and spec.sampler.seed == 1
    _, ep = load_study(study(tmp_path, "name: s\ntrials: 2\njob: {entrypoint: 'pkg.mod:main', args: [--lr, 0.10], "
                                       "steps: 3}\nspace: {X: {choices: [1]}}\n"))
    assert ep.entrypoint == "pkg.mod:main" and ep.args == ["--lr", "0.10"] and ep.command is None


def test_what_a_mistake_names_besides_its_text(tmp_path):
    cases = [(HEAD + "space: {LR: {low: 0.1, high: 0.01}}\n", "space.LR"),
             ("name: s\ntrials: 2\njob: {command: python x.py, max_gpus: 0, steps: 3}\nspace: {B: {choices: [1]}}\n",
              "job.max_gpus"),
             ("name: s\ntrials: 2\njob: {command: python nowhere.py, steps: 3}\nspace: {B: {choices: [1]}}\n",
              "job.command"),
             ("name: s\ntrials: 2\njob: {name: x, command: python x.py}\nspace: {B: {choices: [1]}}\n", "job.name"),
             (HEAD + "space: {LR: {low: 1, high: 2}}\nspace: {LR: {low: 1, high: 2}}\n", "space")]
    for text, field in cases:
        with pytest.raises(SpecError) as e:
            load_study(study(tmp_path, text))
        assert e.value.field == field, (text, e.value.field, str(e.value))
    with pytest.raises(SpecError) as e:
        load_study(study(tmp_path, "name: s\ntrials: 2\njob: {name: x, command: python x.py}\nspace: {B: {choices: [1]}}\n"))
    assert str(e.value).endswith("(here s-0, s-1, ...); remove the job's name")
    with pytest.raises(SpecError) as e:  # a field that is missing has no line to name
        load_study(study(tmp_path, "name: s\njob: {command: python x.py}\nspace: {B: {choices: [1]}}\n"))
    assert str(e.value) == f"{tmp_path / 'study.yaml'}: trials: required" and e.value.field == "trials"
    with pytest.raises(SpecError) as e:  # a mistake with no field of its own has no line either
        load_study(study(tmp_path, "- 1\n"))
    assert e.value.field is None and str(e.value) == f"{tmp_path / 'study.yaml'}: expected a mapping of study fields, got a list"
    for text, says in (("", "empty (expected a mapping of study fields)"),
                       ("x" * (1 << 20) + "x", "larger than 1 MiB, the most a study file may be")):
        with pytest.raises(SpecError, match=re.escape(says)):
            load_study(study(tmp_path, text))


def test_without_a_pruner_min_resource_may_be_anything(tmp_path):
    spec, _ = load_study(study(tmp_path, f"name: s\ntrials: 2\npruner: {{kind: none, min_resource: 50}}\n"
                                         f"job: {{command: python {SCRIPT}, steps: 50}}\nspace: {{B: {{choices: [1]}}}}\n"))
    assert spec.pruner.kind == "none"


def test_what_a_parameter_admits():
    r = Parameter(low=0.0, high=1.0)
    assert r.admits(0.0) and r.admits(1) and r.admits(0.5) and not r.admits(1.5) and not r.admits(-0.1)
    assert not r.admits(True) and not r.admits("0.5")
    i = Parameter(low=0, high=8, step=2)
    assert i.integer and i.admits(4) and not i.admits(4.0) and not i.admits(9)
    assert not Parameter(low=0, high=8.0).integer and Parameter(low=0, high=8.0).admits(4.5)
