"""``coddl replay --quotas``: the teams of a Slurm history as queues, each policy also run over them, and
the quota attainment of each queue in the report — the recorded run's worked out by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coddl.sim.config import SimConfig
from coddl.sim.replay import RECORDED, replay
from coddl.sim.replay_report import render
from coddl.traces.model import TraceError
from coddl.traces.sacct import read_sacct

SAMPLE = Path(__file__).parent.parent / "replay" / "history.sacct"
QUOTAS = "queues:\n  - {name: vision, cohort: lab, nominal_gpus: 2, accounts: [vision]}\n" \
         "  - {name: nlp, cohort: lab, nominal_gpus: 2, accounts: [nlp]}\n"


def test_replay_over_the_teams_quotas(tmp_path: Path) -> None:
    q = tmp_path / "q.yaml"
    q.write_text(QUOTAS)
    rr = replay(read_sacct(SAMPLE), SimConfig(trace="h", gpus=4, gpus_per_node=4, policies=["fifo"], reconfig="zero",
                                               queues=str(q)), workers=1)
    assert list(rr.results) == [RECORDED, "fifo", "fifo+queues"]
    recorded = {s.queue: s for s in rr.queues[RECORDED]}
    # nlp (quota 2) as recorded: 101 (2 GPUs) 9:30-10:30, 102_1 (1) 10:30-11:30, 102_2 (1) 11:00-12:00, and
    # both 102s waiting from 10:00. Owed min(wanted, 2): 2 from 9:30 to 11:30, 1 to 12:00 = 4.5 GPU-h;
    # received min(held, 2): 2 + 0.5 + 1 + 0.5 = 4 GPU-h.
    assert recorded["nlp"].owed_gpu_hours == pytest.approx(4.5)
    assert recorded["nlp"].attainment == pytest.approx(4 / 4.5)
    assert recorded["nlp"].jobs == 3 and recorded["vision"].jobs == 2
    for run in ("fifo", "fifo+queues"):
        assert {s.queue: s.jobs for s in rr.queues[run]} == {"vision": 2, "nlp": 3, "default": 0}
    page = render(rr, "test")
    table = page[page.index('<table id="quotas">'):]
    table = table[: table.index("</table>")]
    assert re.findall(r"<th>([^<]+)</th>", table)[3:] == [RECORDED, "fifo", "fifo+queues"]
    assert "88.9%" in table


def test_a_job_no_queue_can_hold_is_named(tmp_path: Path) -> None:
    q = tmp_path / "q.yaml"
    q.write_text("queues:\n  - {name: vision, nominal_gpus: 1, accounts: [vision]}\n  - {name: default, nominal_gpus: 3}\n")
    with pytest.raises(TraceError, match=r"job 100: needs 2 GPUs, queue vision can hold 1 \(--quotas\)"):
        replay(read_sacct(SAMPLE), SimConfig(trace="h", gpus=4, policies=["fifo"], queues=str(q)), workers=1)
