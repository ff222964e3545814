"""The executor model as a runtime (`costmodel.runtimes.torch.runtime`,
`costmodel.execution_presets`): the runtime named, not inferred; the executed precision on
a CPU and the kernels' dtype on a GPU; one rank's step, recompute and pipelining."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from costmodel.estimate import estimate_plan, simulate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS, runtime_options
from costmodel.runtimes.registry import runtime_model
from costmodel.runtimes.torch.layers import layer_ops
from costmodel.runtimes.torch.ops import FP32, host_seconds
from costmodel.runtimes.torch.passes import microbatch_overhead
from costmodel.runtimes.torch.runtime import TorchRuntime, kernel_view
from costmodel.runtimes.torch.shapes import rank_shape
from costmodel.runtimes.torch.sync import stage_layout
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile, spread
from tests.costmodel.torch_fixture import CPU, JOB, RATES, TINY, cluster, sim


def test_the_runtime_is_named_not_inferred_from_the_device():
    assert runtime_options("torch") is TORCH_OPTIONS
    assert runtime_options("megatron") is DEFAULT_OPTIONS
    with pytest.raises(SpecError, match="unknown runtime"):
        runtime_options("native")
    plan = ParallelPlan()
    a = simulate_plan(TINY, cluster(1), JOB, plan, CPU, timeline=False)[0]
    b = simulate_plan(TINY, cluster(1), JOB, plan, CPU, options=DEFAULT_OPTIONS, timeline=False)[0]
    assert a.iteration_time_s == b.iteration_time_s


def test_the_executor_computes_in_fp32_whatever_the_job_says():
    bf16 = dataclasses.replace(JOB, precision="bf16")
    assert TorchRuntime().executed_job(bf16, CPU).precision == "fp32"
    assert runtime_model(DEFAULT_OPTIONS).executed_job(bf16, CPU).precision == "bf16"
    assert TorchRuntime().executed_job(bf16, load_profile("h100-sxm-80gb")).precision == "bf16"
    plan = ParallelPlan()
    a, _ = simulate_plan(TINY, cluster(1), bf16, plan, CPU, timeline=False, options=TORCH_OPTIONS)
    b, _ = simulate_plan(TINY, cluster(1), JOB, plan, CPU, timeline=False, options=TORCH_OPTIONS)
    # The fixture's bf16 curves are 5-10x slower: they must not price the run.
    assert a.iteration_time_s == b.iteration_time_s
    assert a.peak_memory_bytes == b.peak_memory_bytes
    megatron = estimate_plan(TINY, cluster(1), JOB, plan, CPU, options=DEFAULT_OPTIONS)
    assert megatron.iteration_time_s < a.iteration_time_s  # host costs are what it lacks


def test_gradient_accumulation_is_microbatches_then_adamw():
    plan = ParallelPlan()
    s = sim(plan)
    (cost,) = s.chunks[0]
    m = plan.num_microbatches(JOB.global_batch_size)
    steps = m * (cost.forward.duration_s + cost.backward.duration_s)
    assert s.iteration_time_s == pytest.approx(steps + s.tails[0].optimizer_s)
    # Each microbatch's backward pays one autograd call (fixture: 100 µs).
    assert cost.backward.compute_s > 100e-6


def test_recompute_reruns_the_checkpointed_work_and_its_hooks():
    full = sim(ParallelPlan(recompute="full")).chunks[0][0]
    sel = sim(ParallelPlan(recompute="selective")).chunks[0][0]
    none = sim(ParallelPlan()).chunks[0][0]
    assert none.recompute.duration_s == 0
    assert 0 < sel.recompute.duration_s < full.recompute.duration_s
    layer = layer_ops(
        TINY, CPU, RATES, ParallelPlan(), rank_shape(ParallelPlan(), 128, 8), is_moe=False
    )
    rerun = 4 * host_seconds(layer.forward, RATES, backward=False)
    # Per layer one checkpointed call (50 µs) and 38 saved tensors (15 µs each).
    assert full.recompute.duration_s - rerun == pytest.approx(4 * (50e-6 + 38 * 15e-6))


def test_pipeline_sends_block_and_the_gradients_are_divided():
    assert TorchRuntime().blocking_sends(ParallelPlan(pp=2, vpp=2, schedule="interleaved"))
    s = sim(ParallelPlan(pp=2))
    assert s.breakdown.pp_exposed_s > 0 and s.breakdown.bubble_s > 0
    tail = s.tails[0]
    params = stage_layout(TINY, ParallelPlan(pp=2), 0)
    division = (params.dense_tensors) * RATES.dispatch_s + 2 * params.dense * FP32 / 50e9
    assert tail.grads_done_s - tail.pipeline_end_s == pytest.approx(division)


def test_each_pipelined_action_posts_its_receive_and_its_send():
    plan = ParallelPlan(pp=2, vpp=2, schedule="interleaved")
    posts = [
        (ops.forward.p2p_posts, ops.backward.p2p_posts)
        for ops in (
            microbatch_overhead(plan, first=True, last=False),
            microbatch_overhead(plan, first=False, last=False),
            microbatch_overhead(plan, first=False, last=True),
        )
    ]
    assert posts == [(1, 1), (2, 2), (1, 1)]
    assert microbatch_overhead(ParallelPlan(), first=True, last=True).forward.p2p_posts == 0
    # a dearer post lengthens the pipelined step, and more so interleaved (more posts)
    dear = cpu_profile(extra=(spread("op_overhead.p2p_post", 1e-3),))

    def step_s(plan: ParallelPlan, profile) -> float:
        return sim(plan, profile=profile).iteration_time_s

    one_f_one_b = ParallelPlan(pp=2)
    assert step_s(one_f_one_b, dear) > step_s(one_f_one_b, CPU)
    assert step_s(plan, dear) - step_s(plan, CPU) > step_s(one_f_one_b, dear) - step_s(
        one_f_one_b, CPU
    )


def test_on_a_gpu_the_executor_runs_its_gemms_and_attention_in_the_jobs_dtype():
    h100 = load_profile("h100-sxm-80gb")
    bf16 = dataclasses.replace(JOB, precision="bf16")
    view = kernel_view(h100, bf16)
    assert view.device.peak_tflops["fp32"] == h100.device.peak_tflops["bf16"]
    assert view.compute.gemm_efficiency["fp32"] == h100.compute.gemm_efficiency["bf16"]
    relabelled = [a for a in view.compute.attention if a.dtype == "fp32"]
    assert relabelled and all(
        dataclasses.replace(a, dtype="bf16") in h100.compute.attention for a in relabelled
    )
    assert kernel_view(h100, JOB) is h100  # an fp32 job keeps the fp32 curves
    assert kernel_view(CPU, JOB) is CPU
    # the torch runtime on a GPU profile: the job's precision prices the run
    plan = ParallelPlan(tp=2)
    one = cluster(2)
    gpu = dataclasses.replace(one, hardware="h100-sxm-80gb")
    a = estimate_plan(TINY, gpu, bf16, plan, h100, options=TORCH_OPTIONS)
    b = estimate_plan(TINY, gpu, JOB, plan, h100, options=TORCH_OPTIONS)
    assert a.runtime == "torch" and a.iteration_time_s != b.iteration_time_s


def test_moe_statistic_all_reduce_over_a_tp_cp_block_spanning_servers():
    """tp 8 x cp 2 on 8-GPU servers: the tp·cp block spans two servers."""
    h100 = load_profile("h100-sxm-80gb")
    plan = ParallelPlan(tp=8, cp=2, sequence_parallel=True)
    job = TrainingJob(seq_length=2048, global_batch_size=8, precision="bf16")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    est = estimate_plan(get_preset("mixtral-8x7b"), cluster, job, plan, h100, options=TORCH_OPTIONS)
    assert est.iteration_time_s > 0


def test_the_torch_runtime_refuses_a_hybrid_model():
    """The executor builds transformer layers only (`specs.hybrid_checks.
    executor_hybrid_refusal`): pricing, memory and the screen refuse a hybrid model with
    the executor's own message."""
    hybrid = get_preset("nemotron-h-8b")
    with pytest.raises(SpecError, match=r"\[hybrid_not_in_executor\].*transformer layers only"):
        simulate_plan(
            hybrid, cluster(1), JOB, ParallelPlan(), CPU, options=TORCH_OPTIONS, timeline=False
        )
    with pytest.raises(SpecError, match="use --runtime megatron"):
        TorchRuntime().memory(hybrid, JOB, ParallelPlan())
    with pytest.raises(SpecError, match="hybrid_not_in_executor"):
        TorchRuntime().screen(hybrid, cluster(1), JOB, CPU, pd.DataFrame())
