"""Queue files: every mistake is one line naming the file, the line and the field; membership and the
quotas resolved against a cluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coddl.core import JobSpec
from coddl.queues import Queue, QueueError, QueueSet
from coddl.queues.config import dump_queues, load_queues, parse_queues

GOOD = """\
queues:
  - name: vision
    cohort: lab
    nominal_gpus: 16
    borrowing_limit_gpus: 8
    weight: 2
    users: [alice, "no"]
    accounts: [6c71a0]
  - name: nlp
    cohort: lab
    nominal_gpus: 8
    lending_limit_gpus: 4
    nominal_cpus: 40
    users: [carol]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "queues.yaml"
    p.write_text(text)
    return p


def test_a_good_file(tmp_path: Path) -> None:
    qs = load_queues(write(tmp_path, GOOD))
    assert qs.names == ("vision", "nlp", "default")
    assert qs.queue_of("alice") == 0 and qs.queue_of("no") == 0 and qs.queue_of("carol") == 1
    assert qs.queue_of("zed") == 2 and qs.queue_of("zed", "6c71a0") == 0 and qs.queue_of("carol", "6c71a0") == 1
    q = qs.quotas(32, 160)  # 5 cores per GPU
    assert q.nominal.tolist() == [[16, 8, 8], [80, 40, 40]]  # default: the rest of both
    assert q.cohort.tolist() == [0, 0, -1] and q.weight.tolist() == [2.0, 1.0, 1.0]
    assert q.borrowing_limit[0].tolist() == [8, np.inf, np.inf] and q.lending_limit[0].tolist() == [np.inf, 4, np.inf]
    # vision may borrow 8 (its limit; nlp lends 4 only: 4); nlp may borrow vision's 16
    assert q.ceiling()[0].tolist() == [20, 24, 8]
    assert load_queues(write(tmp_path, _yaml(dump_queues(qs)))) == qs  # what dump writes, load reads


def _yaml(doc: dict) -> str:
    import yaml

    return yaml.safe_dump(doc)


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("nominal_gpus: 16", "nominal_gpus: -1"), "line 4: queues.0.nominal_gpus: must be >= 0, got -1"),
    (GOOD.replace("nominal_gpus: 16", "nominal_gpus: 1.5"), "line 4: queues.0.nominal_gpus: must be an integer"),
    (GOOD.replace("nominal_gpus: 16", "nominal_gpus: yes"), "line 4: queues.0.nominal_gpus: 'yes' is a boolean only"),
    (GOOD.replace("    nominal_gpus: 16\n", ""), "line 2: queue vision: nominal_gpus: required"),
    (GOOD.replace("weight: 2", "wieght: 2"), "line 6: queues.0.wieght: unknown field (valid fields: cohort,"),
    (GOOD.replace("weight: 2", "weight: -1"), "line 6: queues.0.weight: must be >= 0"),
    (GOOD.replace("weight: 2", "weight: .nan"), "line 6: queues.0.weight:"),
    (GOOD.replace("[carol]", "[alice]"), "line 14: queue nlp: user alice is already in queue vision"),
    (GOOD.replace("name: nlp", "name: vision"), "line 9: queue vision: defined twice"),
    (GOOD.replace("name: nlp", "name: 'n l p'"), "line 9: queues.1.name: must be 1-64 letters"),
    (GOOD.replace("cohort: lab\n    nominal_gpus: 8", "cohort: [lab]\n    nominal_gpus: 8"), "line 10: queues.1.cohort:"),
    (GOOD.replace("users: [carol]", "users: ['carol ']"), "queues.1.users: must be 1-64 printable characters"),
    (GOOD + "  - name: default\n    users: [dan]\n", "queue default: holds everyone no other queue lists"),
    (GOOD + "  - name: x\n    nominal_gpus: 1\n  - name: x\n", "line 17: queue x: defined twice"),
    ("queues: 3\n", "line 1: queues: input should be a valid list"),
    ("- name: x\n", "expected a mapping of queue file fields, got a list"),
    ("", "empty (expected a mapping with a list of queues)"),
    ("queues:\n  - name: x\n    nominal_gpus: 1\n    nominal_gpus: 2\n", "line 4"),
    ("queues: [", "line 1: "),
])
def test_bad_files_name_the_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(QueueError) as e:
        load_queues(p)
    assert str(e.value).startswith(f"{p}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_files_that_are_not_queue_files(tmp_path: Path) -> None:
    with pytest.raises(QueueError, match="no such file"):
        load_queues(tmp_path / "missing.yaml")
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"queues:\n  - name: \xff\n")
    with pytest.raises(QueueError, match="not UTF-8"):
        load_queues(p)


def test_quotas_larger_than_the_cluster_are_refused() -> None:
    qs = parse_queues({"queues": [{"name": "a", "nominal_gpus": 6}, {"name": "b", "nominal_gpus": 4}]}, "req")
    assert qs.quotas(10, 40).nominal[0].tolist() == [6, 4, 0]
    with pytest.raises(QueueError, match="add up to 10 GPUs and the cluster has 8"):
        qs.quotas(8, 40)
    with pytest.raises(QueueError, match="add up to 50 CPU cores and the cluster has 40"):
        QueueSet((Queue("a", 1, nominal_cpus=50),)).quotas(8, 40)


def test_jobs_their_queue_can_never_hold() -> None:
    qs = QueueSet((Queue("a", 4, users=("ann",)), Queue("b", 2, cohort="c", users=("bob",)),
                   Queue("d", 2, cohort="c", lending_limit_gpus=1)))
    specs = [JobSpec("fits", 0, 4, 1.0, "m", user="ann"), JobSpec("big", 0, 5, 1.0, "m", user="ann"),
             JobSpec("borrow", 0, 3, 1.0, "m", user="bob"), JobSpec("toomuch", 0, 4, 1.0, "m", user="bob"),
             JobSpec("nobody", 0, 1, 1.0, "m", user="zed")]
    big = qs.too_large(specs, qs.quotas(8, 32))
    assert [(s.job_id, q, cap) for s, q, cap in big] == [("big", "a", 4), ("toomuch", "b", 3), ("nobody", "default", 0)]
