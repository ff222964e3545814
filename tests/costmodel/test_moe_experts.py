"""How Transformer Engine runs the routed experts (costmodel.runtimes.megatron.moe_experts):
per-expert launches and FP8 quantization of TE ``GroupedLinear`` against the fused grouped
MLP, and the forward host floor around the dropless synchronization."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import compute as ops
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_quantization import fp8_quantize_time_s
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import expert_gemm3, routed_experts
from costmodel.runtimes.megatron.moe_experts import (
    FUSED_MLP_LAUNCHES,
    expert_dgrad_launches,
    expert_fp8_quantize_s,
    expert_launches,
    forward_host_floor_s,
    merged_host_floor_s,
    unattributed_device_s,
)
from costmodel.runtimes.megatron.moe_launches import (
    FIXED_LAUNCHES,
    PREPROCESS_LAUNCHES,
    ROUTER_LAUNCHES,
    moe_host_launches,
)
from costmodel.topology import strided_group_placement
from profiles.lookup import memory_bandwidth_Bps
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile

B200 = load_profile("b200")
QWEN = get_preset("qwen3-30b-a3b")
PLAN = ParallelPlan(dp=8, ep=8)
EP = strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
GROUPS = CommGroups(ep=EP)
FUSED = dataclasses.replace(DEFAULT_OPTIONS, moe_fused_grouped_mlp=True)


def test_grouped_linear_launches_repeat_per_expert_and_the_fused_mlp_does_not():
    # GroupedLinear (TE grouped_linear.py _GroupedLinear): general_grouped_gemm is called once
    # per projection in forward (FC1, FC2: 2 Python-level calls) and twice per projection in
    # backward (dgrad, wgrad: 4); gemm.cpp te_general_grouped_gemm then issues one cuBLASLt
    # GEMM per expert from C++ (2 x 16 forward, 4 x 16 backward). FP8 adds one _split_quantize
    # call per projection and pass (2 + 2 Python-level) and, inside it, one quantization per
    # expert slice (cast.cpp multi_tensor_quantize_impl: 2 x 16 more per pass).
    assert expert_launches(16, False, "forward", fused=False) == (2, 2 * 16)
    assert expert_launches(16, False, "backward", fused=False) == (4, 4 * 16)
    assert expert_launches(16, True, "forward", fused=False) == (4, 4 * 16)
    assert expert_launches(16, True, "backward", fused=False) == (6, 6 * 16)
    for local in (4, 16, 64):
        assert expert_launches(local, True, "backward", fused=True) == (5, 0)
    fused = moe_host_launches(16, True, "forward", fused_mlp=True)
    assert (fused.python, fused.expert) == (
        FIXED_LAUNCHES["forward"] + FUSED_MLP_LAUNCHES["forward"],
        0,
    )


def test_biased_experts_add_python_level_launches_per_expert():
    # Megatron-core experts.py TEGroupedMLP._apply_bias: torch.split of the FC2 output and
    # the probs, then t + b * p per expert (2 PyTorch launches each, forward) and one
    # torch.cat; backward: the multiply's two gradients, each a product and a row sum
    # (4 per expert), and the concatenation's split (unfused_costs module docstring: 4 per
    # expert plus one). All Python-level; the GEMMs per expert stay C++.
    assert expert_launches(16, True, "forward", fused=False, biased=True) == (
        4 + 2 * 16 + 1,
        4 * 16,
    )
    assert expert_launches(16, False, "backward", fused=False, biased=True) == (
        4 + 4 * 16 + 1,
        4 * 16,
    )
    # The fused grouped MLP scales the bias in its epilogue: nothing per expert.
    assert expert_launches(16, True, "forward", fused=True, biased=True) == (4, 0)


def test_grouped_linear_quantizes_four_operands_in_one_kernel_per_expert():
    rows, h, w = 65536.0, 2048, 768.0
    forward, backward = expert_fp8_quantize_s(
        B200,
        rows=rows,
        hidden=h,
        width=w,
        gated=True,
        elem=2,
        local_experts=16,
        fused=False,
        recipe="delayed",
    )

    def split(elements: float) -> float:
        return 16 * fp8_quantize_time_s(B200, elements / 16, 2, recipe="delayed")

    assert forward == pytest.approx(split(rows * h) + split(rows * w))
    assert backward == pytest.approx(split(rows * h) + split(rows * 2 * w))


def test_current_scaling_reads_each_expert_operand_once_more():
    # Float8CurrentScalingQuantizer::quantize per expert slice: the amax kernel reads the
    # bf16 slice (2 bytes per element) before the cast; no TP amax reduction for experts.
    rows, h, w = 65536.0, 2048, 768.0
    shape = dict(rows=rows, hidden=h, width=w, gated=True, elem=2, local_experts=16, fused=False)
    delayed = expert_fp8_quantize_s(B200, **shape, recipe="delayed")
    current = expert_fp8_quantize_s(B200, **shape, recipe="tensorwise")
    bw = memory_bandwidth_Bps(B200)
    assert current[0] - delayed[0] == pytest.approx(2 * rows * (h + w) / bw)
    assert current[1] - delayed[1] == pytest.approx(2 * rows * (h + 2 * w) / bw)
    assert expert_fp8_quantize_s(B200, **shape, recipe="mxfp8") == delayed


def test_fused_mlp_quantizes_only_fc1_input_and_fc2_output_gradient():
    rows, h = 65536.0, 2048
    forward, backward = expert_fp8_quantize_s(
        B200,
        rows=rows,
        hidden=h,
        width=768.0,
        gated=True,
        elem=2,
        local_experts=16,
        fused=True,
        recipe="delayed",
    )
    one = fp8_quantize_time_s(B200, rows * h, 2, recipe="delayed")
    assert forward == pytest.approx(one)
    assert backward == pytest.approx(one)


def experts(job: TrainingJob, options: ExecutionOptions, precision: str = "fp8"):
    tokens = float(job.seq_length)
    dtype = "fp8" if precision == "fp8" else "bf16"
    return routed_experts(QWEN, PLAN, B200, tokens, 2, dtype, GROUPS, options)


def gemm_gap(precision: str, direction: int) -> float:
    """Unfused minus fused expert GEMM seconds of `experts` (FC1 and FC2) in one direction
    (0 forward, 1 dgrad, 2 wgrad)."""
    m, h, w = 4096 * QWEN.moe_top_k // 16, QWEN.hidden_size, QWEN.expert_ffn_hidden_size
    dtype = "fp8" if precision == "fp8" else "bf16"
    gap = 0.0
    for n, k in ((2 * w, h), (h, w)):
        unfused = expert_gemm3(B200, 16, m, n, k, dtype, fused=False)
        fused = expert_gemm3(B200, 16, m, n, k, dtype, fused=True)
        gap += unfused[direction] - fused[direction]
    return gap


def test_fp8_routed_experts_carry_the_quantization_and_fused_mlp_drops_the_activation():
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    rows = QWEN.moe_top_k * 4096.0
    width = float(QWEN.expert_ffn_hidden_size)
    quant_f, quant_b = expert_fp8_quantize_s(
        B200, rows=rows, hidden=QWEN.hidden_size, width=width, gated=True, elem=2,
        local_experts=16, fused=False, recipe="delayed",
    )  # fmt: skip
    fused_f, fused_b = expert_fp8_quantize_s(
        B200, rows=rows, hidden=QWEN.hidden_size, width=width, gated=True, elem=2,
        local_experts=16, fused=True, recipe="delayed",
    )  # fmt: skip
    act_f = ops.activation_time_s(B200, rows, width, 2, gated=True, direction="forward")
    act_b = ops.activation_time_s(B200, rows, width, 2, gated=True, direction="backward")
    unfused = experts(job, DEFAULT_OPTIONS)
    fused = experts(job, FUSED)
    gemm_f, gemm_b = gemm_gap("fp8", 0), gemm_gap("fp8", 1) + gemm_gap("fp8", 2)
    assert unfused[0].compute_s - fused[0].compute_s == pytest.approx(
        act_f + quant_f - fused_f + gemm_f
    )
    assert unfused[1].compute_s - fused[1].compute_s == pytest.approx(
        act_b + quant_b - fused_b + gemm_b
    )
    # bf16 experts quantize nothing: only the activation and the GEMM kernels differ.
    bf16 = experts(job, DEFAULT_OPTIONS, "bf16")
    bf16_fused = experts(job, FUSED, "bf16")
    assert bf16[0].compute_s - bf16_fused[0].compute_s == pytest.approx(act_f + gemm_gap("bf16", 0))


def test_grouped_linear_runs_one_gemm_per_expert_and_the_fused_mlp_one_grouped_kernel():
    # TE GroupedLinear: one cuBLAS GEMM per expert, each at its own shape's efficiency and
    # with its own op overhead; the fused grouped MLP: one kernel per projection and
    # direction over all local experts (costmodel.compute.batched_gemm_time_s).
    m, n, k = 512, 1536, 2048
    single = (
        ops.gemm_time_s(B200, m, n, k, "fp8"),
        ops.gemm_time_s(B200, m, k, n, "fp8"),
        ops.gemm_time_s(B200, k, n, m, "fp8"),
    )
    assert expert_gemm3(B200, 16, m, n, k, "fp8", fused=False) == pytest.approx(
        tuple(16 * t for t in single)
    )
    fused = expert_gemm3(B200, 16, m, n, k, "fp8", fused=True)
    assert fused == pytest.approx(
        (
            ops.batched_gemm_time_s(B200, 16, m, n, k, "fp8"),
            ops.batched_gemm_time_s(B200, 16, m, k, n, "fp8"),
            ops.batched_gemm_time_s(B200, 16, k, n, m, "fp8"),
        )
    )
    # One expert: the grouped kernel is that expert's GEMM.
    assert expert_gemm3(B200, 1, m, n, k, "fp8", fused=True) == pytest.approx(single)
    # Small per-expert GEMMs: one kernel over all of them pays one op overhead, not 16.
    unfused = expert_gemm3(B200, 16, m, n, k, "fp8", fused=False)
    for unfused_s, fused_s in zip(unfused, fused, strict=True):
        assert fused_s < unfused_s - 14 * ops.op_overhead_s(B200)


def test_forward_floor_takes_the_larger_excess():
    # Post-sync launches against the experts' own kernels bind before the layer's total.
    assert forward_host_floor_s(
        layer_gpu_s=5.0, post_sync_gpu_s=2.0, host_s=4.0, post_sync_host_s=3.5
    ) == pytest.approx(1.5)
    # Launches before the synchronization (ungraphed router) can set the floor instead.
    assert forward_host_floor_s(
        layer_gpu_s=1.0, post_sync_gpu_s=0.8, host_s=3.0, post_sync_host_s=1.5
    ) == pytest.approx(2.0)
    assert forward_host_floor_s(
        layer_gpu_s=5.0, post_sync_gpu_s=4.0, host_s=4.0, post_sync_host_s=3.5
    ) == pytest.approx(0.0)


def test_merged_floor_pools_the_backward_after_the_synchronization():
    # Forward: 5 s of kernels, 2 s after the sync; host 4 s, 3.5 s after the sync. A
    # backward of 6 s of kernels and 4 s of launches, all after the sync in the merged step:
    # max(0, 8 - 11, 7.5 - 8) = 0, where the forward alone waits 1.5 s.
    merged = {"forward_gpu_s": 5.0, "post_sync_gpu_s": 2.0, "forward_host_s": 4.0}
    merged |= {"post_sync_host_s": 3.5, "backward_gpu_s": 6.0, "backward_host_s": 4.0}
    assert merged_host_floor_s(**merged) == pytest.approx(0.0)
    # A backward whose launches outlast its kernels by 1 s: 3.5 + 7 - 2 - 6 = 2.5 s, the
    # two passes' floors (1.5 + 1): the forward's attention runs before the synchronization.
    merged |= {"backward_host_s": 7.0}
    assert merged_host_floor_s(**merged) == pytest.approx(2.5)
    # Host-bound over the whole step (4 + 8 - 5 - 6 = 1 s) where the post-sync part waits
    # only 3.5 + 8 - 5 - 6 = 0.5 s.
    merged |= {"post_sync_gpu_s": 5.0, "backward_host_s": 8.0}
    assert merged_host_floor_s(**merged) == pytest.approx(1.0)
    # The backward's input-gradient launches, issued before the synchronization, leave the
    # post-sync term: 3.5 + (8 - 3) - 2 - 6 = 0.5 s, under the whole step's 1 s (3.5 s if
    # they counted after it).
    merged |= {"post_sync_gpu_s": 2.0, "backward_pre_sync_host_s": 3.0}
    assert merged_host_floor_s(**merged) == pytest.approx(1.0)
    merged |= {"backward_pre_sync_host_s": 0.0}
    assert merged_host_floor_s(**merged) == pytest.approx(3.5)


@pytest.mark.parametrize("fp8", [False, True])
def test_dgrad_launches_are_the_input_gradient_half_of_the_backward(fp8):
    # GroupedLinear (TE grouped_linear.py, _GroupedLinear.backward): the dgrad
    # general_grouped_gemm call of FC2 and of FC1, one cuBLASLt GEMM per expert each; FP8
    # adds the _split_quantize of each output gradient, one quantization per expert.
    quantize = 2 if fp8 else 0
    assert expert_dgrad_launches(8, fp8, fused=False) == (2 + quantize, (2 + quantize) * 8)
    # Fused grouped MLP (TE backward_grouped_mlp.py): group_quantize of FC2's output
    # gradient, the FC2 dgrad-dSwiGLU kernel and FC1's dgrad; the two weight-gradient
    # grouped GEMMs follow.
    assert expert_dgrad_launches(8, fp8, fused=True) == (3, 0)


@pytest.mark.parametrize(
    ("gpu_f", "post_gpu", "host_f", "post_host", "gpu_b", "host_b"),
    [(5.0, 2.0, 4.0, 3.5, 6.0, 7.0), (1.0, 0.8, 3.0, 1.5, 2.0, 1.0), (2.0, 1.0, 1.0, 2.5, 3, 3)],
)
def test_merged_floor_is_never_more_than_the_two_passes_floors(
    gpu_f, post_gpu, host_f, post_host, gpu_b, host_b
):
    separate = forward_host_floor_s(
        layer_gpu_s=gpu_f, post_sync_gpu_s=post_gpu, host_s=host_f, post_sync_host_s=post_host
    ) + max(0.0, host_b - gpu_b)
    merged = merged_host_floor_s(
        forward_gpu_s=gpu_f,
        backward_gpu_s=gpu_b,
        post_sync_gpu_s=post_gpu,
        forward_host_s=host_f,
        backward_host_s=host_b,
        post_sync_host_s=post_host,
    )
    assert merged <= separate + 1e-12


def layer(job: TrainingJob, options: ExecutionOptions):
    return layer_cost(QWEN, job, PLAN, B200, kind=MOE_LAYER, groups=GROUPS, options=options)


def test_launches_after_the_synchronization_hide_only_behind_the_routed_experts():
    # A layer whose kernels outlast its launches but whose routed experts do not: the
    # attention cannot hide the expert launches issued after the token-count copy.
    launch_s = 50e-6
    scopes = frozenset({"attn", "moe_router", "moe_preprocess"})
    options = dataclasses.replace(
        DEFAULT_OPTIONS, moe_host_launch_s=launch_s, moe_expert_launch_s=launch_s
    )
    options = dataclasses.replace(options, cuda_graph_scopes=scopes, moe_token_device_s=50e-9)
    kernels_only = dataclasses.replace(options, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
    job = TrainingJob(seq_length=16384, global_batch_size=64, precision="fp8")
    gpu = layer(job, kernels_only)
    routed_f = routed_experts(QWEN, PLAN, B200, 16384.0, 2, "fp8", GROUPS, kernels_only)[0]
    # The MoE block's device time per token runs after the synchronization too.
    token_f = unattributed_device_s(B200, 16384.0, options.moe_token_device_s)[0]
    after_sync_s = routed_f.duration_s + token_f
    launches = moe_host_launches(16, True, "forward").total
    post_host = (launches - ROUTER_LAUNCHES - PREPROCESS_LAUNCHES) * launch_s
    assert post_host < gpu.forward.duration_s  # the whole-layer floor would not bind
    assert post_host > after_sync_s
    expected = gpu.forward.duration_s + post_host - after_sync_s + launch_s
    assert layer(job, options).forward.duration_s == pytest.approx(expected)


def test_fused_mlp_leaves_no_per_expert_host_floor():
    launch_s = 30e-6
    options = dataclasses.replace(FUSED, moe_host_launch_s=launch_s, moe_expert_launch_s=launch_s)
    kernels_only = dataclasses.replace(FUSED, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
    job = TrainingJob(seq_length=8192, global_batch_size=64, precision="fp8")
    host_b = moe_host_launches(16, True, "backward", fused_mlp=True).total * launch_s
    gpu = layer(job, kernels_only)
    assert host_b < gpu.backward.duration_s
    assert layer(job, options).backward.duration_s == pytest.approx(gpu.backward.duration_s)


def test_device_time_per_token_adds_a_third_forward_and_two_thirds_backward():
    per_token_s = 200e-9
    job = TrainingJob(seq_length=8192, global_batch_size=64, precision="fp8")
    bare = dataclasses.replace(
        DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0, moe_token_device_s=0.0
    )
    timed = dataclasses.replace(bare, moe_token_device_s=per_token_s)
    tokens = job.seq_length  # micro-batch 1, no TP or CP: every token of the sequence
    without, with_time = layer(job, bare), layer(job, timed)
    added = per_token_s * tokens
    assert with_time.forward.duration_s - without.forward.duration_s == pytest.approx(added / 3)
    assert with_time.backward.duration_s - without.backward.duration_s == pytest.approx(
        2 * added / 3
    )
    assert with_time.dgrad_s - without.dgrad_s == pytest.approx(2 * added / 3)


def test_device_time_per_token_is_rerun_with_a_recomputed_moe_block_and_not_on_a_cpu():
    per_token_s = 200e-9
    job = TrainingJob(seq_length=8192, global_batch_size=64, precision="bf16")
    plan = dataclasses.replace(PLAN, recompute="selective", recompute_modules=("moe",))
    bare = dataclasses.replace(
        DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0, moe_token_device_s=0.0
    )
    timed = dataclasses.replace(bare, moe_token_device_s=per_token_s)

    def rerun(options: ExecutionOptions) -> float:
        cost = layer_cost(QWEN, job, plan, B200, kind=MOE_LAYER, groups=GROUPS, options=options)
        return cost.recompute.duration_s

    assert rerun(timed) - rerun(bare) == pytest.approx(per_token_s * job.seq_length / 3)
    assert unattributed_device_s(cpu_profile(), 1e4, per_token_s) == (0.0, 0.0)
    assert unattributed_device_s(B200, 1e4, per_token_s) == pytest.approx((1e-3 / 1.5, 2e-3 / 1.5))


def test_device_time_per_token_scales_with_the_profiles_hbm_bandwidth():
    h100 = load_profile("h100-sxm-80gb")
    per_token_s = 200e-9
    on_b200 = sum(unattributed_device_s(B200, 1e4, per_token_s))
    on_h100 = sum(unattributed_device_s(h100, 1e4, per_token_s))
    assert on_b200 == pytest.approx(per_token_s * 1e4)
    assert on_h100 / on_b200 == pytest.approx(B200.device.hbm_GBps / h100.device.hbm_GBps)
