"""Gated DeltaNet layers (hybrid ``G``) and gated attention in the cost model: Megatron-LM's
FLOPs (`costmodel.flops.gdn_mixer_forward_flops_per_token`), the tensors a layer keeps
(`costmodel.gdn_activations`), the Megatron runtime's prices
(`costmodel.runtimes.megatron.gdn_costs`, the attention gate in `attention_costs`), and the
screen against the simulator on gated DeltaNet hybrids."""

from __future__ import annotations

import pytest

from costmodel.activation_shard import activation_shard
from costmodel.flops import (
    attention_projection_forward_flops_per_token,
    forward_flops_per_token,
    gdn_mixer_forward_flops_per_token,
    layer_forward_flops_per_token,
)
from costmodel.gdn_activations import GDN_TENSOR_NAMES, gdn_tensors
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.layer_activations import kind_activations
from costmodel.runtimes.megatron.gdn_costs import (
    delta_chunks,
    delta_rule_gemms,
    delta_rule_gemms_s,
    delta_rule_s,
    gdn_cp_bytes,
    gdn_projection_shapes,
)
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.layer_shape import layer_shape
from planner.knob_generators import mamba_cp_degrees
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.layer_kinds import HYBRID_SYMBOLS
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_screen import HYBRID_GRID, assert_screen_agrees

H100 = load_profile("h100-sxm-80gb")
QWEN3_NEXT = get_preset("qwen3-next-80b-a3b")
GDN, ATTENTION, MOE = HYBRID_SYMBOLS["G"], HYBRID_SYMBOLS["*"], HYBRID_SYMBOLS["E"]
JOB = TrainingJob(seq_length=4096, global_batch_size=64)


def test_gdn_flops_are_megatrons_gdn_layer_flops() -> None:
    # megatron/training/training.py gdn_layer_flops / tokens, by hand for Qwen3-Next:
    # in_proj 2048·(2·2048 + 2·4096 + 2·32) = 25,296,896; conv1d 4·(2·2048 + 4096) = 32,768;
    # delta rule 32·128²·4 = 2,097,152; out_proj 2048·4096 = 8,388,608; x 2 FLOPs
    assert gdn_mixer_forward_flops_per_token(QWEN3_NEXT) == 2 * 35_815_424
    layer = layer_forward_flops_per_token(QWEN3_NEXT, 0, 4096)
    assert layer.gdn_flops == layer.total_flops == 71_630_848


def test_gated_attention_counts_the_gate_columns() -> None:
    # transformer_flops: qkv h·(q + gate + 2·kv) + out q·h, q = 16·256, kv = 2·256
    assert attention_projection_forward_flops_per_token(QWEN3_NEXT) == 2 * (
        2048 * (4096 + 4096 + 1024) + 4096 * 2048
    )
    ungated = QWEN3_NEXT.replace(attention_output_gate=False)
    assert attention_projection_forward_flops_per_token(ungated) == 2 * (
        2048 * (4096 + 1024) + 4096 * 2048
    )


def test_model_flops_of_qwen3_next() -> None:
    # per token at s = 4096: 36 GDN x 71,630,848; 12 attention x (54,525,952 projections
    # + 2·4096·16·256 core); 48 MoE x 2·3·2048·(10·512 + 512); logits 2·2048·151936;
    # one MTP depth: an attention layer, an MoE layer and its logits
    attention = 54_525_952 + 2 * 4096 * 16 * 256
    moe = 2 * 3 * 2048 * (10 * 512 + 512)
    logits = 2 * 2048 * 151_936
    expected = 36 * 71_630_848 + 12 * attention + 48 * moe + logits + attention + moe + logits
    assert forward_flops_per_token(QWEN3_NEXT, 4096) == expected == 8_359_510_016
    assert model_flops_per_iteration(QWEN3_NEXT, 4096, 512) == 3 * expected * 4096 * 512


def test_gdn_layer_keeps_its_tensors() -> None:
    plan = ParallelPlan(tp=1)
    x = activation_shard(TrainingJob(seq_length=4096, global_batch_size=8), plan, False)
    tensors = gdn_tensors(QWEN3_NEXT, x)
    assert tuple(tensors) == GDN_TENSOR_NAMES
    # bf16, tp 1, no dropout, per token: norm input 2·2048, in_proj input 2·2048, conv input
    # 2·8192, gates 2·64, l2norm 2·4096 + 4·32, kernel q/k 2·2·32·128 + v 2·4096 + g, beta
    # (4 + 2)·32, WY 2·32·64 (FLA bc3b101d chunk.py ChunkGatedDeltaRuleFunction.forward
    # saves q, k, v, fp32 g, beta and A, BT = 64 per token and head in k's dtype),
    # norm input 2·4096, rstd 4·32, z 2·4096, out_proj input 2·4096
    per_token = 4096 + 4096 + 16384 + 128 + 8320 + 24768 + 4096 + 8192 + 128 + 8192 + 8192
    assert sum(tensors.values()) == 4096 * per_token
    layer = kind_activations(QWEN3_NEXT, JOB, plan, GDN, dropout=False)
    assert layer.full_bytes == sum(tensors.values()) and layer.core_attention_bytes == 0


