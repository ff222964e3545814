"""The executor model around the layers: choice of model, pipelining, gradient
synchronization, AdamW, memory and the screen (costmodel.execution and
costmodel.runtimes.torch: passes, sync, pricing, memory, screen)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from costmodel.estimate import estimate_plan, simulate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS, runtime_options
from costmodel.iteration import simulate_iteration
from costmodel.passes import comm_groups
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.registry import runtime_model
from costmodel.runtimes.torch.host_rate_fits import FSDP_PROBE_BYTES
from costmodel.runtimes.torch.layers import layer_ops
from costmodel.runtimes.torch.memory import executor_memory_per_stage
from costmodel.runtimes.torch.ops import FP32, host_seconds
from costmodel.runtimes.torch.passes import microbatch_overhead
from costmodel.runtimes.torch.pricing import executor_chunk_costs
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.runtime import TorchRuntime, kernel_view
from costmodel.runtimes.torch.shapes import rank_shape
from costmodel.runtimes.torch.sync import fsdp_gather_s, fsdp_reduce, optimizer_s, stage_layout
from costmodel.screen import screen_plans
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.costmodel.cpu_fixture import cpu_profile, spread, spread_over_fit

CPU = cpu_profile()
RATES = host_rates(CPU)
TINY = get_preset("tiny")
MOE = get_preset("tiny-moe")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")


def cluster(n: int) -> ClusterSpec:
    return ClusterSpec(hardware="cpu-test", num_gpus=n, gpus_per_node=4)


def sim(plan: ParallelPlan, model=TINY, job=JOB):
    return simulate_iteration(
        model, job, plan, CPU, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )


def chunks(plan: ParallelPlan, model=TINY):
    placements = plan_placements(CPU, plan, 4)
    return executor_chunk_costs(model, JOB, plan, CPU, comm_groups(placements), placements)


# ---- which model ------------------------------------------------------------------------


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


# ---- one rank -----------------------------------------------------------------------------


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


# ---- pipelining -----------------------------------------------------------------------------


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
        return simulate_iteration(
            TINY, JOB, plan, profile, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
        ).iteration_time_s

    one_f_one_b = ParallelPlan(pp=2)
    assert step_s(one_f_one_b, dear) > step_s(one_f_one_b, CPU)
    assert step_s(plan, dear) - step_s(plan, CPU) > step_s(one_f_one_b, dear) - step_s(
        one_f_one_b, CPU
    )


# ---- data parallelism -----------------------------------------------------------------------


def test_ddp_buckets_all_hold_the_plans_bucket_size():
    # The executor passes bucket_cap_mb, so torch 2.13's BucketCapacityConfig caps the first
    # bucket at bucket_cap_mb too (the 1 MiB first bucket only applies when it is unset).
    plan = ParallelPlan(dp=2, ddp_bucket_size=100_000)
    tail = sim(plan).tails[0]
    sizes = [e[3] for e in tail.dp_events]
    params = stage_layout(TINY, plan, 0).dense
    assert sizes[0] == sizes[1] == 100_000 * FP32
    assert sum(sizes) == pytest.approx(params * FP32)
    one = sim(ParallelPlan(dp=2)).tails[0]
    assert len(one.dp_events) == 1  # the whole model fits under the 40M default


def test_tensor_parallel_data_parallel_uses_the_bucketed_all_reduce():
    plan = ParallelPlan(tp=2, dp=2)
    tail = sim(plan).tails[0]
    assert tail.dp_events and all("dense" in e[0] for e in tail.dp_events)


def idle_gather_s(profile, rates, params, tensors, group):
    """A gather priced from the idle module's figures (no in-context probe)."""
    return fsdp_gather_s(profile, rates, params, tensors, group, host_s=0.0, backward=False)


