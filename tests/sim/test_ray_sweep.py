"""``coddl experiment ... --ray-address``: the same grid as the local process pool, run as Ray tasks on
a real two-node Ray cluster on loopback (``tests/runtime/ray_cluster.py``, in a subprocess so that
Ray's processes stay out of this one), writes the same results; a run that fails on every try, or
an address nobody answers at, is one line and exit 2."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from ray_cluster import loopback_cluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, dict[str, str]]]:
    with loopback_cluster() as c:
        yield c


def coddl(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coddl.cli", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def runs_without_timings(path: Path) -> list[dict[str, str]]:
    """runs.csv but for its ``wall_s`` column: each run's own time, which no two runs share."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and "wall_s" in rows[0]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


@pytest.mark.timeout(600)
def test_the_ray_sweep_writes_what_the_local_pool_writes(cluster, tmp_path):
    address, env = cluster
    sweep = ("experiment", "coddl-nsdi21", "--vcs", "2869ce", "--jobs", "40", "--seeds", "1,2",
             "--policies", "fifo,afs-p")
    local = coddl(*sweep, "--workers", "2", "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    on_ray = coddl(*sweep, "--ray-address", address, "--out", str(tmp_path / "ray"), env=env)
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "4/4" in on_ray.stdout  # the progress bar counted every run
    # table.csv (means and ratios) and the chart hold no timings: equal byte for byte; runs.csv
    # holds each run's wall time, so it is compared without that column
    for name in ("table.csv", "avg_jct_by_vc.png"):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name
    assert runs_without_timings(tmp_path / "local" / "runs.csv") == runs_without_timings(tmp_path / "ray" / "runs.csv")


# Run by a fresh interpreter: its functions belong to __main__, which Ray ships to the workers by
# value. "flaky" fails its first try (the retry runs it again), "broken" fails every try.
GRID_WITH_A_FAILING_RUN = textwrap.dedent("""
    import os, sys
    from coddl.experiments.grid import run_grid
    from coddl.experiments.ray_grid import RunFailed

    TRIED = sys.argv[2]  # a global of __main__: it travels with one() (the workers' sys.argv is Ray's)

    def one(group, seed, policy, jobs):
        if policy == "flaky" and not os.path.exists(TRIED):
            open(TRIED, "w").close()
            raise OSError("first try")
        if policy == "broken" and group == "b" and seed == 2:
            raise ValueError("no trace for b\\nsecond line")
        return (group, seed, policy)

    print(run_grid(one, ["a"], [1, 2], ["ok", "flaky"], None, ray_address=sys.argv[1]))
    try:
        run_grid(one, ["a", "b"], [1, 2], ["ok", "broken"], None, ray_address=sys.argv[1])
    except RunFailed as e:
        print(f"RunFailed: {e}")
""")


@pytest.mark.timeout(300)
def test_a_run_is_retried_and_one_failing_every_try_is_one_line(cluster, tmp_path):
    address, env = cluster
    r = subprocess.run([sys.executable, "-c", GRID_WITH_A_FAILING_RUN, address, str(tmp_path / "tried")],
                       capture_output=True, text=True, timeout=240, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr  # neither the retries nor the failure
    assert (tmp_path / "tried").exists()
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "[('a', 1, 'ok'), ('a', 1, 'flaky'), ('a', 2, 'ok'), ('a', 2, 'flaky')]", r.stdout
    assert lines[1:] == ["RunFailed: run b seed 2 broken failed on the Ray cluster after 2 retries: "
                         "ValueError: no trace for b"], r.stdout


@pytest.mark.timeout(60)
def test_an_unreachable_ray_address_is_one_line_and_exit_2_at_once(tmp_path):
    started = time.monotonic()
    r = coddl("experiment", "coddl-nsdi21", "--vcs", "2869ce", "--jobs", "40", "--seeds", "1", "--policies", "fifo",
              "--ray-address", "127.0.0.1:1", "--ray-connect-timeout-s", "5", "--out", str(tmp_path), timeout=50)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: cannot reach the Ray cluster at 127.0.0.1:1: nothing listens there (is `ray start --head` running, "
        "and is this its GCS port?)"]
    assert time.monotonic() - started < 30  # the process's start-up; the address itself is refused at once
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_cli_reports_a_failed_run_in_one_line_and_exit_2(monkeypatch, tmp_path):
    """What ``coddl experiment`` makes of RunFailed (above, the grid's own on a real cluster)."""
    from typer.testing import CliRunner

    from coddl.cli.main import app
    from coddl.experiments import aiturbo
    from coddl.experiments.ray_grid import RunFailed

    line = "run pollux-1 seed 1 fifo failed on the Ray cluster after 2 retries: ValueError: boom"

    def failing(*args, **kw):
        assert kw["ray_address"] == "10.0.0.1:6379" and kw["ray_connect_timeout_s"] == 4.0
        raise RunFailed(line)

    monkeypatch.setattr(aiturbo, "run_all", failing)
    r = CliRunner().invoke(app, ["experiment", "aiturbo", "--traces", "pollux-1", "--policies", "fifo", "--out",
                                 str(tmp_path), "--ray-address", "10.0.0.1:6379", "--ray-connect-timeout-s", "4"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [f"error: {line}"]
    assert "Traceback" not in r.output