def test_gdn_tensors_split_over_tp() -> None:
    one = gdn_tensors(QWEN3_NEXT, activation_shard(JOB, ParallelPlan(tp=1), False))
    two = gdn_tensors(QWEN3_NEXT, activation_shard(JOB, ParallelPlan(tp=2), False))
    for name in set(GDN_TENSOR_NAMES) - {"gdn_norm_input", "gdn_in_proj_input", "gdn_mask"}:
        assert two[name] == pytest.approx(one[name] / 2)


def test_gated_attention_keeps_the_gate_and_the_gated_output() -> None:
    plan = ParallelPlan(tp=1)
    gated = dict(kind_activations(QWEN3_NEXT, JOB, plan, ATTENTION, dropout=False).tensors)
    plain = QWEN3_NEXT.replace(attention_output_gate=False)
    ungated = dict(kind_activations(plain, JOB, plan, ATTENTION, dropout=False).tensors)
    assert gated["attn_gate"] == 2 * 2 * 4096 * 4096  # gate and product, bf16, q = 4096
    assert gated["attn_output"] == ungated["attn_output"]
    assert "attn_gate" not in ungated


def test_projection_shapes_and_chunks() -> None:
    x = layer_shape(JOB, ParallelPlan(tp=2, micro_batch_size=2))
    in_proj, out_proj = gdn_projection_shapes(QWEN3_NEXT, x)
    assert in_proj == (8192, 12352 / 2, 2048) and out_proj == (8192, 2048, 2048)
    assert delta_chunks(x) == (2 * 64, 64)  # b·s/64 chunks of the chunk size 64


def test_delta_rule_gemms_cover_its_flops() -> None:
    x = layer_shape(JOB, ParallelPlan(tp=1))
    forward = sum(g.flops for g in delta_rule_gemms(QWEN3_NEXT, x, "forward").values())
    backward = sum(g.flops for g in delta_rule_gemms(QWEN3_NEXT, x, "backward").values())
    # FLA bc3b101d, multiply-adds per chunk of 64 and value head at dk = dv = 128:
    # chunk_fwd.py chunk_gated_delta_rule_fwd_kkt_solve_kernel: ten 16x16 K·Kᵀ blocks over
    # 128, 10·16·16·128 = 327,680, and sixteen 16³ merge dots, 65,536; wy_fast.py
    # recompute_w_u_fwd_kernel w, u 2·64·64·128; chunk_delta_h.py fwd_h v_new, states
    # 2·64·128·128; chunk_o.py chunk_fwd_kernel_o o_states 64·128·128, o_scores and
    # o_intra 2·64·64·128: 5,636,096, so 88,064 per token and head, 1.34 x Megatron's
    # 8·Hv·dv² FLOPs per token
    assert forward == 2 * 4096 * 32 * 88_064
    assert forward / (4096 * 2 * 4 * 32 * 128**2) == pytest.approx(1.34375)
    # backward (chunk_gated_delta_rule_bwd): the recomputed w, u, v_new, states
    # 3,145,728; eleven 64·64·128 products (dv_local.py dv_scores, dv_local; dqkwg
    # d_scores, dq_intra, dk_intra; prepare_wy_repr_bwd_kernel dA_w, dk_wy, dA_u, dv_wy,
    # the rebuilt K·Kᵀ, and dA·A with A·dA at 64³ each) 5,767,168; dk_kkt 2·64·64·128;
    # six 64·128·128 (bwd_dhu dv_states, dh_q, dh_w; dqkwg dq_states, dk_states, dw)
    # 6,291,456: 16,252,928, so 253,952 per token and head
    assert backward == 2 * 4096 * 32 * 253_952
    assert len(delta_rule_gemms(QWEN3_NEXT, x, "backward")) == 22  # 24 dots, two doubled


def test_solve_tril_runs_inside_the_kkt_kernel() -> None:
    x = layer_shape(JOB, ParallelPlan(tp=1))
    gemms = delta_rule_gemms(QWEN3_NEXT, x, "forward")
    kkt, solve = gemms["kkt"], gemms["solve_tril"]
    assert (kkt.m, kkt.n, kkt.k, solve.m, solve.n, solve.k) == (16, 16, 128, 16, 16, 16)
    alone = delta_rule_gemms_s(H100, {"kkt": kkt}, "bf16")
    # 16 TF32 dots of 16³ at half the bf16 rate beside ten bf16 16x16x128 blocks: x 1.4
    assert delta_rule_gemms_s(H100, {"kkt": kkt, "solve_tril": solve}, "bf16") == (
        pytest.approx(1.4 * alone)
    )