def test_fsdp_gathers_every_module_every_microbatch():
    base = chunks(ParallelPlan(dp=2))[0][0]
    fsdp = chunks(ParallelPlan(dp=2, distributed_optimizer=True))[0][0]
    placements = plan_placements(CPU, ParallelPlan(dp=2, distributed_optimizer=True), 4)
    params = stage_layout(TINY, ParallelPlan(dp=2), 0)
    blocks, root = params.blocks[:-1], params.blocks[-1]
    group = placements["dp-cp"]
    per_block = [idle_gather_s(CPU, RATES, p, 9, group) for p in blocks]
    expected = sum(per_block) + idle_gather_s(CPU, RATES, root, 3, group)
    assert fsdp.forward.compute_s - base.forward.compute_s == pytest.approx(expected)
    # pp = 1: every module reshards after forward and gathers again in backward.
    assert fsdp.backward.compute_s - base.backward.compute_s == pytest.approx(expected)
    one = idle_gather_s(CPU, RATES, 1000, 1, group)
    # The profile's module figure already holds a gather of FSDP_PROBE_BYTES (latency
    # included): only the bytes beyond it are added.
    assert one == pytest.approx(
        400e-6 + 3 * 1000 * FP32 / 50e9 + (1000 * FP32 - FSDP_PROBE_BYTES) * 0.5 / 0.8e9
    )
    # Each further tensor of a module adds the profile's per-tensor figure (fixture: 30 us).
    three = idle_gather_s(CPU, RATES, 1000, 3, group)
    assert three - one == pytest.approx(2 * 30e-6)
    # The module figure is a typical (median) call: a waited gather also pays the sweep's
    # typical excess of its op, as every waited collective does.
    waited = dataclasses.replace(RATES, collective_excess=(("all_gather", 2, 0.4e-3),))
    assert idle_gather_s(CPU, waited, 1000, 1, group) == pytest.approx(one + 0.4e-3)
    waited = dataclasses.replace(RATES, collective_excess=(("reduce_scatter", 2, 1.5e-3),))
    plain_reduce = fsdp_reduce(CPU, RATES, 1000, 1, group, "r")
    assert fsdp_reduce(CPU, waited, 1000, 1, group, "r").comm_s == pytest.approx(
        plain_reduce.comm_s + 1.5e-3
    )
    piped = chunks(ParallelPlan(pp=2, distributed_optimizer=True, dp=2))
    assert piped[0][0].backward.compute_s == pytest.approx(
        chunks(ParallelPlan(pp=2, dp=2))[0][0].backward.compute_s
    )


def test_optimizer_pays_dtensor_dispatch_and_sequence_parallel_norm_reads():
    plain = ParallelPlan()
    placements = plan_placements(CPU, plain, 4)
    params = stage_layout(TINY, plain, 0)
    tensors = params.dense_tensors
    base = optimizer_s(CPU, RATES, plain, params, placements)
    expected = tensors * (80e-6 + 2e-6) + 28 * params.dense / 10e9
    assert base == pytest.approx(expected)
    tp = ParallelPlan(tp=2)
    tp_params = stage_layout(TINY, tp, 0)
    tp_s = optimizer_s(CPU, RATES, tp, tp_params, plan_placements(CPU, tp, 4))
    sp = ParallelPlan(tp=2, sequence_parallel=True)
    sp_s = optimizer_s(CPU, RATES, sp, tp_params, plan_placements(CPU, sp, 4))
    # The DTensor AdamW figure per tensor, the local (half-width) bytes, and the step-end
    # loss all-reduce over the two ranks.
    loss = 400e-6 + 4 * 1.0 / 1.5e9
    dtensor = tensors * (700e-6 + 2e-6) + 28 * tp_params.dense / 10e9
    assert tp_s == pytest.approx(dtensor + loss)
    # 9 norm weights, 3 all-reduces each, of 128 fp32 over the tp pair.
    assert sp_s - tp_s == pytest.approx(27 * (400e-6 + 128 * 4 * 1.0 / 1.5e9), rel=1e-6)


def test_expert_parallel_exchanges_tokens():
    s = sim(ParallelPlan(dp=2, ep=2), model=MOE)
    assert s.breakdown.ep_exposed_s > 0
    assert sim(ParallelPlan(), model=MOE).breakdown.ep_exposed_s == 0


# ---- memory -----------------------------------------------------------------------------


def test_memory_parts_of_one_rank():
    (stage,) = executor_memory_per_stage(TINY, JOB, ParallelPlan())
    params = stage_layout(TINY, ParallelPlan(), 0).dense
    assert stage.weights_bytes == stage.gradients_bytes == params * FP32
    assert stage.optimizer_bytes == 2 * params * FP32
    assert stage.framework_bytes == 0 and stage.comm_buffers_bytes == 0
    assert stage.in_flight_microbatches == 1


def test_memory_responds_to_recompute_sharding_and_pipelining():
    def total(**plan):
        return max(
            s.total_bytes for s in executor_memory_per_stage(TINY, JOB, ParallelPlan(**plan))
        )

    def acts(**plan):
        return executor_memory_per_stage(TINY, JOB, ParallelPlan(**plan))[0].activations_bytes

    assert acts(recompute="full") < acts(recompute="selective") < acts()
    ddp = executor_memory_per_stage(TINY, JOB, ParallelPlan(dp=2))[0]
    assert ddp.comm_buffers_bytes == ddp.gradients_bytes  # DDP's bucket buffers
    fsdp = executor_memory_per_stage(TINY, JOB, ParallelPlan(dp=2, distributed_optimizer=True))[0]
    assert fsdp.weights_bytes == pytest.approx(ddp.weights_bytes / 2)
    assert fsdp.optimizer_bytes == pytest.approx(ddp.optimizer_bytes / 2)
    first, last = executor_memory_per_stage(TINY, JOB, ParallelPlan(pp=2))
    assert first.in_flight_microbatches == 2 and last.in_flight_microbatches == 1
    assert total(micro_batch_size=2) > total()


