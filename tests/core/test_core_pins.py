"""The core data types pinned by hand: the active-job table (``coddl/core/table.py``: its closed-form
progress and service with pauses and rate changes, swap-remove keeping ``order``/``pos``/``row``
consistent, growth past capacity keeping every column, ``arrivals_in_order``), the cluster's
constructors and index maps (``coddl/core/cluster.py``) and the job spec's validation
(``coddl/core/job.py``: every bound on both sides, every message).

Every expected value below is computed by hand in the comment beside it.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.core.cluster import GpuType, LinkSpec, Node
from coddl.core.job import MIN_GPU_FRACTION, JobStatus
from coddl.core.table import FLOAT_COLS, INT_COLS, JobRecord, JobTable


def spec(job_id: str, arrival: float = 0.0, requested: int = 1, work: float = 100.0, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, arrival=arrival, requested_gpus=requested, total_work=work, model="m", **kw)


# ====================================================================== the table
class TestTableFresh:
    def test_a_fresh_table_is_empty_with_the_capacity_asked_for(self):
        t = JobTable(3)
        assert t.n == 0 and t.ids == [] and t.specs == [] and t.row == {}
        assert t.F.shape == (len(FLOAT_COLS), 3) and t.F.dtype == np.float64
        assert t.I.shape == (len(INT_COLS), 3) and t.I.dtype == np.int64
        assert t.order.shape == (3,) and t.order.dtype == np.int64
        assert t.pos.shape == (3,) and t.pos.dtype == np.int64
        assert t.arrivals_in_order is True
        assert len(t.work_done(5.0)) == 0 and len(t.attained_service(5.0)) == 0 and len(t.cpu_service(5.0)) == 0

    def test_default_capacity_is_1024(self):
        t = JobTable()
        assert t.F.shape == (len(FLOAT_COLS), 1024) and t.I.shape == (len(INT_COLS), 1024)
        assert t.share.shape == (1024,) and t.order.shape == (1024,)

    def test_every_column_name_is_a_view_of_its_row_of_the_packed_arrays(self):
        t = JobTable(4)
        for i, c in enumerate(FLOAT_COLS):
            col = getattr(t, c)
            assert col.shape == (4,) and np.shares_memory(col, t.F[i])
            col[2] = 100.0 + i
        for i, c in enumerate(INT_COLS):
            col = getattr(t, c)
            assert col.shape == (4,) and col.dtype == np.int64 and np.shares_memory(col, t.I[i])
            col[1] = 200 + i
        assert list(t.F[:, 2]) == [100.0 + i for i in range(len(FLOAT_COLS))]
        assert list(t.I[:, 1]) == [200 + i for i in range(len(INT_COLS))]


class TestTableAdd:
    def test_add_fills_every_column(self):
        t = JobTable(4)
        s = spec("a", arrival=3.5, requested=2, work=250.0, min_gpus=2)
        r = t.add(s, uid=7, model=5, max_gpus=6, now=4.25, gpu_type=1, min_cpus=3, max_cpus=9)
        assert r == 0 and t.n == 1
        assert t.ids == ["a"] and t.specs == [s] and t.row == {"a": 0}
        f = dict(zip(FLOAT_COLS, t.F[:, 0]))
        assert f["arrival"] == 3.5 and f["total_work"] == 250.0
        assert f["work0"] == 0.0 and f["service0"] == 0.0 and f["cpu_service0"] == 0.0
        assert f["t0"] == 4.25 and f["rate"] == 0.0 and f["speed"] == 1.0
        assert math.isnan(f["first_start"]) and math.isnan(f["last_start"])
        assert f["service_at_last_start"] == 0.0 and f["paused_until"] == 0.0
        assert f["resize_cost"] == 0.0 and f["shared_fraction"] == 0.0
        i = dict(zip(INT_COLS, t.I[:, 0]))
        assert i == {"uid": 7, "requested": 2, "min_gpus": 2, "max_gpus": 6, "model": 5, "share": 0,
                     "gpu_type": 1, "cpus": 0, "min_cpus": 3, "max_cpus": 9, "resizes": 0}
        assert t.order[0] == 0 and t.pos[0] == 0

    def test_add_defaults_any_type_and_no_cpu_bounds(self):
        t = JobTable(2)
        t.add(spec("a"), uid=0, model=0, max_gpus=1, now=0.0)
        assert t.gpu_type[0] == -1 and t.min_cpus[0] == 0 and t.max_cpus[0] == 0

    def test_add_overwrites_a_row_left_dirty_by_a_removed_job(self):
        t = JobTable(2)
        t.add(spec("a"), uid=0, model=0, max_gpus=1, now=0.0)
        t.F[:, 0] = 77.0
        t.I[:, 0] = 77
        t.remove("a")
        t.add(spec("b", arrival=1.0, work=10.0), uid=1, model=2, max_gpus=3, now=2.0)
        assert list(t.F[:, 0][[2, 3, 4, 6, 10, 11, 12, 13]]) == [0.0] * 8
        assert t.F[7, 0] == 1.0 and math.isnan(t.F[8, 0]) and math.isnan(t.F[9, 0])
        assert t.share[0] == 0 and t.cpus[0] == 0 and t.resizes[0] == 0

    def test_rows_are_handed_out_in_turn(self):
        t = JobTable(8)
        rows = [t.add(spec(j), uid=k, model=0, max_gpus=1, now=0.0) for k, j in enumerate("abc")]
        assert rows == [0, 1, 2] and t.n == 3
        assert t.ids == ["a", "b", "c"] and t.row == {"a": 0, "b": 1, "c": 2}
        assert list(t.order[:3]) == [0, 1, 2] and list(t.pos[:3]) == [0, 1, 2]

    def test_a_duplicate_id_is_refused_and_leaves_the_table_alone(self):
        t = JobTable(4)
        t.add(spec("a"), uid=0, model=0, max_gpus=1, now=0.0)
        with pytest.raises(ValueError, match=re.escape("duplicate job id 'a'")):
            t.add(spec("a", arrival=5.0), uid=1, model=0, max_gpus=1, now=5.0)
        assert t.n == 1 and t.ids == ["a"] and t.arrival[0] == 0.0


class TestTableGrowth:
    def test_growth_doubles_and_keeps_every_column_order_and_position(self):
        t = JobTable(2)
        for k in range(5):
            r = t.add(spec(f"j{k}", arrival=float(k), requested=k + 1, work=10.0 + k), uid=100 + k, model=k,
                      max_gpus=k + 2, now=0.5 * k, gpu_type=k % 2, min_cpus=k, max_cpus=2 * k)
            assert r == k
            t.rate[r] = 1.5 * k
            t.share[r] = k + 1
            t.cpus[r] = 3 * k
            if k == 2:
                assert t.F.shape[1] == 4  # the third job grew 2 → 4
        assert t.n == 5 and t.F.shape == (len(FLOAT_COLS), 8) and t.I.shape == (len(INT_COLS), 8)
        assert t.order.shape == (8,) and t.pos.shape == (8,)
        assert t.I.dtype == np.int64 and t.order.dtype == np.int64 and t.pos.dtype == np.int64
        assert t.F.dtype == np.float64
        for k in range(5):
            assert t.arrival[k] == k and t.total_work[k] == 10.0 + k and t.t0[k] == 0.5 * k
            assert t.rate[k] == 1.5 * k and t.speed[k] == 1.0 and math.isnan(t.first_start[k])
            assert t.uid[k] == 100 + k and t.requested[k] == k + 1 and t.model[k] == k
            assert t.max_gpus[k] == k + 2 and t.gpu_type[k] == k % 2 and t.min_cpus[k] == k
            assert t.max_cpus[k] == 2 * k and t.share[k] == k + 1 and t.cpus[k] == 3 * k
        assert list(t.order[:5]) == [0, 1, 2, 3, 4] and list(t.pos[:5]) == [0, 1, 2, 3, 4]
        # the column names follow the new arrays
        assert np.shares_memory(t.share, t.I) and np.shares_memory(t.arrival, t.F)
        t.share[4] = 9
        assert t.I[INT_COLS.index("share"), 4] == 9

    def test_growth_keeps_a_permuted_submission_order(self):
        t = JobTable(2)
        t.add(spec("a"), uid=0, model=0, max_gpus=1, now=0.0)
        t.add(spec("b"), uid=1, model=0, max_gpus=1, now=0.0)
        t.remove("a")  # b moves to row 0
        t.add(spec("c"), uid=2, model=0, max_gpus=1, now=0.0)  # row 1
        t.add(spec("d"), uid=3, model=0, max_gpus=1, now=0.0)  # row 2: grows 2 → 4
        assert t.F.shape[1] == 4
        assert t.ids == ["b", "c", "d"]
        assert list(t.order[:3]) == [0, 1, 2] and list(t.pos[:3]) == [0, 1, 2]
        t.remove("b")  # d moves to row 0; order is c, d → rows 1, 0
        assert t.ids == ["d", "c"] and list(t.order[:2]) == [1, 0] and list(t.pos[:2]) == [1, 0]
        t.add(spec("e"), uid=4, model=0, max_gpus=1, now=0.0)
        t.add(spec("f"), uid=5, model=0, max_gpus=1, now=0.0)
        t.add(spec("g"), uid=6, model=0, max_gpus=1, now=0.0)  # row 4: grows 4 → 8
        assert t.F.shape[1] == 8
        assert t.ids == ["d", "c", "e", "f", "g"]
        assert list(t.order[:5]) == [1, 0, 2, 3, 4] and list(t.pos[:5]) == [1, 0, 2, 3, 4]


class TestTableRemove:
    def table4(self) -> JobTable:
        t = JobTable(8)
        for k, j in enumerate("abcd"):
            t.add(spec(j, arrival=float(k), work=10.0 * (k + 1)), uid=k, model=k, max_gpus=k + 1, now=0.0)
            t.share[k] = k + 1
        return t

    def test_remove_returns_the_final_start_service_resizes_and_work(self):
        t = self.table4()
        t.first_start[1] = 2.5
        t.service0[1] = 12.75
        t.resizes[1] = 3
        t.work0[1] = 6.5
        s, first, service, resizes, work = t.remove("b")
        assert s.job_id == "b" and s.total_work == 20.0
        assert (first, service, resizes, work) == (2.5, 12.75, 3, 6.5)
        assert type(first) is float and type(service) is float and type(resizes) is int and type(work) is float

    def test_remove_swaps_the_last_row_in(self):
        t = self.table4()
        t.remove("b")  # d (row 3) moves into row 1
        assert t.n == 3 and t.ids == ["a", "d", "c"]
        assert [s.job_id for s in t.specs] == ["a", "d", "c"]
        assert t.row == {"a": 0, "d": 1, "c": 2}
        assert t.arrival[1] == 3.0 and t.total_work[1] == 40.0 and t.uid[1] == 3 and t.share[1] == 4
        assert t.model[1] == 3 and t.max_gpus[1] == 4
        # submission order a, c, d → rows 0, 2, 1
        assert list(t.order[:3]) == [0, 2, 1] and list(t.pos[:3]) == [0, 2, 1]
        assert list(t.work_done(0.0)) == [0.0, 0.0, 0.0] and len(t.work_done(0.0)) == 3

    def test_remove_the_first_row(self):
        t = self.table4()
        t.remove("a")  # d into row 0; order b, c, d → rows 1, 2, 0
        assert t.ids == ["d", "b", "c"] and t.row == {"d": 0, "b": 1, "c": 2}
        assert list(t.order[:3]) == [1, 2, 0]
        assert list(t.pos[:3]) == [2, 0, 1]
        assert t.uid[0] == 3

    def test_remove_the_last_row_moves_nothing(self):
        t = self.table4()
        spec_d, *_ = t.remove("d")
        assert spec_d.job_id == "d"
        assert t.n == 3 and t.ids == ["a", "b", "c"] and t.row == {"a": 0, "b": 1, "c": 2}
        assert [s.job_id for s in t.specs] == ["a", "b", "c"]
        assert list(t.uid[:3]) == [0, 1, 2] and list(t.order[:3]) == [0, 1, 2] and list(t.pos[:3]) == [0, 1, 2]

    def test_remove_the_only_row_then_add_again(self):
        t = JobTable(2)
        t.add(spec("a"), uid=0, model=0, max_gpus=1, now=0.0)
        t.remove("a")
        assert t.n == 0 and t.ids == [] and t.specs == [] and t.row == {}
        assert t.add(spec("b"), uid=1, model=0, max_gpus=1, now=1.0) == 0
        assert t.row == {"b": 0} and t.order[0] == 0 and t.pos[0] == 0

    def test_remove_an_unknown_id_raises_key_error(self):
        t = self.table4()
        with pytest.raises(KeyError):
            t.remove("zz")
        assert t.n == 4

    def test_a_sequence_of_removes_keeps_order_pos_and_row_consistent(self):
        t = JobTable(4)
        ids = [f"j{k}" for k in range(9)]
        for k, j in enumerate(ids):
            t.add(spec(j, arrival=float(k)), uid=k, model=0, max_gpus=1, now=0.0)
        alive = list(ids)
        for j in ["j4", "j0", "j8", "j5", "j1"]:
            t.remove(j)
            alive.remove(j)
            n = t.n
            assert n == len(alive)
            assert sorted(t.ids) == sorted(alive)
            assert all(t.row[x] == r for r, x in enumerate(t.ids)) and len(t.row) == n
            # order lists the rows by submission (uid); pos is its inverse
            assert [t.ids[r] for r in t.order[:n]] == alive
            assert all(t.pos[t.order[q]] == q for q in range(n))
            assert all(t.uid[r] == int(t.ids[r][1:]) for r in range(n))
        assert alive == ["j2", "j3", "j6", "j7"]


class TestTableArrivals:
    def add_all(self, arrivals: list[float]) -> JobTable:
        t = JobTable(8)
        for k, a in enumerate(arrivals):
            t.add(spec(f"j{k}", arrival=a), uid=k, model=0, max_gpus=1, now=a)
        return t

    def test_equal_and_growing_arrivals_are_in_order(self):
        assert self.add_all([0.0, 0.0, 2.0, 2.0, 5.0]).arrivals_in_order is True

    def test_a_first_job_at_any_time_is_in_order(self):
        assert self.add_all([7.0]).arrivals_in_order is True

    def test_an_earlier_arrival_breaks_the_order_for_good(self):
        t = self.add_all([5.0, 3.0])
        assert t.arrivals_in_order is False
        t.add(spec("late", arrival=10.0), uid=9, model=0, max_gpus=1, now=10.0)
        assert t.arrivals_in_order is False

    def test_the_order_is_against_the_latest_arrival_so_far(self):
        # 1, 5, 3: 3 is after the first job but before the second
        assert self.add_all([1.0, 5.0, 3.0]).arrivals_in_order is False
        # 4, 6, 5: again, not against the first
        assert self.add_all([4.0, 6.0, 5.0]).arrivals_in_order is False

    def test_a_removed_job_still_counts(self):
        t = self.add_all([4.0])
        t.remove("j0")
        t.add(spec("x", arrival=2.0), uid=5, model=0, max_gpus=1, now=4.0)
        assert t.arrivals_in_order is False


class TestTableProgress:
    """One job of 100 steps, submitted at t = 0.

    t = 0: rate 2 it/s, 4 GPUs, 8 cores.
    t = 10 (folded): work 2·10 = 20, service 4·10 = 40 GPU·s, cpu 8·10 = 80 core·s.
    then a restart pause to t = 15 and rate 3 on 2 GPUs, 5 cores.
    t = 12: work 20 (paused), service 40 + 2·2 = 44, cpu 80 + 5·2 = 90.
    t = 20: work 20 + 3·(20 − 15) = 35, service 40 + 2·10 = 60, cpu 80 + 5·10 = 130.
    t = 60: 20 + 3·45 = 155 → capped at 100; service 40 + 2·50 = 140, cpu 80 + 5·50 = 330.
    """

    def job(self, now: float = 0.0) -> JobTable:
        t = JobTable(4)
        t.add(spec("a", work=100.0), uid=0, model=0, max_gpus=4, now=now)
        return t

    def test_a_queued_job_makes_no_progress_and_gets_no_service(self):
        t = self.job(now=3.0)
        assert list(t.work_done(50.0)) == [0.0]
        assert list(t.attained_service(50.0)) == [0.0] and list(t.cpu_service(50.0)) == [0.0]

    def test_closed_form_with_a_pause_and_a_rate_change(self):
        t = self.job()
        t.rate[0], t.share[0], t.cpus[0] = 2.0, 4, 8
        assert list(t.work_done(10.0)) == [20.0]
        assert list(t.attained_service(10.0)) == [40.0] and list(t.cpu_service(10.0)) == [80.0]
        t.advance(0, 10.0)
        assert (t.work0[0], t.service0[0], t.cpu_service0[0], t.t0[0]) == (20.0, 40.0, 80.0, 10.0)
        t.paused_until[0] = 15.0
        t.rate[0], t.share[0], t.cpus[0] = 3.0, 2, 5
        assert list(t.work_done(12.0)) == [20.0]
        assert list(t.attained_service(12.0)) == [44.0] and list(t.cpu_service(12.0)) == [90.0]
        assert list(t.work_done(20.0)) == [35.0]
        assert list(t.attained_service(20.0)) == [60.0] and list(t.cpu_service(20.0)) == [130.0]
        assert list(t.work_done(60.0)) == [100.0]
        assert list(t.attained_service(60.0)) == [140.0] and list(t.cpu_service(60.0)) == [330.0]

    def test_folding_inside_a_pause_keeps_the_pause(self):
        t = self.job()
        t.rate[0], t.share[0], t.cpus[0], t.paused_until[0] = 3.0, 2, 5, 15.0
        t.advance(0, 12.0)  # nothing done yet; service 24, cpu 60
        assert (t.work0[0], t.service0[0], t.cpu_service0[0], t.t0[0]) == (0.0, 24.0, 60.0, 12.0)
        t.advance(0, 20.0)  # 3·(20 − 15) = 15; service 24 + 16 = 40, cpu 60 + 40 = 100
        assert (t.work0[0], t.service0[0], t.cpu_service0[0], t.t0[0]) == (15.0, 40.0, 100.0, 20.0)

    def test_folding_past_the_end_caps_the_work_not_the_service(self):
        t = self.job()
        t.rate[0], t.share[0] = 4.0, 2
        t.advance(0, 30.0)  # 4·30 = 120 → 100; service 2·30 = 60
        assert (t.work0[0], t.service0[0]) == (100.0, 60.0)
        assert list(t.work_done(40.0)) == [100.0] and list(t.attained_service(40.0)) == [80.0]

    def test_advance_takes_a_numpy_integer_a_list_or_an_array_of_rows(self):
        t = JobTable(4)
        for k, j in enumerate("abc"):
            t.add(spec(j, work=1000.0), uid=k, model=0, max_gpus=4, now=0.0)
            t.rate[k], t.share[k], t.cpus[k] = k + 1.0, k + 1, 2 * (k + 1)
        t.advance(np.int64(1), 10.0)
        assert list(t.work0[:3]) == [0.0, 20.0, 0.0] and list(t.t0[:3]) == [0.0, 10.0, 0.0]
        assert list(t.service0[:3]) == [0.0, 20.0, 0.0] and list(t.cpu_service0[:3]) == [0.0, 40.0, 0.0]
        t.advance([0, 2], 10.0)
        assert list(t.work0[:3]) == [10.0, 20.0, 30.0] and list(t.t0[:3]) == [10.0, 10.0, 10.0]
        t.advance(np.array([0, 1], dtype=np.int32), 12)  # integer time, int32 rows
        assert list(t.work0[:3]) == [12.0, 24.0, 30.0] and list(t.t0[:3]) == [12.0, 12.0, 10.0]
        assert list(t.service0[:3]) == [12.0, 24.0, 30.0] and list(t.cpu_service0[:3]) == [24.0, 48.0, 60.0]
        # each row by its own rates at t = 20
        assert list(t.work_done(20)) == [20.0, 40.0, 60.0]
        assert list(t.attained_service(20)) == [20.0, 40.0, 60.0]
        assert list(t.cpu_service(20)) == [40.0, 80.0, 120.0]
        t.advance(0, 15)  # a plain int row and an int time
        assert t.work0[0] == 15.0 and t.t0[0] == 15.0

    def test_advance_of_no_rows_changes_nothing(self):
        t = self.job()
        t.rate[0], t.share[0] = 2.0, 1
        t.advance([], 10.0)
        t.advance(np.array([], dtype=np.int64), 10.0)
        assert (t.work0[0], t.service0[0], t.t0[0]) == (0.0, 0.0, 0.0)

    def test_progress_is_only_over_the_live_rows(self):
        t = JobTable(4)
        for k, j in enumerate("ab"):
            t.add(spec(j, work=50.0), uid=k, model=0, max_gpus=4, now=0.0)
            t.rate[k], t.share[k], t.cpus[k] = 1.0 + k, 1, 1
        t.remove("a")  # b into row 0; row 1 is stale
        assert list(t.work_done(10.0)) == [20.0]
        assert list(t.attained_service(10.0)) == [10.0] and list(t.cpu_service(10.0)) == [10.0]


class TestJobRecord:
    def test_jct_and_queueing_delay(self):
        s = spec("a", arrival=10.0)
        r = JobRecord(s, "finished", finish=50.0, first_start=14.0, attained_service=80.0, resizes=1)
        assert r.jct == 40.0 and r.queueing_delay == 4.0

    def test_a_job_that_never_started_queued_for_its_whole_life(self):
        r = JobRecord(spec("a", arrival=10.0), "cancelled", finish=25.0, first_start=float("nan"),
                      attained_service=0.0, resizes=0)
        assert r.queueing_delay == 15.0


# ==================================================================== the cluster
class TestHomogeneous:
    def test_defaults(self):
        c = Cluster.homogeneous(2, 4)
        assert c.nodes == (Node("n0", 4, "V100", 32, 256.0, "switch0"), Node("n1", 4, "V100", 32, 256.0, "switch0"))
        assert c.gpu_types == {"V100": GpuType("V100")}
        assert c.links == LinkSpec()

    def test_every_argument_reaches_the_nodes(self):
        links = LinkSpec(intra_node_gbps=50.0, inter_node_gbps=3.0)
        c = Cluster.homogeneous(5, 2, gpu_type="T4", cpus_per_node=12, memory_gb=64.0, nodes_per_switch=2,
                                links=links)
        assert [n.name for n in c.nodes] == ["n0", "n1", "n2", "n3", "n4"]
        assert [n.switch for n in c.nodes] == ["switch0", "switch0", "switch1", "switch1", "switch2"]
        assert all((n.gpus, n.gpu_type, n.cpus, n.memory_gb) == (2, "T4", 12, 64.0) for n in c.nodes)
        assert c.gpu_types == {"T4": GpuType("T4")}
        assert c.links is links
        assert list(c.node_switch_index) == [0, 0, 1, 1, 2]

    def test_three_nodes_per_switch(self):
        c = Cluster.homogeneous(7, 1, nodes_per_switch=3)
        assert [n.switch for n in c.nodes] == ["switch0"] * 3 + ["switch1"] * 3 + ["switch2"]

    def test_one_node_of_one_gpu_is_a_cluster(self):
        c = Cluster.homogeneous(1, 1)
        assert c.nodes == (Node("n0", 1),) and c.total_gpus == 1

    @pytest.mark.parametrize("nodes, gpus", [(0, 4), (4, 0), (-1, 4), (0, 0)])
    def test_no_node_or_no_gpu_is_refused(self, nodes, gpus):
        with pytest.raises(ValueError, match="^a cluster needs at least one node with at least one GPU$"):
            Cluster.homogeneous(nodes, gpus)


class TestForGpus:
    def test_full_nodes_and_a_smaller_last_one(self):
        c = Cluster.for_gpus(20)  # 8 per node by default
        assert c.nodes == (Node("n0", 8), Node("n1", 8), Node("n2", 4))
        assert c.gpu_types == {"V100": GpuType("V100")} and c.links == LinkSpec()

    def test_an_exact_multiple_has_no_empty_node(self):
        c = Cluster.for_gpus(12, 4)
        assert c.nodes == (Node("n0", 4), Node("n1", 4), Node("n2", 4))

    def test_fewer_gpus_than_a_node(self):
        assert Cluster.for_gpus(3, 4).nodes == (Node("n0", 3),)
        assert Cluster.for_gpus(1).nodes == (Node("n0", 1),)

    def test_no_gpu_is_refused_with_the_number(self):
        with pytest.raises(ValueError, match="^a cluster needs at least one GPU, got 0$"):
            Cluster.for_gpus(0)
        with pytest.raises(ValueError, match="^a cluster needs at least one GPU, got -3$"):
            Cluster.for_gpus(-3, 4)


class TestClusterMaps:
    """Nodes: a (2 × A100, 16 cores), b (3 × V100, 8 cores), c (1 × A100, 5 cores), d (0 GPUs, 4 cores);
    switches s1, s0, s1, s2."""

    @pytest.fixture
    def c(self) -> Cluster:
        return Cluster(nodes=(Node("a", 2, "A100", 16, switch="s1"), Node("b", 3, "V100", 8, switch="s0"),
                              Node("c", 1, "A100", 5, switch="s1"), Node("d", 0, "V100", 4, switch="s2")),
                       gpu_types={"A100": GpuType("A100", 40.0, 2.5)})

    def test_totals(self, c):
        assert c.total_gpus == 6 and c.total_cpus == 33

    def test_types_in_first_seen_order_and_their_capacity(self, c):
        assert c.type_names == ("A100", "V100")
        assert c.capacity_by_type == {"A100": 3, "V100": 3}
        assert list(c.node_type_index) == [0, 1, 0, 1]

    def test_gpu_and_core_index_maps(self, c):
        assert list(c.node_of_gpu) == [0, 0, 1, 1, 1, 2]
        assert list(c.node_first_gpu) == [0, 2, 5, 6]
        assert list(c.node_of_core) == [0] * 16 + [1] * 8 + [2] * 5 + [3] * 4
        assert list(c.node_first_core) == [0, 16, 24, 29]

    def test_cores_per_gpu_rounds_down_and_is_zero_without_gpus(self, c):
        assert list(c.cores_per_gpu) == [8, 2, 5, 0] and c.cores_per_gpu.dtype == np.int64

    def test_switches_numbered_in_first_seen_order(self, c):
        assert list(c.node_switch_index) == [0, 1, 0, 2]

    def test_gpu_type_of_a_listed_and_an_unlisted_type(self, c):
        assert c.gpu_type_of("A100") == GpuType("A100", 40.0, 2.5)
        assert c.gpu_type_of("V100") == GpuType("V100", 16.0, 1.0)
        assert c.gpu_type_of("H100") == GpuType("H100")


# ==================================================================== the job spec
class TestJobSpecValidation:
    def test_the_smallest_valid_job(self):
        s = spec("a", arrival=0.0, requested=1, work=1e-9)
        assert (s.min_gpus, s.max_gpus, s.gpu_fraction, s.shareable, s.gpu_memory_gb) == (1, None, 1.0, False, None)
        assert not s.shares_gpu and s.packing_fraction == 1.0

    @pytest.mark.parametrize("kw, message", [
        (dict(requested=0), "job a: requested_gpus must be >= 1, got 0"),
        (dict(requested=-2), "job a: requested_gpus must be >= 1, got -2"),
        (dict(work=0.0), "job a: total_work must be > 0, got 0.0"),
        (dict(work=-5.0), "job a: total_work must be > 0, got -5.0"),
        (dict(arrival=-0.5), "job a: arrival must be >= 0, got -0.5"),
        (dict(min_gpus=0), "job a: min_gpus must be >= 1, got 0"),
        (dict(requested=4, min_gpus=3, max_gpus=2), "job a: max_gpus 2 < min_gpus 3"),
    ])
    def test_each_bound_with_its_message(self, kw, message):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            spec("a", **kw)

    def test_max_gpus_below_the_default_minimum(self):
        with pytest.raises(ValueError, match="^" + re.escape("job a: max_gpus 0 < min_gpus 1") + "$"):
            spec("a", max_gpus=0)

    @pytest.mark.parametrize("kw", [
        dict(requested=1), dict(work=0.001), dict(arrival=0.0), dict(min_gpus=1), dict(min_gpus=2, max_gpus=2),
        dict(requested=3, min_gpus=1, max_gpus=8), dict(max_gpus=1), dict(min_gpus=5, requested=1),
    ])
    def test_values_on_the_bounds_are_accepted(self, kw):
        s = spec("a", **kw)
        for k, v in kw.items():
            assert getattr(s, {"requested": "requested_gpus", "work": "total_work"}.get(k, k)) == v

    @pytest.mark.parametrize("fraction", [0.0, 0.0099, -0.5, 1.0001, 2.0])
    def test_gpu_fraction_outside_its_range(self, fraction):
        msg = f"job a: gpu_fraction must be in [{MIN_GPU_FRACTION}, 1], got {fraction}"
        assert msg.startswith("job a: gpu_fraction must be in [0.01, 1], got ")
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            spec("a", gpu_fraction=fraction)

    @pytest.mark.parametrize("fraction", [0.01, 0.25, 0.999, 1.0])
    def test_gpu_fraction_on_and_inside_its_range(self, fraction):
        assert spec("a", gpu_fraction=fraction).gpu_fraction == fraction

    @pytest.mark.parametrize("memory", [0.0, -1.0, float("nan")])
    def test_gpu_memory_must_be_positive(self, memory):
        with pytest.raises(ValueError, match="^" + re.escape(f"job a: gpu_memory_gb must be > 0, got {memory}") + "$"):
            spec("a", gpu_memory_gb=memory)

    @pytest.mark.parametrize("memory", [None, 0.001, 12.0])
    def test_gpu_memory_positive_or_unset(self, memory):
        assert spec("a", gpu_memory_gb=memory).gpu_memory_gb == memory

    SHARING = ("job a: a job sharing a GPU (gpu_fraction < 1 or shareable) runs on one GPU; "
               "requested_gpus, min_gpus and max_gpus must be 1")

    @pytest.mark.parametrize("share", [dict(gpu_fraction=0.5), dict(shareable=True),
                                       dict(gpu_fraction=0.5, shareable=True)])
    @pytest.mark.parametrize("gpus", [dict(requested=2), dict(min_gpus=2, max_gpus=2), dict(min_gpus=2),
                                      dict(max_gpus=2), dict(requested=2, min_gpus=2)])
    def test_a_sharing_job_runs_on_one_gpu(self, share, gpus):
        with pytest.raises(ValueError, match="^" + re.escape(self.SHARING) + "$"):
            spec("a", **share, **gpus)

    @pytest.mark.parametrize("share", [dict(gpu_fraction=0.5), dict(shareable=True)])
    @pytest.mark.parametrize("gpus", [dict(), dict(max_gpus=1), dict(max_gpus=None), dict(min_gpus=1, max_gpus=1)])
    def test_a_one_gpu_sharing_job_is_accepted(self, share, gpus):
        s = spec("a", **share, **gpus)
        assert s.shares_gpu and s.requested_gpus == 1

    def test_a_job_that_does_not_share_may_span_gpus(self):
        s = spec("a", requested=4, min_gpus=2, max_gpus=8)
        assert not s.shares_gpu and (s.requested_gpus, s.min_gpus, s.max_gpus) == (4, 2, 8)

    def test_the_checks_run_in_order(self):
        # several faults: the first check's message wins
        with pytest.raises(ValueError, match="requested_gpus must be >= 1"):
            spec("a", requested=0, work=0.0, arrival=-1.0)
        with pytest.raises(ValueError, match="total_work must be > 0"):
            spec("a", work=0.0, arrival=-1.0, min_gpus=0)
        with pytest.raises(ValueError, match="arrival must be >= 0"):
            spec("a", arrival=-1.0, min_gpus=0)
        with pytest.raises(ValueError, match="min_gpus must be >= 1"):
            spec("a", min_gpus=0, gpu_fraction=2.0)
        with pytest.raises(ValueError, match="gpu_fraction must be in"):
            spec("a", gpu_fraction=2.0, gpu_memory_gb=0.0)
        with pytest.raises(ValueError, match="gpu_memory_gb must be > 0"):
            spec("a", gpu_memory_gb=0.0, shareable=True, requested=2)


class TestJobSpecSharing:
    def test_packing_fraction(self):
        assert spec("a", gpu_fraction=0.25).packing_fraction == 0.25
        assert spec("a", gpu_fraction=0.25, shareable=True).packing_fraction == 0.25
        assert spec("a", shareable=True).packing_fraction == 0.5
        assert spec("a").packing_fraction == 1.0

    def test_terminal_states(self):
        assert {s for s in JobStatus if s.terminal} == {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED}
