"""Every policy's per-job results on two small workloads, pinned bit for bit (float.hex) to the
values of the plain-numpy engine that the compiled one replaced: a change to the engine, table,
placer or a policy's speed path that moves any finish time, first start, attained service, resize
count or the utilisation series fails here. A deliberate change of a policy's rule regenerates
the digests (the generator is this file's ``digests``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from coddl.sim.config import SimConfig
from coddl.sim.run import prepare, run_policy

PINNED = json.loads((Path(__file__).parent / "data" / "pinned_results.json").read_text())
WORKLOADS = {
    "philly-200-32": dict(trace="philly", jobs=200, gpus=32),
    # two GPU types, restart pauses: the Python placer path and the pause accounting
    "mixed-restart-120": dict(trace="philly", jobs=120,
                              cluster=str(Path(__file__).parents[2] / "examples" / "clusters" / "mixed.yaml"),
                              reconfig="restart"),
}
POLICIES = sorted({k.split("/", 1)[1] for k in PINNED})


def digests(workload: str) -> dict[str, str]:
    cfg = SimConfig.build(**WORKLOADS[workload], policies=POLICIES)
    prep = prepare(cfg)
    out = {}
    for p in POLICIES:
        r = run_policy(prep, p, cfg)
        rows = sorted((x.spec.job_id, x.status, x.finish.hex(), x.first_start.hex(), x.attained_service.hex(),
                       x.resizes) for x in r.records)
        out[f"{workload}/{p}"] = hashlib.sha256(repr((rows, r.utilisation)).encode()).hexdigest()[:16]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_every_policy_reproduces_its_pinned_results(workload: str) -> None:
    got = digests(workload)
    want = {k: v for k, v in PINNED.items() if k.startswith(workload + "/")}
    assert got == want
