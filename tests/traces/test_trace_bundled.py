"""The bundled traces read with the counts published in DATA.md."""

from __future__ import annotations

from collections import Counter

import pytest

from coddl.traces import TraceError, list_bundled, load_trace


def test_philly_counts_and_gpu_histogram(philly):
    assert len(philly.jobs) == 82_247
    assert Counter(j.num_gpus for j in philly.jobs) == {
        1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
    assert len({j.group for j in philly.jobs}) == 15


def test_philly_unsorted_rows_are_sorted_stably_from_zero(philly):
    arrivals = [j.arrival for j in philly.jobs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    lines = [int(j.job_id.split("-")[1]) for j in philly.jobs]
    assert lines != sorted(lines)  # the digest is not in submit order
    # ties keep file order
    for a, b, la, lb in zip(arrivals, arrivals[1:], lines, lines[1:]):
        if a == b:
            assert la < lb
    # the earliest submit in the digest, 2017-09-04 10:30:41, is on line 31568
    assert philly.jobs[0].job_id == "philly-31568" and philly.meta["arrival_origin"] == 1504521041.0


def test_philly_vc_selection_is_relative_to_its_first_job(philly):
    vc = load_trace("philly", vc="6c71a0")
    assert len(vc.jobs) == 9_953 and {j.group for j in vc.jobs} == {"6c71a0"}
    assert vc.jobs[0].arrival == 0.0 and vc.name == "philly:6c71a0"
    first = next(j for j in philly.jobs if j.group == "6c71a0")
    assert vc.meta["arrival_origin"] == philly.meta["arrival_origin"] + first.arrival
    assert Counter(j.group for j in philly.jobs)["6214e9"] == 41_226


def test_itp_counts():
    itp = load_trace("itp")
    assert len(itp.jobs) == 69_351
    per_cluster = Counter(j.group for j in itp.jobs)
    assert len(per_cluster) == 10
    for i in range(1, 11):
        one = load_trace(f"itp-{i}")
        assert len(one.jobs) == per_cluster[f"cluster{i:02d}"]
        assert one.jobs[0].arrival == 0.0
    assert len(load_trace("itp", vc="cluster04").jobs) == 15_802


def test_pollux_workloads_and_variants():
    w1 = load_trace("pollux-1")
    assert len(w1.jobs) == 160
    first = w1.jobs[0]
    assert (first.job_id, first.model, first.num_gpus, first.batch_size, first.duration) == (
        "cifar10-0", "cifar10", 6, 2048, None)
    assert w1.meta["arrival_origin"] == 107.0  # the file's first arrival, kept for reference
    sizes = {v: len(load_trace(f"pollux-{v}-3").jobs) for v in ("0.5", "1.5", "2.0", "realistic")}
    assert sizes == {"0.5": 80, "1.5": 240, "2.0": 320, "realistic": 160}


def test_tiresias_60():
    t = load_trace("tiresias-60")
    assert len(t.jobs) == 60
    j = t.jobs[0]
    assert (j.job_id, j.num_gpus, j.steps, j.model, j.duration) == ("0", 1, 606.0, "vgg19", 164.0)


def test_gavel_msr_traces():
    names = [n for n in list_bundled() if n.startswith("gavel-philly-")]
    assert len(names) == 15
    assert sum(len(load_trace(n).jobs) for n in names) == 15_264
    t = load_trace("gavel-philly-6c71a0")
    j = t.jobs[3]
    assert (j.model, j.batch_size, j.steps, j.num_gpus) == ("ResNet-18 (batch size 32)", 32, 60779782.0, 1)


def test_limit_keeps_the_first_jobs_by_arrival():
    whole, head = load_trace("itp", vc="cluster02"), load_trace("itp", vc="cluster02", limit=100)
    assert head.jobs == whole.jobs[:100]
    with pytest.raises(TraceError, match="limit: expected a positive integer, got 0"):
        load_trace("itp-1", limit=0)


def test_list_bundled_names():
    names = list_bundled()
    assert names[:3] == ["philly", "itp", "itp-1"]
    assert {"itp-10", "pollux-8", "pollux-0.5-3", "pollux-realistic-2", "tiresias-60",
            "gavel-philly-6c71a0"} <= set(names)


def test_unknown_bundled_name_lists_the_valid_ones():
    with pytest.raises(TraceError) as e:
        load_trace("pollux-9")
    msg = str(e.value)
    assert msg.startswith("pollux-9: no such file, and not a bundled trace (bundled: philly, itp,")
    assert "pollux-realistic-8" in msg and "\n" not in msg


def test_unknown_vc_lists_the_known_ones():
    with pytest.raises(TraceError, match=r"^philly: vc: unknown virtual cluster 'nope'; known \(jobs\): "
                                         r"6214e9 \(41226\), 11cb48 \(16091\)"):
        load_trace("philly", vc="nope")
    with pytest.raises(TraceError, match="tiresias-60: vc: this trace has no virtual clusters"):
        load_trace("tiresias-60", vc="x")


def test_bundled_data_carries_licences_and_attribution():
    from coddl.perf.curves import data_path

    for folder in ("traces/philly", "traces/itp", "traces/pollux", "traces/tiresias", "traces/gavel",
                   "profiles/pollux", "profiles/gavel", "profiles"):
        d = data_path(folder)
        assert (d / "ATTRIBUTION").is_file(), folder
        if folder != "profiles":
            assert any(p.name.startswith("LICENSE") for p in d.iterdir()), folder
    philly = (data_path("traces/philly") / "ATTRIBUTION").read_text()
    assert "Jeon" in philly and "ATC 2019" in philly
