"""Megatron-core's Muon (`costmodel.optimizer_muon`): Newton-Schulz FLOPs by hand, which
matrices it steps, its state against Megatron-core's allocation, its sharding, step time and
layer-wise gather, and Adam jobs left as they were."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.memory import memory_per_stage
from costmodel.muon_sharding import (
    adam_tensors,
    deal,
    rank_matrices,
    vocab_tensors,
    worst_rank_share,
)
from costmodel.optimizer_muon import (
    MUON_STEP_BYTES,
    NS_STEPS,
    MuonMatrix,
    is_muon,
    layer_matrices,
    mtp_matrices,
    muon_shards,
    muon_state_bytes,
    muon_step_bytes,
    muon_step_s,
    newton_schulz_flops,
    stage_matrices,
)
from costmodel.optimizer_state import adam_state_bytes
from costmodel.rank_params import stage_params
from profiles.store import load_profile
from specs import ClusterSpec, ParallelPlan, TrainingJob
from specs.errors import SpecError
from specs.params import count_params
from specs.presets import get_preset

PROFILE = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-8b")
DSV3 = get_preset("deepseek-v3")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
DIST_MUON = dataclasses.replace(JOB, optimizer="dist_muon")
MUON = dataclasses.replace(JOB, optimizer="muon")
PLAN = ParallelPlan.for_world(16, tp=2)


def test_newton_schulz_flops_by_hand() -> None:
    # Kimi-K2's expert fc1 (2 x 2048 rows, 7168 columns): m = 4096, n = 7168, per step
    # X·Xᵀ 2·4096²·7168 + A·A 2·4096³ + B·X 2·4096²·7168
    per_step = 2 * 4096**2 * 7168 + 2 * 4096**3 + 2 * 4096**2 * 7168
    assert per_step == 618_475_290_624
    assert newton_schulz_flops(4096, 7168) == 5 * per_step
    assert newton_schulz_flops(7168, 4096) == 5 * per_step  # a tall matrix is transposed
    assert newton_schulz_flops(8, 8, steps=1) == 4 * 8**3 + 2 * 8**3
    assert NS_STEPS == 5
    with pytest.raises(SpecError, match="must be >= 1"):
        newton_schulz_flops(0, 8)


def test_state_bytes_match_megatron_allocation() -> None:
    # Float16OptimizerWithFloat16Params: fp32 main param (4); muon_init_state_fn:
    # momentum_buffer = zeros_like(fp32 main param) (4); Adam keeps exp_avg and exp_avg_sq
    assert muon_state_bytes("bf16") == 8
    assert muon_state_bytes("fp8") == 8
    assert muon_state_bytes("fp32") == 4  # FP32Optimizer steps the weight in place
    assert adam_state_bytes("bf16").total_bytes == 12


def test_matrices_are_the_two_dimensional_layer_weights() -> None:
    """At tp = ep = 1 a layer's matrices hold exactly its projection, MLP, router and expert
    weights, MLA's down projections included (no biases in these models); norms stay on
    Adam."""
    plan = ParallelPlan.for_world(1)
    for model in (LLAMA, DSV3):
        counts = count_params(model)
        for is_moe in set(model.moe_layer_mask()):
            layer = next(c for c in counts.layers if c.is_moe == is_moe)
            mats = layer_matrices(model, plan, is_moe)
            expected = layer.attention + layer.latent_down_projections + layer.mlp
            expected += layer.routed_experts + layer.router
            assert sum(m.params for m in mats) == expected
            assert sum(m.params for m in mats if m.expert) == layer.routed_experts


def test_gqa_split_qkv_and_tp_shards() -> None:
    mats = layer_matrices(LLAMA, PLAN, False)
    q, kv, out, fc1, fc2 = mats
    assert (q.rows, q.cols) == (32 * 128 // 2, 4096)
    assert (kv.rows, kv.cols, kv.count) == (8 // 2 * 128, 4096, 2)  # K and V apart
    assert (out.rows, out.cols) == (4096, 32 * 128 // 2)
    assert (fc1.rows, fc2.cols) == (2 * 14336 // 2, 14336 // 2)


def test_muon_shards() -> None:
    plan = ParallelPlan.for_world(16, tp=2, cp=2)
    # dp·cp = 16 / tp 2 = 8; expert dp = 16 / (etp 2 · ep 1 · pp 1) = 8
    assert muon_shards(DIST_MUON, plan) == (plan.dp * plan.cp, plan.expert_dp) == (8, 8)
    assert muon_shards(MUON, plan) == (1, 1)
    assert is_muon(MUON) and is_muon(DIST_MUON) and not is_muon(JOB)


def test_deal_is_megatrons_ping_pong_by_size() -> None:
    # sorted by size: indices 1, 3, 2, 4, 0; ranks 0, 1, 1, 0, 0 (shard_params)
    assert deal([5, 1, 3, 2, 4], 2) == [[1, 4, 0], [3, 2]]
    assert deal([2, 1], 1) == [[1, 0]]


def test_muon_share_is_everything_and_dist_muon_holds_whole_parameters() -> None:
    layers = tuple(range(LLAMA.num_layers))
    params = stage_params(LLAMA, PLAN, 0)
    muon = worst_rank_share(
        LLAMA, MUON, PLAN, 0, dense=params.dense, expert=params.expert, adam_bytes=12
    )
    mats = stage_matrices(LLAMA, PLAN, layers)
    assert muon.muon_params == sum(m.params for m in mats)
    assert muon.muon_params + muon.adam_params == pytest.approx(params.dense + params.expert)
    state = muon.state_bytes("bf16", 12)
    assert state == pytest.approx(8 * muon.muon_params + 12 * muon.adam_params)
    dist = worst_rank_share(
        LLAMA, DIST_MUON, PLAN, 0, dense=params.dense, expert=params.expert, adam_bytes=12
    )
    # the worst of 8 ranks holds one whole vocabulary matrix (embedding or output layer),
    # padded 128256 -> 128256 (a multiple of 128 * tp), split over tp 2
    vocab = 128256 * 4096 / 2
    assert dist.adam_params >= vocab
    assert state / PLAN.dp < dist.state_bytes("bf16", 12) < state


def test_memory_per_stage_prices_muon_state() -> None:
    adam = memory_per_stage(LLAMA, JOB, PLAN)[0]
    muon = memory_per_stage(LLAMA, MUON, PLAN)[0]
    dist = memory_per_stage(LLAMA, DIST_MUON, PLAN)[0]
    assert muon.optimizer_bytes < adam.optimizer_bytes  # 8 bytes, not 12, on the matrices
    assert muon.optimizer_bytes / PLAN.dp < dist.optimizer_bytes < muon.optimizer_bytes
    assert muon.weights_bytes == adam.weights_bytes
    assert muon.gradients_bytes == adam.gradients_bytes


def test_step_bytes_and_time() -> None:
    assert muon_step_bytes(4, True) == MUON_STEP_BYTES + 4
    assert muon_step_bytes(2, True) == MUON_STEP_BYTES + 4 + 6  # bf16 buffer copied to fp32
    mats = stage_matrices(LLAMA, PLAN, (0,))
    full = muon_step_s(PROFILE, MUON, mats)
    assert full > muon_step_s(PROFILE, MUON, mats[:1]) > 0
    flops = sum(m.count * newton_schulz_flops(m.rows, m.cols) for m in mats)
    assert full > flops / (PROFILE.device.peak_tflops["bf16"] * 1e12)


def test_estimate_dist_muon_against_replicated_and_adam() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    adam = estimate_plan(LLAMA, cluster, JOB, PLAN, PROFILE)
    muon = estimate_plan(LLAMA, cluster, MUON, PLAN, PROFILE)
    dist = estimate_plan(LLAMA, cluster, DIST_MUON, PLAN, PROFILE)
    assert muon.breakdown.optimizer_s > dist.breakdown.optimizer_s > adam.breakdown.optimizer_s
    # the layer-wise all-gather of the updated parameters after the step
    assert dist.breakdown.dp_exposed_s > adam.breakdown.dp_exposed_s
    assert muon.breakdown.dp_exposed_s == pytest.approx(adam.breakdown.dp_exposed_s)
    assert dist.peak_memory_gib < muon.peak_memory_gib < adam.peak_memory_gib


MIXTRAL_MTP = get_preset("mixtral-8x7b").replace(num_layers=8, mtp_num_layers=1)  # MoE depth
MTP_PLAN = ParallelPlan(tp=2, pp=2, dp=8, ep=4, sequence_parallel=True)


def test_the_mtp_stage_steps_eh_proj_and_the_depth_layer_with_muon() -> None:
    # MultiTokenPredictionLayer: eh_proj 2h -> h column-parallel, 4096/2 x 8192 on a rank;
    # the depth's layer is an MoE layer like the decoder's last (multi_token_prediction.py)
    assert mtp_matrices(MIXTRAL_MTP, MTP_PLAN, 1) == (
        MuonMatrix(rows=2048, cols=8192, count=1),
        *layer_matrices(MIXTRAL_MTP, MTP_PLAN, True),
    )
    assert mtp_matrices(MIXTRAL_MTP, MTP_PLAN, 0) == ()
    last = rank_matrices(MIXTRAL_MTP, MTP_PLAN, 1)
    decoder = stage_matrices(MIXTRAL_MTP, MTP_PLAN, (4, 5, 6, 7))
    assert last == decoder + mtp_matrices(MIXTRAL_MTP, MTP_PLAN, 1)
    assert rank_matrices(MIXTRAL_MTP, MTP_PLAN, 0) == stage_matrices(
        MIXTRAL_MTP, MTP_PLAN, (0, 1, 2, 3)
    )


def test_every_parameter_of_the_mtp_stage_is_muons_or_adams() -> None:
    # ``muon`` steps everything on every rank: its matrices plus the Adam part make up the
    # stage's parameters, the MTP layer, eh_proj, its norms and the embedding copy included
    params = stage_params(MIXTRAL_MTP, MTP_PLAN, 1)
    job = dataclasses.replace(MUON, global_batch_size=64)
    share = worst_rank_share(
        MIXTRAL_MTP, job, MTP_PLAN, 1, dense=params.dense, expert=params.expert, adam_bytes=12
    )
    matrices = rank_matrices(MIXTRAL_MTP, MTP_PLAN, 1)
    assert share.muon_params == pytest.approx(sum(m.params for m in matrices), rel=1e-12)
    vocab = 32000 * 4096 / 2  # padded to 256·125, split over tp 2
    assert vocab_tensors(MIXTRAL_MTP, MTP_PLAN, 1) == 2  # the output layer and the MTP copy
    assert vocab_tensors(MIXTRAL_MTP, MTP_PLAN, 0) == 1
    # Adam: the two vocabulary matrices and the RMSNorm weights of 4 decoder layers and the
    # MTP layer (2 each), the final norm, enorm, hnorm and the depth's final_layernorm
    assert share.adam_params == 2 * vocab + (2 * 5 + 1 + 3) * 4096 == 131_129_344
    total = share.muon_params + share.adam_params
    assert total == pytest.approx(params.dense + params.expert, rel=1e-12)


def test_dist_muon_deals_the_embedding_copy_whole() -> None:
    # at pp 1 one embedding module serves the decoder and the MTP depth, beside the output
    # layer; the copy exists only off virtual stage 0
    one_stage = ParallelPlan(tp=2, dp=16, ep=4)
    assert vocab_tensors(MIXTRAL_MTP, one_stage, 0) == 2
    params = stage_params(MIXTRAL_MTP, MTP_PLAN, 1)
    share = worst_rank_share(
        MIXTRAL_MTP,
        dataclasses.replace(DIST_MUON, global_batch_size=64),
        MTP_PLAN,
        1,
        dense=params.dense,
        expert=params.expert,
        adam_bytes=12,
    )
    assert share.adam_params >= 32000 * 4096 / 2  # the worst rank holds a whole one


def test_the_adam_tensors_of_a_muon_rank() -> None:
    # 2 per layer whose weights the rank holds (4 decoder + 1 MTP layer), the final norm,
    # the output layer, the embedding copy and the MTP norms (enorm, hnorm, final_layernorm);
    # eh_proj is Muon's
    assert adam_tensors(MIXTRAL_MTP, MTP_PLAN, 1) == 2 * 5 + 2 + 1 + 3
    assert adam_tensors(MIXTRAL_MTP, MTP_PLAN, 0) == 2 * 4 + 1