# ---- the screen -------------------------------------------------------------------------


def test_screen_is_the_simulator_on_a_cpu_profile():
    plans = []
    for world, tp, pp, mbs, rec, opt in itertools.product(
        (2, 4), (1, 2), (1, 2), (1, 2), ("none", "full"), (False, True)
    ):
        plan = ParallelPlan.for_world(
            world, tp=tp, pp=pp, micro_batch_size=mbs, recompute=rec, distributed_optimizer=opt
        )
        if not check_plan(TINY, cluster(world), JOB, plan):
            plans.append((world, plan))
    assert len(plans) > 20
    for world in (2, 4):
        chosen = [p for w, p in plans if w == world]
        screened = screen_plans(
            TINY, cluster(world), JOB, CPU, plans_frame(chosen), options=TORCH_OPTIONS
        )
        for row, plan in zip(screened.itertuples(), chosen, strict=True):
            est = estimate_plan(TINY, cluster(world), JOB, plan, CPU, options=TORCH_OPTIONS)
            assert row.iteration_time_s == pytest.approx(est.iteration_time_s, rel=1e-12)
            assert row.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-12)


def test_screen_marks_impossible_rows():
    frame = pd.DataFrame({"pp": [2, 1], "micro_batch_size": [16, 1], "dp": [1, 2]})
    out = screen_plans(TINY, cluster(2), JOB, CPU, frame, options=TORCH_OPTIONS)
    assert np.isinf(out["iteration_time_s"][0]) and not out["fits"][0]
    assert np.isfinite(out["iteration_time_s"][1])


def test_screen_prices_memory_first_and_does_not_time_plans_over_memory():
    """A plan whose peak exceeds the device's memory keeps its priced peak and gets no
    time; a plan that fits is timed as `estimate_plan` times it."""
    h100 = load_profile("h100-sxm-80gb")
    llama = get_preset("llama3-8b")
    job = TrainingJob(seq_length=4096, global_batch_size=16, precision="bf16")
    over, fits = ParallelPlan(dp=8), ParallelPlan(tp=2, pp=2, dp=2)
    out = screen_plans(
        llama, cluster(8), job, h100, plans_frame([over, fits]), options=TORCH_OPTIONS
    )
    for row, plan in zip(out.itertuples(), (over, fits), strict=True):
        est = estimate_plan(llama, cluster(8), job, plan, h100, options=TORCH_OPTIONS)
        assert row.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-12)
        assert row.fits == (est.peak_memory_bytes <= h100.device.memory_gib * 2**30)
        if row.fits:
            assert row.iteration_time_s == pytest.approx(est.iteration_time_s, rel=1e-12)
        else:
            assert np.isinf(row.iteration_time_s)
    assert not out["fits"][0] and out["fits"][1]


# ---- timeline and waited-for collectives ---------------------------------------------------


def test_the_executor_timeline_all_gathers_context_parallel_keys():
    plan = ParallelPlan(cp=2, cp_comm_type="p2p")  # the executor gathers whatever the plan says
    _, timeline = simulate_plan(TINY, cluster(2), JOB, plan, CPU, options=TORCH_OPTIONS)
    cp = [e for e in timeline.events if e.lane == "cp"]
    assert cp and {e.kind for e in cp} == {"all_gather"}


