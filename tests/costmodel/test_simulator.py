"""The event simulator and `Estimate` (costmodel.runtimes.megatron.pricing and
stage_tail, costmodel.estimate)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.estimate import JSON_KEYS, estimate_plan, estimate_to_json, simulate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.iteration import simulate_iteration
from costmodel.runtimes.registry import runtime_model
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
LLAMA8 = get_preset("llama3-8b")


def free_communication(profile):
    """The profile with zero-latency, near-infinite-bandwidth collectives and sends."""
    fits = tuple(
        dataclasses.replace(f, latency_s=0.0, busbw_GBps=1e12) for f in profile.communication.fits
    )
    return dataclasses.replace(
        profile, communication=dataclasses.replace(profile.communication, fits=fits)
    )


def scaled_bandwidth(profile, factor: float):
    fits = tuple(
        dataclasses.replace(f, busbw_GBps=f.busbw_GBps * factor) for f in profile.communication.fits
    )
    return dataclasses.replace(
        profile, communication=dataclasses.replace(profile.communication, fits=fits)
    )


FREE = free_communication(H100)
# Uniform stages: 32 identical layers and a vocabulary so small that the embedding and
# the output layer cost well under 1% of a stage (the fp32 cross entropy moves 38 bytes
# per logit, so the vocabulary stays at 64 to keep the output layer near 0.05%).
UNIFORM = ModelSpec(
    name="uniform",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    ffn_hidden_size=16384,
    vocab_size=64,
    tied_embeddings=False,
)


def uniform_estimate(pp: int, vpp: int, m: int):
    job = TrainingJob(seq_length=2048, global_batch_size=m)
    plan = ParallelPlan.for_world(pp, pp=pp, vpp=vpp)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=pp)
    return estimate_plan(UNIFORM, cluster, job, plan, FREE)


def bubble_ratio(est) -> float:
    b = est.breakdown
    return b.bubble_s / (b.compute_forward_s + b.compute_backward_s + b.compute_recompute_s)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 16), (8, 8), (8, 32)])
def test_1f1b_bubble_golden_through_the_full_simulator(pp, m):
    # Narayanan et al. 2021 (arXiv 2104.04473) §2.2.1: bubble / ideal = (p - 1) / m.
    assert bubble_ratio(uniform_estimate(pp, 1, m)) == pytest.approx((pp - 1) / m, rel=0.01)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 2, 8), (4, 4, 8), (8, 2, 16)])
def test_interleaved_bubble_golden_through_the_full_simulator(pp, vpp, m):
    # Narayanan et al. 2021 §2.2.2: bubble / ideal = (p - 1) / (v · m).
    assert bubble_ratio(uniform_estimate(pp, vpp, m)) == pytest.approx(
        (pp - 1) / (vpp * m), rel=0.01
    )


def plan_70b(**changes) -> ParallelPlan:
    base = dict(
        tp=8,
        pp=4,
        vpp=2,
        micro_batch_size=1,
        sequence_parallel=True,
        recompute="selective",
        distributed_optimizer=True,
    )
    return ParallelPlan.for_world(128, **(base | changes))


MODEL_70B = get_preset("llama3-70b")
CLUSTER_128 = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=128)
JOB_70B = TrainingJob(seq_length=8192, global_batch_size=128)


def test_breakdown_sums_to_the_iteration_time():
    est = estimate_plan(MODEL_70B, CLUSTER_128, JOB_70B, plan_70b(), H100)
    assert est.breakdown.total_s == pytest.approx(est.iteration_time_s, rel=1e-9)
    assert est.breakdown.tp_exposed_s > 0 and est.breakdown.dp_exposed_s > 0
    assert est.tokens_per_s == pytest.approx(128 * 8192 / est.iteration_time_s)
    assert 0.2 < est.mfu < 0.7
    assert est.hfu > est.mfu  # selective recompute adds attention FLOPs


def test_overlapping_gradient_reduction_exposes_only_the_tail():
    plain = estimate_plan(MODEL_70B, CLUSTER_128, JOB_70B, plan_70b(), H100)
    overlapped = estimate_plan(
        MODEL_70B, CLUSTER_128, JOB_70B, plan_70b(overlap_grad_reduce=True), H100
    )
    assert overlapped.breakdown.dp_exposed_s < plain.breakdown.dp_exposed_s
    assert overlapped.iteration_time_s < plain.iteration_time_s


OVERLAPS = [
    {"overlap_grad_reduce": True},
    {"overlap_grad_reduce": True, "overlap_param_gather": True},
]
"""Switches that only move communication under compute. `tp_comm_overlap` is not among
them: its chunked GEMMs and the SMs its kernels take cost time of their own
(`costmodel.runtimes.megatron.userbuffers.tp_overlap_pair_s`)."""


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    vpp=st.sampled_from([1, 2]),
    mbs=st.sampled_from([1, 2]),
    switch=st.sampled_from(OVERLAPS),
)
def test_overlap_switches_never_raise_the_iteration_time(tp, pp, vpp, mbs, switch):
    if pp == 1 and vpp > 1:
        vpp = 1
    base = dict(
        tp=tp,
        pp=pp,
        vpp=vpp,
        micro_batch_size=mbs,
        sequence_parallel=True,
        distributed_optimizer=True,
    )
    if "overlap_param_gather" in switch:
        base["overlap_grad_reduce"] = True
    plain = ParallelPlan.for_world(128, **base)
    on = ParallelPlan.for_world(128, **(base | switch))
    job = TrainingJob(seq_length=4096, global_batch_size=256)
    t_plain = estimate_plan(MODEL_70B, CLUSTER_128, job, plain, H100).iteration_time_s
    t_on = estimate_plan(MODEL_70B, CLUSTER_128, job, on, H100).iteration_time_s
    assert t_on <= t_plain * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(
    factor=st.floats(1.0, 8.0),
    tp=st.sampled_from([1, 2, 8]),
    pp=st.sampled_from([1, 2, 4]),
    overlap=st.booleans(),
)
def test_more_bandwidth_never_raises_the_iteration_time(factor, tp, pp, overlap):
    plan = ParallelPlan.for_world(
        128,
        tp=tp,
        pp=pp,
        sequence_parallel=tp > 1,
        distributed_optimizer=True,
        overlap_grad_reduce=overlap,
        recompute="full",
    )
    job = TrainingJob(seq_length=4096, global_batch_size=128)
    slow = estimate_plan(MODEL_70B, CLUSTER_128, job, plan, H100).iteration_time_s
    fast = estimate_plan(
        MODEL_70B, CLUSTER_128, job, plan, scaled_bandwidth(H100, factor)
    ).iteration_time_s
    assert fast <= slow * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(pp=st.sampled_from([2, 4, 8]), vpp=st.sampled_from([1, 2]), k=st.integers(1, 6))
def test_more_microbatches_never_raise_the_bubble_share(pp, vpp, k):
    m = pp * k
    assert bubble_ratio(uniform_estimate(pp, vpp, 2 * m)) <= bubble_ratio(
        uniform_estimate(pp, vpp, m)
    ) * (1 + 1e-9)


def test_timeline_shows_one_rank_per_stage():
    plan = plan_70b()
    est, timeline = simulate_plan(MODEL_70B, CLUSTER_128, JOB_70B, plan, H100)
    stride = plan.tp * plan.cp * plan.dp
    assert timeline.ranks_shown == tuple(s * stride for s in range(plan.pp))
    assert "symmetric" in timeline.note
    assert timeline.iteration_time_s == est.iteration_time_s
    m = plan.num_microbatches(JOB_70B.global_batch_size)
    for rank in timeline.ranks_shown:
        events = timeline.for_rank(rank)
        forwards = [e for e in events if e.kind == "forward"]
        assert len(forwards) == m * plan.vpp
        assert {e.lane for e in events} >= {"compute", "tp", "pp", "dp", "optimizer"}
        assert max(e.end_s for e in events) <= est.iteration_time_s * (1 + 1e-9)
    trace = timeline.to_chrome_trace()
    assert len(trace["traceEvents"]) > len(timeline.events)


def test_unfused_gradient_accumulation_adds_backward_time():
    fused = simulate_iteration(
        MODEL_70B, JOB_70B, plan_70b(), H100, runtime=runtime_model(DEFAULT_OPTIONS)
    )
    unfused = simulate_iteration(
        MODEL_70B,
        JOB_70B,
        plan_70b(),
        H100,
        runtime=runtime_model(ExecutionOptions(grad_accumulation_fusion=False)),
    )
    assert unfused.breakdown.compute_backward_s > fused.breakdown.compute_backward_s


def test_estimate_json_has_exactly_the_documented_keys():
    est = estimate_plan(MODEL_70B, CLUSTER_128, JOB_70B, plan_70b(), H100)
    data = estimate_to_json(est)
    assert tuple(data) == JSON_KEYS
    assert [s["stage"] for s in data["memory"]] == [0, 1, 2, 3]
    stage = data["memory"][0]
    assert stage["total_gib"] == pytest.approx(sum(stage["parts"].values()))
    assert data["peak_memory_gib"] == pytest.approx(max(s["total_gib"] for s in data["memory"]))
    assert sum(data["breakdown"].values()) == pytest.approx(data["iteration_time_s"])
    assert data["fits"] is True


def test_invalid_plan_is_refused():
    plan = ParallelPlan.for_world(128, tp=3)
    with pytest.raises(SpecError, match="heads_divisible_by_tp"):
        estimate_plan(MODEL_70B, CLUSTER_128, JOB_70B, plan, H100)


def test_405b_on_16k_gpus_is_fast():
    model = get_preset("llama3.1-405b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16384)
    job = TrainingJob(seq_length=8192, global_batch_size=2048)
    plan = ParallelPlan.for_world(
        16384,
        tp=8,
        pp=2,
        vpp=7,
        sequence_parallel=True,
        recompute="full",
        distributed_optimizer=True,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
    )
    start = time.perf_counter()
    est = estimate_plan(model, cluster, job, plan, H100)
    assert time.perf_counter() - start < 2.0  # typically ~0.05 s
    assert est.iteration_time_s > 0
