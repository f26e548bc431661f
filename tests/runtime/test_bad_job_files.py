"""A corpus of bad job files through ``coddl submit`` (in-process, against a live API on SQLite and on
PostgreSQL): each exits 2 with one line naming the file, line and field, no traceback, and the server's
jobs, tokens and events are as they were. The alias bomb also runs as a real ``coddl submit`` process: it must fail at
once, where PyYAML's ``safe_load`` plus validation ran into out-of-memory."""

from __future__ import annotations

import subprocess
import sys

import pytest
from api_server import live_api
from postgres import BACKENDS, backend_url
from runtime_live import TINY_JOB
from typer.testing import CliRunner

from coddl.cli.main import app
from coddl.runtime.store import Store

HEAD = f"name: j\ncommand: python {TINY_JOB}\n"
OK = HEAD + "steps: 10\n"


def bomb(levels: int = 9) -> str:
    """The "billion laughs": 9 levels of 9 aliases each, 9^9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + f"\n{HEAD}steps: 10\n"


FILES: list[tuple[str, str | bytes, str]] = [  # (case, file content, message fragment after "FILE: ")
    ("alias bomb", bomb(), "line 3: more than 16 aliases (*name)"),
    ("alias cycle", HEAD + "steps: 10\nenv: &e {A: *e}\n", "line 4: env.A: an alias refers to a collection that"),
    ("nested 10,000 deep", HEAD + "steps: 10\nargs: " + "[" * 10_000 + "]" * 10_000 + "\n",
     "line 4: nested more than 16 levels deep"),
    ("duplicate key", OK + "steps: 20\n", "line 4: steps: duplicate key (first on line 3)"),
    ("duplicate env key", OK + "env:\n  A: '1'\n  A: '2'\n", "line 6: env.A: duplicate key (first on line 5)"),
    ("merge key", "base: &b {steps: 10}\n<<: *b\n" + HEAD, "line 2: merge keys (<<) are not supported"),
    ("steps: yes", HEAD + "steps: yes\n", "line 3: steps: 'yes' is a boolean only in YAML 1.1"),
    ("steps: on", HEAD + "steps: on\n", "line 3: steps: 'on' is a boolean only in YAML 1.1"),
    ("min_gpus: off", OK + "min_gpus: off\n", "line 4: min_gpus: 'off' is a boolean only in YAML 1.1"),
    ("steps: 0x10", HEAD + "steps: 0x10\n", "line 3: steps: '0x10' is a number only in YAML 1.1"),
    ("steps: 1_000", HEAD + "steps: 1_000\n", "line 3: steps: '1_000' is a number only in YAML 1.1"),
    ("steps: 010", HEAD + "steps: 010\n", "line 3: steps: '010' is a number only in YAML 1.1"),
    ("steps: 0o17", HEAD + "steps: 0o17\n", "line 3: steps: must be an integer, got '0o17'"),
    ("steps: 1:30", HEAD + "steps: 1:30\n", "line 3: steps: '1:30' is a number only in YAML 1.1"),
    ("steps: a date", HEAD + "steps: 2024-01-02\n", "line 3: steps: '2024-01-02' is a date in YAML 1.1: quote it"),
    ("steps: 1e3", HEAD + "steps: 1e3\n", "line 3: steps: must be an integer, got 1000.0"),
    ("steps: 2^63", HEAD + "steps: 9223372036854775808\n", "line 3: steps: must be <= 2147483647 (the largest integer the store holds)"),
    ("epochs × steps_per_epoch", HEAD + "epochs: 65536\nsteps_per_epoch: 65536\n",
     "line 4: steps_per_epoch: epochs × steps_per_epoch = 4294967296 steps, more than the store holds"),
    ("min_gpus: 2.0", OK + "min_gpus: 2.0\n", "line 4: min_gpus: must be an integer, got 2.0"),
    ("steps: 'ten'", HEAD + "steps: ten\n", "line 3: steps: must be an integer, got 'ten'"),
    ("model: lone surrogate", OK + 'model: "\\ud800"\n', "line 4: model: is not valid Unicode (a lone surrogate U+D800"),
    ("env value: NUL", OK + 'env: {X: "a\\0b"}\n', "line 4: env.X: must not contain a NUL character"),
    ("env value: a list", OK + "env: {X: [1, 2]}\n", "line 4: env.X: must be text, got [1, 2]"),
    ("env name: reserved", OK + "env: {CODDL_SLOT: '0'}\n", "line 4: env: CODDL_SLOT: names starting with CODDL_"),
    ("python tag", OK + "env: !!python/object/apply:os.system ['echo pwned']\n",
     "line 4: env: YAML tags are not supported (tag:yaml.org,2002:python/object/apply:os.system)"),
    ("int tag", HEAD + "steps: !!int '10'\n", "line 3: steps: YAML tags are not supported"),
    ("two documents", OK + "---\nname: k\n", "line 4: expected a single document in the stream, but found another"),
    ("not UTF-8", OK.encode() + b"model: caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset"),
    ("a NUL byte", OK.encode() + b"model: a\x00b\n", "character U+0000 at offset"),
    ("larger than 256 KiB", OK + "env: {X: '" + "x" * 300_000 + "'}\n", "larger than 256 KiB, the most a job file"),
    ("empty", "", "empty (expected a mapping of job fields)"),
    ("only a comment", "# nothing here\n", "empty (expected a mapping of job fields)"),
    ("a list", "- name: j\n", "expected a mapping of job fields, got a list"),
    ("unknown field", OK + "gpus: 2\n", "line 4: gpus: unknown field (valid fields: name,"),
    ("name: trailing newline", f'name: "j\\n"\ncommand: python {TINY_JOB}\nsteps: 10\n', "line 1: name: must be 1-64 letters"),
    ("not YAML", "name: [unclosed\n", "line 2: while parsing a flow sequence"),
    ("no such script", "name: j\ncommand: python /no/such/train.py\nsteps: 10\n", "command: no such script"),
]


def test_the_corpus_has_at_least_20_files():
    assert len(FILES) >= 20 and len({c for c, _, _ in FILES}) == len(FILES)


@pytest.fixture(scope="module", params=BACKENDS)
def api(request, tmp_path_factory):
    state = tmp_path_factory.mktemp("job-files")
    store = Store(backend_url(request, request.param, state))
    with live_api(store, state) as api:
        assert api.clients["alice"].post("/jobs", json={"name": "kept", "command": ["python", str(TINY_JOB)],
                                                        "steps": 10}).status_code == 201
        yield api
    store.close()


@pytest.mark.parametrize("case,content,fragment", FILES, ids=[c for c, _, _ in FILES])
def test_a_bad_job_file_exits_2_naming_line_and_field(api, tmp_path, case, content, fragment):
    path = tmp_path / "job.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = api.snapshot()
    r = CliRunner().invoke(app, ["submit", str(path), "--server", api.url, "--token", api.tokens["alice"]])
    assert r.exit_code == 2, (case, r.output)
    out = " ".join(r.output.split())  # Rich may wrap the line to the runner's width
    assert f"{path}: {fragment}" in out, out
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    assert api.snapshot() == before


def test_a_job_too_large_for_the_cluster_is_refused_by_the_server(api, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(OK + "min_gpus: 8\n")
    before = api.snapshot()
    r = CliRunner().invoke(app, ["submit", str(path), "--server", api.url, "--token", api.tokens["alice"]])
    assert r.exit_code == 1
    assert "422 Unprocessable" in r.output and "min_gpus: needs 8 GPUs at once and the cluster has 4 GPUs" in r.output
    assert api.snapshot() == before


def test_the_alias_bomb_fails_at_once_as_a_real_command(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb())
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "submit", str(path), "--server", "http://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {path}: line 3: more than 16 aliases (*name); a job file needs "
                                             "few, and nested aliases can expand to billions of values"]


def test_a_file_that_reads_well_in_any_yaml_is_accepted(api, tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(OK + "min_gpus: 1\nmax_gpus: 2\nbatch_size: 64\nmodel: 'yes'\nenv:\n  FLAG: yes\n  V: 1.10\n")
    r = CliRunner().invoke(app, ["submit", str(path), "--server", api.url, "--token", api.tokens["alice"]])
    assert r.exit_code == 0, r.output
    job_id = int(r.output.split("submitted job ")[1].split()[0])
    spec = api.clients["alice"].get(f"/jobs/{job_id}").json()["spec"]
    assert (spec["model"], spec["env"], spec["max_gpus"]) == ("yes", {"FLAG": "yes", "V": "1.10"}, 2)