def test_pipeline_sends_and_collectives_pay_the_typical_excess():
    extra = (
        spread_over_fit("send_recv", 65536, 500e-6),
        spread_over_fit("all_reduce", 65536, 1000e-6),
    )
    noisy = cpu_profile(extra=extra)
    plain = simulate_iteration(
        TINY, JOB, ParallelPlan(pp=2), CPU, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    waited = simulate_iteration(
        TINY, JOB, ParallelPlan(pp=2), noisy, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    assert waited.send_s[0] - plain.send_s[0] == pytest.approx(500e-6)
    tp = ParallelPlan(tp=2)
    a = simulate_iteration(
        TINY, JOB, tp, CPU, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    b = simulate_iteration(
        TINY, JOB, tp, noisy, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    # 2 all-reduces forward and 5 backward per layer, 1 + 1 in embedding and head, per
    # microbatch: each waits 1 ms more.
    per_mb = 4 * 7 + 2
    extra_tp = b.breakdown.tp_exposed_s - a.breakdown.tp_exposed_s
    assert extra_tp == pytest.approx(8 * per_mb * 1e-3, rel=1e-6)


def _tp_extra_and_dp_times(profile) -> tuple[float, float, float]:
    """tp2's exposed TP time on ``profile`` beyond the fixture's, and dp2's iteration time
    on the fixture and on ``profile``."""

    def sim(plan: ParallelPlan, hw):
        return simulate_iteration(
            TINY, JOB, plan, hw, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
        )

    tp, dp = ParallelPlan(tp=2), ParallelPlan(dp=2)
    extra = sim(tp, profile).breakdown.tp_exposed_s - sim(tp, CPU).breakdown.tp_exposed_s
    return extra, sim(dp, CPU).iteration_time_s, sim(dp, profile).iteration_time_s


def test_functional_collectives_pay_the_measured_extra_per_call():
    slower = cpu_profile(extra=(spread("op_overhead.functional_all_reduce", 300e-6),))
    extra_tp, dp_base, dp_slower = _tp_extra_and_dp_times(slower)
    # every TP all-reduce is a DTensor redistribution: 30 per microbatch (above), 8 of them
    assert extra_tp == pytest.approx(8 * (4 * 7 + 2) * 300e-6, rel=1e-6)
    # DDP's bucket all-reduces are plain calls: no extra
    assert dp_slower == pytest.approx(dp_base)


def test_moe_token_exchanges_pay_the_autograd_exchange_not_the_functional_extra():
    plan = ParallelPlan(dp=2, ep=2)
    functional = cpu_profile(extra=(spread("op_overhead.functional_all_to_all", 300e-6),))
    autograd = cpu_profile(extra=(spread("op_overhead.autograd_all_to_all", 1e-3),))
    base = simulate_iteration(
        MOE, JOB, plan, CPU, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    a = simulate_iteration(
        MOE, JOB, plan, functional, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    b = simulate_iteration(
        MOE, JOB, plan, autograd, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    per_step = plan.num_microbatches(JOB.global_batch_size) * MOE.num_layers
    # an older profile: each exchange costs two functional calls (the fallback)
    assert a.breakdown.ep_exposed_s - base.breakdown.ep_exposed_s == pytest.approx(
        per_step * 2 * 2 * 300e-6, rel=1e-6
    )
    # a measured exchange: half of it in each pass, two exchanges per layer
    assert b.breakdown.ep_exposed_s - base.breakdown.ep_exposed_s == pytest.approx(
        per_step * 2 * 1e-3, rel=1e-6
    )


def test_layer_collectives_wait_for_the_ranks_drift_and_ddp_reductions_not():
    drift = cpu_profile(extra=(spread("op_overhead.sync_wait", 2e-3),))
    extra_tp, dp_base, dp_drift = _tp_extra_and_dp_times(drift)
    # the fixture has no collective sweep points: every layer collective pays the drift;
    # per microbatch the 30 all-reduces and the head's all-gather above
    assert extra_tp == pytest.approx(8 * (4 * 7 + 2 + 1) * 2e-3, rel=1e-6)
    assert dp_drift == pytest.approx(dp_base)


def test_tensor_parallel_collectives_pay_the_redistribution_extra_and_context_parallel_not():
    # op_overhead.add is the profile's dispatch here (scale 1); the DTensor operator and
    # to_local the layers already count are taken out of the measured 400 µs
    extra = (
        spread("op_overhead.redistribute_all_reduce", 400e-6),
        spread("op_overhead.redistribute_all_gather", 400e-6),
        spread("op_overhead.redistribute_reduce_scatter", 400e-6),
    )
    slower = cpu_profile(extra=extra)
    rates = host_rates(slower)
    net = 400e-6 - rates.dtensor_forward_s - rates.dtensor_to_local_s
    assert rates.redistribute_s("all_reduce") == pytest.approx(net)
    assert rates.redistribute_s("all_to_all") == 0.0  # never a redistribution
    tp = ParallelPlan(tp=2)
    a = simulate_iteration(
        TINY, JOB, tp, CPU, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    b = simulate_iteration(
        TINY, JOB, tp, slower, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    extra_tp = b.breakdown.tp_exposed_s - a.breakdown.tp_exposed_s
    # per microbatch the 30 all-reduces above and the head's all-gather of the logits
    assert extra_tp == pytest.approx(8 * (4 * 7 + 2 + 1) * net, rel=1e-6)
    # context parallelism gathers K and V with the executor's own functional calls
    cp = ParallelPlan(cp=2)
    c = simulate_iteration(
        TINY, JOB, cp, CPU, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    d = simulate_iteration(
        TINY, JOB, cp, slower, gpus_per_node=4, runtime=runtime_model(TORCH_OPTIONS)
    )
    assert d.iteration_time_s == pytest.approx(c.iteration_time_s)


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
