"""Query/key norms (``ModelSpec.qk_layernorm``, Qwen3) in the Megatron runtime: the saved
inputs of the two Transformer Engine RMSNorms (`costmodel.layer_activations.qk_norm_saved_bytes`)
and their kernels' time (`costmodel.runtimes.megatron.attention_costs.qk_norm_time_s`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.compute import norm_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.layer_activations import layer_activations
from costmodel.runtimes.megatron.layer_costs import layer_cost
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

QWEN3_30B = get_preset("qwen3-30b-a3b")
LLAMA = get_preset("llama3-8b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")
B200 = load_profile("b200")
DEVICE_ONLY = dataclasses.replace(DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
"""No MoE host-launch floor, so a MoE layer's passes last their device work."""


def _without(model):
    return dataclasses.replace(model, qk_layernorm=False)


def test_qwen3_30b_keeps_9360_bytes_per_token_per_layer_for_its_qk_norms() -> None:
    """Qwen3-30B-A3B (32 query heads, 4 key/value groups, head_dim 128; Hugging Face
    ``Qwen/Qwen3-30B-A3B`` config.json), bf16, tp 1: the two norms save their inputs,
    (32 + 4) heads x 128 x 2 bytes = 9,216 bytes, and one fp32 rsigma per head,
    36 x 4 = 144 bytes: 9,360 bytes per token and layer."""
    assert QWEN3_30B.qk_layernorm
    plan = ParallelPlan(ep=8, dp=8)
    tokens = JOB.seq_length * plan.micro_batch_size
    tensors = dict(layer_activations(QWEN3_30B, JOB, plan, 0).tensors)
    assert tensors["qk_norm_input"] == pytest.approx(9360 * tokens)
    bare = layer_activations(_without(QWEN3_30B), JOB, plan, 0)
    assert "qk_norm_input" not in dict(bare.tensors)
    full = layer_activations(QWEN3_30B, JOB, plan, 0).full_bytes
    assert full - bare.full_bytes == pytest.approx(9360 * tokens)


def test_tensor_parallel_splits_the_query_heads_and_replicates_a_group_per_rank() -> None:
    """tp 8 over 4 groups: 32 / 8 = 4 query heads and one replicated group per rank,
    (4 + 1) x (128 x 2 + 4) = 1,300 bytes per token (sequence-parallel rows gathered)."""
    plan = ParallelPlan(tp=8, ep=8, sequence_parallel=True)
    tokens = JOB.seq_length * plan.micro_batch_size
    tensors = dict(layer_activations(QWEN3_30B, JOB, plan, 0).tensors)
    assert tensors["qk_norm_input"] == pytest.approx(1300 * tokens)


@settings(max_examples=20, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    mbs=st.sampled_from([1, 2]),
    is_moe=st.booleans(),
)
def test_qk_norms_add_exactly_their_kernels_time(tp: int, mbs: int, is_moe: bool) -> None:
    """Forward and backward grow by one norm over the rank's query plus key width; nothing
    else in the layer moves (device time: the MoE host floor off)."""
    plan = ParallelPlan(tp=tp, ep=8, micro_batch_size=mbs, sequence_parallel=tp > 1)
    model = QWEN3_30B
    with_norm = layer_cost(
        model, JOB, plan, B200, kind=MOE_LAYER if is_moe else DENSE_LAYER, options=DEVICE_ONLY
    )
    bare = layer_cost(
        _without(model),
        JOB,
        plan,
        B200,
        kind=MOE_LAYER if is_moe else DENSE_LAYER,
        options=DEVICE_ONLY,
    )
    tokens = JOB.seq_length * mbs
    qk_width = (model.num_attention_heads / tp + model.query_groups / tp) * model.head_dim
    forward = norm_time_s(B200, tokens, qk_width, 2, "forward")
    backward = norm_time_s(B200, tokens, qk_width, 2, "backward")
    assert with_norm.forward.compute_s - bare.forward.compute_s == pytest.approx(forward)
    assert with_norm.backward.compute_s - bare.backward.compute_s == pytest.approx(backward)


def test_a_model_without_qk_norms_is_priced_as_before() -> None:
    assert not LLAMA.qk_layernorm
    plan = ParallelPlan(tp=2, dp=4, sequence_parallel=True)
    tensors = dict(layer_activations(LLAMA, JOB, plan, 0).tensors)
    assert "qk_norm_input" not in tensors
