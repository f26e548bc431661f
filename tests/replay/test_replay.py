"""``coddl replay``: a hand-written ``sacct`` history replayed as a subprocess into one self-contained HTML
report, checked for its tables (with hand-computed figures) and plots; bad input exits 2 with one line;
and coddl's own store replayed with the work its jobs really did.

The sample (history.sacct) on 4 GPUs, by hand. Recorded: JCTs 2, 1, 1.5, 2, 1⅓ h → average 1.57 h;
queueing 0, 0, ½, 1, ⅓ h → 0.37 h; 10 GPU-hours in 3 hours on 4 GPUs → 83.3%. FIFO on the same 4 GPUs
(each job rigid at its GPUs for its recorded run time): 100 [0, 2 h], 101 [½, 1½], 102_1 and 102_2
wait for 101's GPUs and run [1½, 2½], 105 waits for 100's and runs [2, 3] → JCTs 2, 1, 1½, 1½, 1⅓ h:
average 1.47 h, queueing 0.27 h.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.models import runtime_curves
from coddl.runtime.store import ProgressUpdate, Store
from coddl.sim.config import SimConfig
from coddl.sim.replay import RECORDED, replay
from coddl.traces.coddl_store import read_store
from coddl.traces.model import TraceError
from coddl.traces.sacct import read_sacct

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "history.sacct"


class Tables(HTMLParser):
    """Every table's rows of cell texts by table id, every <img> src, every external reference."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[str] = []
        self.external: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith("data:"):
                self.external.append(a[key])
        if tag in ("script", "link", "iframe"):
            self.external.append(tag)
        if tag == "table":
            self._table = a.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "img":
            self.images.append(a["src"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def coddl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coddl.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)


@pytest.mark.slow
def test_sacct_history_replayed_into_one_self_contained_report(tmp_path):
    out = tmp_path / "report.html"
    r = coddl("replay", str(SAMPLE), "--gpus", "4", "--gpus-per-node", "4", "--policies", "fifo,afs-p",
              "--reconfig", "zero", "--workers", "2", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "5 jobs to replay (skipped: 2 never started, 1 not ended when exported, 1 no GPUs (CPU-only))" in r.stdout
    page = Tables()
    page.feed(out.read_text())
    assert page.external == []  # nothing outside the file: no scripts, stylesheets or linked images
    assert len(page.images) == 3
    for src in page.images:
        assert src.startswith("data:image/png;base64,") and base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"

    summary = {row[0]: row for row in page.tables["summary"][1:]}
    head = page.tables["summary"][0]
    col = {name: head.index(name) for name in ("avg JCT (h)", "avg queueing (h)", "GPU utilisation", "kind")}
    assert list(summary) == [RECORDED, "fifo", "afs-p"]
    assert [summary[RECORDED][col[c]] for c in ("avg JCT (h)", "avg queueing (h)", "GPU utilisation")] == \
        ["1.57", "0.37", "83.3%"]
    assert [summary["fifo"][col[c]] for c in ("avg JCT (h)", "avg queueing (h)", "kind")] == ["1.47", "0.27", "rigid"]
    assert summary["afs-p"][col["kind"]] == "elastic"

    teams = {row[0]: row for row in page.tables["teams"][1:]}
    assert page.tables["teams"][0][:4] == ["team", "jobs", "GPU-hours", RECORDED]
    assert teams["vision"][1:4] == ["2", "6.0", "1.67"] and teams["nlp"][1:4] == ["3", "4.0", "1.50"]
    assert teams["nlp"][4].startswith("1.33")  # FIFO: 1, 1½, 1½ h
    assert [row[0] for row in page.tables["fairness"][1:]] == ["fifo", "afs-p"]


@pytest.mark.slow
def test_a_bad_row_exits_2_with_one_line_naming_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.sacct"
    lines = SAMPLE.read_text().splitlines()
    lines[3] = lines[3].replace("gres/gpu:a100=1", "gres/gpu:a100=1.5")
    bad.write_text("\n".join(lines) + "\n")
    r = coddl("replay", str(bad), "--gpus", "4", "--policies", "fifo", "--out", str(tmp_path / "x.html"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: bad.sacct:4: AllocTRES: gres/gpu:a100: expected a whole number of GPUs, got '1.5'"
    assert not (tmp_path / "x.html").exists()


def test_a_job_larger_than_the_replay_cluster_is_refused_before_any_simulation():
    with pytest.raises(TraceError, match=r"^history.sacct: job 100: needs 2 GPUs, the replay cluster has 1 "):
        replay(read_sacct(SAMPLE), SimConfig(trace="h", gpus=1, policies=["fifo"]), workers=1)


def test_coddl_store_replays_the_work_its_jobs_did(tmp_path):
    """Job a: 100 steps at 4 steps/s on 2 GPUs, its curve (default) gives 2/1.25 steps/s there, so it ran
    2.5× its curve and its work is 100/2.5 steps: alone on 2 GPUs, 25 s. Job b: 50 steps at 5/s on 1
    GPU, 10 s. FIFO on 2 GPUs: a runs [0, 25], b (arrived at 5) waits for a's GPUs and runs [25, 35]."""
    store = Store.for_state_dir(tmp_path)
    spec = {"name": "a", "entrypoint": "m:f", "steps": 100, "min_gpus": 2, "max_gpus": 2}
    a = store.add_job("a", "alice", spec, 100)
    b = store.add_job("b", "bob", {**spec, "name": "b", "steps": 50, "min_gpus": 1, "max_gpus": 1}, 50)
    never = store.add_job("c", "carol", {**spec, "name": "c"}, 100)
    t = a.submitted_at
    store.record_plan([Action(ActionKind.START, str(a.id), (), (0, 1))], at=t + 10)
    store.record_progress([ProgressUpdate(a.id, t + 20, 40, 2, 4.0, None), ProgressUpdate(a.id, t + 30, 100, 2, 4.0, None)])
    store.finish(a.id, JobStatus.FINISHED, t + 35)
    store.record_plan([Action(ActionKind.START, str(b.id), (), (0,))], at=t + 40)
    store.record_progress([ProgressUpdate(b.id, t + 45, 50, 1, 5.0, None)])
    store.finish(b.id, JobStatus.FINISHED, t + 50)
    store.finish(never.id, JobStatus.CANCELLED, t + 51, "cancelled")
    store.close()

    h = read_store(f"sqlite:///{tmp_path / 'coddl.db'}", runtime_curves())
    assert h.skipped == {"never started": 1} and h.peak_gpus == 2
    work = {r.job.job_id: r.job.steps for r in h.jobs}
    assert work[f"coddl-{a.id}"] == pytest.approx(100 / 2.5) and work[f"coddl-{b.id}"] == pytest.approx(10.0)
    assert {r.account: r.gpu_seconds for r in h.jobs} == {"alice": pytest.approx(50.0), "bob": pytest.approx(10.0)}

    offset = b.submitted_at - a.submitted_at  # b was submitted just after a
    rr = replay(h, SimConfig(trace=h.name, gpus=2, policies=["fifo"], reconfig="zero", rate="curves"), workers=1)
    jct = {rec.spec.job_id: rec.jct for rec in rr.results["fifo"].records}
    assert jct[f"coddl-{a.id}"] == pytest.approx(25.0) and jct[f"coddl-{b.id}"] == pytest.approx(35.0 - offset)
    recorded = {rec.spec.job_id: rec.jct for rec in rr.results[RECORDED].records}
    assert recorded[f"coddl-{a.id}"] == pytest.approx(35.0) and recorded[f"coddl-{b.id}"] == pytest.approx(50.0 - offset)
    assert set(rr.teams) == {"alice", "bob"} and rr.teams["alice"]["fifo"].avg_jct == pytest.approx(25.0)
