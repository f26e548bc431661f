"""Hand-computed pins of ``runtime/limits.py``: the operator's limits refuse what makes no sense with a
message naming the value, and the fit rule counts the GPUs of one type at the boundary."""

from __future__ import annotations

import pytest

from coddl.core.cluster import Cluster, Node
from coddl.runtime.limits import (DEFAULT_MAX_BODY_BYTES, MAX_STORE_INT, ApiLimits, fit_problem, held_message,
                                  largest_gang)


def test_the_defaults_and_the_store_range():
    assert MAX_STORE_INT == 2_147_483_647 and DEFAULT_MAX_BODY_BYTES == 262_144
    assert ApiLimits() == ApiLimits(262_144, "refuse")


def test_the_body_limit_is_at_least_one_kib():
    assert ApiLimits(max_body_bytes=1024).max_body_bytes == 1024
    with pytest.raises(ValueError) as e:
        ApiLimits(max_body_bytes=1023)
    assert str(e.value) == "the body limit must be at least 1 KiB, got 1023 bytes"


def test_too_large_is_refuse_or_hold():
    assert ApiLimits(too_large="hold").too_large == "hold"
    assert ApiLimits(too_large="refuse").too_large == "refuse"
    with pytest.raises(ValueError) as e:
        ApiLimits(too_large="fail")  # type: ignore[arg-type]
    assert str(e.value) == "too_large must be refuse or hold, got 'fail'"


def test_the_largest_gang_is_the_largest_gpu_type_not_the_cluster():
    """V100: 3 + 5 = 8 GPUs; K80: 6 (one node larger than any V100 node, but fewer GPUs of its type)."""
    mixed = Cluster(nodes=(Node("a", 3, "V100"), Node("c", 6, "K80"), Node("b", 5, "V100")))
    assert largest_gang(mixed) == 8
    assert fit_problem(mixed, 8) is None and fit_problem(mixed, 1) is None
    assert fit_problem(mixed, 9) == "needs 9 GPUs at once and the cluster has at most 8 GPUs of one type"
    one = Cluster.for_gpus(3)
    assert largest_gang(one) == 3
    assert fit_problem(one, 3) is None
    assert fit_problem(one, 4) == "needs 4 GPUs at once and the cluster has 3 GPUs"


def test_the_held_message_says_why_and_what_it_waits_for():
    assert held_message("needs 4 GPUs at once and the cluster has 3 GPUs") == \
        "held: needs 4 GPUs at once and the cluster has 3 GPUs; it waits for a larger cluster"
