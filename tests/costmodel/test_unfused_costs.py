"""Memory-bound work Megatron-core runs unfused (costmodel.runtimes.megatron.unfused_costs):
YaRN RoPE outside Transformer Engine's fused kernel and the routed experts' FC2 bias added
expert by expert, and how layer_cost charges them."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import compute as ops
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import moe_shape, routed_experts
from costmodel.runtimes.megatron.unfused_costs import (
    EXPERT_BIAS_KERNELS_PER_EXPERT,
    EXPERT_BIAS_PASSES,
    UNFUSED_ROPE_KERNELS,
    UNFUSED_ROPE_PASSES,
    expert_fc2_bias_time_s,
    rope_time_s,
)
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

B200 = load_profile("b200")
GPT_OSS = get_preset("gpt-oss-120b")
JOB = TrainingJob(seq_length=4096, global_batch_size=1280)
PLAN = ParallelPlan(dp=64, ep=8, micro_batch_size=4)
NO_HOST = dataclasses.replace(DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
TOKENS = 4 * 4096
QK_WIDTH = (64 + 8) * 64  # 64 query heads and 8 key heads of 64 on one rank (tp 1)


def gpt_oss_layer(**options):
    groups = CommGroups(
        ep=strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    )
    opts = dataclasses.replace(NO_HOST, **options)
    return layer_cost(GPT_OSS, JOB, PLAN, B200, kind=MOE_LAYER, groups=groups, options=opts)


def test_unfused_rope_counts_the_passes_and_kernels_of_the_pytorch_chain():
    # rope_utils._apply_rotary_pos_emb_bshd over q and k: 12 passes forward, 13 backward,
    # each tensor its own chain of 12 / 7 launches.
    for direction, passes, kernels in (("forward", 12, 12), ("backward", 13, 7)):
        assert UNFUSED_ROPE_PASSES[direction] == passes
        assert UNFUSED_ROPE_KERNELS[direction] == kernels
        moved = passes * 2 * TOKENS * QK_WIDTH
        expected = ops.memory_bound_time_s(B200, moved, num_ops=2 * kernels)
        got = rope_time_s(B200, TOKENS, QK_WIDTH, 2, direction, fused=False)
        assert got == pytest.approx(expected)
        fused = rope_time_s(B200, TOKENS, QK_WIDTH, 2, direction, fused=True)
        assert fused == pytest.approx(ops.rope_time_s(B200, TOKENS, QK_WIDTH, 2, direction))


def test_layer_cost_charges_the_unfused_rope_difference_in_both_passes():
    fused, unfused = gpt_oss_layer(), gpt_oss_layer(rope_fusion=False)
    for direction, f, u in (
        ("forward", fused.forward, unfused.forward),
        ("backward", fused.backward, unfused.backward),
    ):
        extra = rope_time_s(B200, TOKENS, QK_WIDTH, 2, direction, fused=False) - rope_time_s(
            B200, TOKENS, QK_WIDTH, 2, direction, fused=True
        )
        assert u.compute_s - f.compute_s == pytest.approx(extra)


def test_expert_fc2_bias_is_priced_per_expert_over_the_fc2_output():
    # TEGroupedMLP._apply_bias: t + b * p per local expert, then torch.cat.
    shape = moe_shape(GPT_OSS, PLAN, TOKENS)
    assert shape.rows == 4 * TOKENS and shape.local_experts == 16
    for direction in ("forward", "backward"):
        moved = EXPERT_BIAS_PASSES[direction] * 2 * shape.rows * GPT_OSS.hidden_size
        kernels = EXPERT_BIAS_KERNELS_PER_EXPERT[direction] * 16 + 1
        expected = ops.memory_bound_time_s(B200, moved, num_ops=kernels)
        got = expert_fc2_bias_time_s(B200, shape.rows, GPT_OSS.hidden_size, 2, 16, direction)
        assert got == pytest.approx(expected)
    assert EXPERT_BIAS_PASSES == {"forward": 6, "backward": 8}


def routed(model, **options):
    groups = CommGroups(
        ep=strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    )
    opts = dataclasses.replace(NO_HOST, **options)
    return routed_experts(model, PLAN, B200, TOKENS, 2, "bf16", groups, opts)


def test_routed_experts_add_the_fc2_bias_unless_the_fused_grouped_mlp_runs_them():
    rows = moe_shape(GPT_OSS, PLAN, TOKENS).rows
    bias_f = expert_fc2_bias_time_s(B200, rows, GPT_OSS.hidden_size, 2, 16, "forward")
    bias_b = expert_fc2_bias_time_s(B200, rows, GPT_OSS.hidden_size, 2, 16, "backward")
    plain = GPT_OSS.replace(add_bias_linear=False)
    biased, unbiased = routed(GPT_OSS), routed(plain)
    assert biased[0].compute_s - unbiased[0].compute_s == pytest.approx(bias_f)
    assert biased[1].compute_s - unbiased[1].compute_s == pytest.approx(bias_b)
    assert biased[2] - unbiased[2] == pytest.approx(bias_b)  # dgrad
    # TE's fused grouped MLP applies the bias inside its ops: nothing is added.
    fused_biased = routed(GPT_OSS, moe_fused_grouped_mlp=True)
    fused_plain = routed(plain, moe_fused_grouped_mlp=True)
    assert fused_biased[0].compute_s == pytest.approx(fused_plain[0].compute_s)
    assert fused_biased[1].compute_s == pytest.approx(fused_plain[1].compute_s)