def test_delta_rule_time_splits_over_tp() -> None:
    one = delta_rule_s(QWEN3_NEXT, H100, layer_shape(JOB, ParallelPlan(tp=1)))
    two = delta_rule_s(QWEN3_NEXT, H100, layer_shape(JOB, ParallelPlan(tp=2)))
    assert 0.4 < two[0] / one[0] < 0.6 and 0.4 < two[1] / one[1] < 0.6


def test_gdn_layer_is_priced_on_its_own() -> None:
    plan = ParallelPlan(tp=2, sequence_parallel=True)
    gdn = layer_cost(QWEN3_NEXT, JOB, plan, H100, kind=GDN)
    attention = layer_cost(QWEN3_NEXT, JOB, plan, H100, kind=ATTENTION)
    assert gdn.forward.compute_s > 0 and gdn.backward.compute_s > gdn.forward.compute_s
    assert gdn.forward.tp_s > 0  # the in_proj / out_proj sequence-parallel pair
    assert gdn.forward.compute_s != attention.forward.compute_s
    assert gdn.recompute.compute_s == 0.0


def test_attention_gate_costs_time() -> None:
    plan = ParallelPlan(tp=1)
    gated = layer_cost(QWEN3_NEXT, JOB, plan, H100, kind=ATTENTION)
    plain = QWEN3_NEXT.replace(attention_output_gate=False)
    ungated = layer_cost(plain, JOB, plan, H100, kind=ATTENTION)
    assert gated.forward.compute_s > ungated.forward.compute_s
    assert gated.backward.compute_s > ungated.backward.compute_s


def test_screen_agrees_with_the_simulator_on_a_gdn_hybrid() -> None:
    model = QWEN3_NEXT.replace(
        name="gdn-dense",
        num_layers=16,
        hybrid_layer_pattern="G-G-G*G-" * 2,
        ffn_hidden_size=5632,
        num_experts=0,
        moe_shared_expert_size=0,
        moe_shared_expert_gate=False,
        mtp_num_layers=0,
        mtp_hybrid_pattern=None,
        vocab_size=32000,
    )
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    assert_screen_agrees(model, cluster, job, HYBRID_GRID, every=3, at_least=20)


def test_screen_agrees_with_the_simulator_on_a_qwen3_next_shape() -> None:
    model = QWEN3_NEXT.replace(
        name="qwen3-next-small", num_layers=16, hybrid_layer_pattern="GEGEGE*E" * 2, num_experts=64
    )
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    assert_screen_agrees(model, cluster, job, HYBRID_GRID, every=3, at_least=20)


def test_cp_exchanges_the_in_proj_output_and_the_norm_output() -> None:
    x = layer_shape(JOB, ParallelPlan(tp=2, cp=2))
    # T = 4096 / 2 tokens, bf16: in_proj output 12352 / 2 wide, norm output 4096 / 2
    assert gdn_cp_bytes(QWEN3_NEXT, x) == (2 * 2048 * 6176, 2 * 2048 * 2048)
    assert gdn_cp_bytes(QWEN3_NEXT, layer_shape(JOB, ParallelPlan(tp=2))) == (0.0, 0.0)


def test_cp_rule_is_the_rule_at_tp_doubled() -> None:
    # cp 2 runs the whole sequence on half the heads: the same kernels as tp doubled
    cp = delta_rule_s(QWEN3_NEXT, H100, layer_shape(JOB, ParallelPlan(tp=1, cp=2)))
    tp = delta_rule_s(QWEN3_NEXT, H100, layer_shape(JOB, ParallelPlan(tp=2)))
    assert cp == pytest.approx(tp)


def test_cp_adds_exposed_all_to_alls() -> None:
    plan = ParallelPlan(tp=1, cp=2)
    gdn = layer_cost(QWEN3_NEXT, JOB, plan, H100, kind=GDN)
    assert gdn.forward.cp_exposed_s > 0 and gdn.backward.cp_exposed_s > 0
    assert gdn.forward.cp_bytes == sum(gdn_cp_bytes(QWEN3_NEXT, layer_shape(JOB, plan)))


def test_planner_keeps_the_cp_that_split_the_heads() -> None:
    # 16 key heads at tp 8: cp 2 leaves one key head per rank, cp 4 half of one
    assert list(mamba_cp_degrees(QWEN3_NEXT, 8, (1, 2, 4))) == [1, 2]
