"""A sharing job's limits in its worker (``coddl.elastic.gpu_share``), decided without CUDA: which
environment and which memory limit each kind of job gets, and that a whole-GPU job gets nothing."""

from __future__ import annotations

import math

import pytest
import torch

from coddl.elastic import gpu_share
from coddl.elastic.gpu_share import GIB, GpuShare, limits, mps_reachable

NO_MPS = lambda path: False  # noqa: E731 - isdir of a host without an MPS control daemon
MPS = lambda path: True  # noqa: E731


def env_of(share: GpuShare, **extra: str) -> dict[str, str]:
    return {**share.to_environ(), **extra}


def test_a_whole_gpu_job_carries_no_share_and_gets_no_limits():
    assert GpuShare().to_environ() == {}
    assert GpuShare(1.0, False, None).shares is False
    decided = limits({}, isdir=MPS)
    assert decided.share is None and decided.env == {} and not decided.memory_limit
    environ = {"CUDA_VISIBLE_DEVICES": "0"}
    assert gpu_share.apply(environ, announce=lambda line: pytest.fail(line)).share is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "0"}


@pytest.mark.parametrize("share", [GpuShare(0.25), GpuShare(0.5, False, 3.5), GpuShare(1.0, True),
                                   GpuShare(0.3, True, 12.0)])
def test_the_share_goes_through_the_environment_unchanged(share):
    env = share.to_environ()
    assert all(k.startswith("CODDL_") for k in env)
    assert GpuShare.from_environ(env) == share


@pytest.mark.parametrize("env", [{"CODDL_GPU_FRACTION": "half"}, {"CODDL_GPU_FRACTION": "0"},
                                 {"CODDL_GPU_FRACTION": "1.5"}, {"CODDL_GPU_FRACTION": "nan"},
                                 {"CODDL_GPU_FRACTION": "0.5", "CODDL_GPU_MEMORY_GB": "-1"},
                                 {"CODDL_GPU_FRACTION": "0.5", "CODDL_GPU_MEMORY_GB": "inf"},
                                 {"CODDL_GPU_FRACTION": "1.0", "CODDL_GPU_SHAREABLE": "0"}])
def test_values_that_are_not_a_share_give_no_limits(env):
    assert GpuShare.from_environ(env) is None
    assert limits(env, isdir=MPS).env == {}


def test_with_mps_a_fraction_caps_the_active_threads_rounded_up():
    for fraction, threads in ((0.5, "50"), (0.25, "25"), (0.333, "34"), (0.001, "1"), (0.999, "100")):
        decided = limits(env_of(GpuShare(fraction)), isdir=MPS)
        assert decided.mps and decided.env == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": threads}, fraction
        assert decided.memory_limit


def test_without_mps_nothing_is_set_before_cuda_only_the_memory_limit():
    decided = limits(env_of(GpuShare(0.5)), isdir=NO_MPS)
    assert not decided.mps and decided.env == {} and decided.memory_limit


def test_a_shareable_job_is_not_capped_in_threads_but_in_memory_as_packed():
    share = GpuShare(1.0, True)
    decided = limits(env_of(share), isdir=MPS)
    assert decided.env == {} and decided.memory_limit
    assert share.memory_fraction(80 * GIB) == 0.5


def test_the_jobs_own_lower_thread_cap_stands_a_higher_one_does_not():
    lower = env_of(GpuShare(0.5), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="20")
    higher = env_of(GpuShare(0.5), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="90")
    assert limits(lower, isdir=MPS).env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
    assert limits(higher, isdir=MPS).env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"


def test_a_command_jobs_program_gets_the_environment_but_no_allocator_limit():
    decided = limits(env_of(GpuShare(0.5)), in_process=False, isdir=MPS)
    assert decided.env == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"} and not decided.memory_limit
    assert "its program's memory is its own to limit" in decided.describe(cuda=True)


def test_memory_fraction_is_the_asked_memory_over_the_device_else_the_packed_share():
    assert GpuShare(0.25).memory_fraction(16 * GIB) == 0.25
    assert GpuShare(0.25, False, 4.0).memory_fraction(16 * GIB) == 0.25
    assert GpuShare(0.25, False, 10.0).memory_fraction(80 * GIB) == pytest.approx(0.125)
    assert GpuShare(0.5, False, 100.0).memory_fraction(80 * GIB) == 1.0  # more than the device: all of it
    assert 0 < GpuShare(0.5, False, 1e-12).memory_fraction(80 * GIB) <= 1e-6


def test_mps_is_looked_for_where_the_cuda_driver_looks():
    seen = []
    assert mps_reachable({}, lambda p: seen.append(p) or False) is False
    assert mps_reachable({"CUDA_MPS_PIPE_DIRECTORY": "/var/run/mps"}, lambda p: seen.append(p) or True)
    assert seen == ["/tmp/nvidia-mps", "/var/run/mps"]


def test_apply_sets_the_environment_and_queues_the_memory_limit_for_cudas_start(monkeypatch, tmp_path):
    queued = []
    monkeypatch.setattr(torch.cuda, "_lazy_call", lambda fn, **kw: queued.append(fn))
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    environ = {**GpuShare(0.5, False, 20.0).to_environ(), "CUDA_VISIBLE_DEVICES": "3",
               "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}
    said = []
    decided = gpu_share.apply(environ, announce=said.append)
    assert environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert len(queued) == 1 and decided.memory_limit
    assert said == ["coddl: gpu_fraction 0.5: compute shared by MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50; "
                    "PyTorch's allocator limited to 20 GiB"]
    # what the queued call does when CUDA starts: the device's total decides the fraction
    calls = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 80 * GIB}))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d)))
    queued[0]()
    assert calls == [(0.25, 0)] and isinstance(calls[0][0], float)


def test_apply_on_a_cpu_build_only_says_the_cores_are_shared(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    queued = []
    monkeypatch.setattr(torch.cuda, "_lazy_call", lambda fn, **kw: queued.append(fn))
    environ = GpuShare(0.5).to_environ()
    said = []
    gpu_share.apply(environ, announce=said.append)
    assert queued == [] and said == ["coddl: gpu_fraction 0.5: no CUDA here; this slot's CPU cores are shared "
                                     "with its co-tenants"]
    assert math.isclose(float(environ["CODDL_GPU_FRACTION"]), 0.5)
