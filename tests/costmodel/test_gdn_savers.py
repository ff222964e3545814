"""Selective recompute of a gated DeltaNet's output norm (``gdn_norm_out``) and the gated
shared expert's gate in the Megatron runtime: what each frees, reruns and costs, and the
rule and search set that offer the module."""

from __future__ import annotations

import pytest

from costmodel.activation_savers import recomputed_bytes
from costmodel.activation_shard import activation_shard
from costmodel.compute import memory_bound_time_s
from costmodel.gdn_activations import gdn_tensors, gdn_widths
from costmodel.layer_activations import kind_activations
from costmodel.runtimes.megatron.gdn_costs import gated_norm_s, gdn_cp_bytes
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.layer_shape import layer_shape
from costmodel.runtimes.megatron.shared_gate_costs import shared_expert_gate_s
from planner.knob_generators import recompute_module_sets
from planner.space import SearchSpace
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import HYBRID_SYMBOLS
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules_savers import missing_recompute_modules

H100 = load_profile("h100-sxm-80gb")
QWEN3_NEXT = get_preset("qwen3-next-80b-a3b")
GDN, MOE = HYBRID_SYMBOLS["G"], HYBRID_SYMBOLS["E"]
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
NORM_OUT = ParallelPlan(tp=1, recompute="selective", recompute_modules=("gdn_norm_out",))


def test_gdn_norm_out_frees_the_rstd_and_the_out_proj_input() -> None:
    x = activation_shard(JOB, NORM_OUT, False)
    tensors = gdn_tensors(QWEN3_NEXT, x)
    layer = kind_activations(QWEN3_NEXT, JOB, NORM_OUT, GDN, dropout=False)
    # bf16, tp 1, per token: fp32 rstd 4·32 and the out_proj input 2·4096 (gdn.py
    # GatedDeltaNet.forward: CheckpointWithoutOutput of _gated_norm_and_a2a)
    assert recomputed_bytes(layer.tensors, ("gdn_norm_out",)) == 4096 * (4 * 32 + 2 * 4096)
    assert tensors["gated_norm_input"] > 0  # the checkpoint's input stays


def test_gdn_norm_out_reruns_the_gated_norm() -> None:
    cost = layer_cost(QWEN3_NEXT, JOB, NORM_OUT, H100, kind=GDN)
    x = layer_shape(JOB, NORM_OUT)
    norm_s, _ = gated_norm_s(H100, x, gdn_widths(QWEN3_NEXT, 1))
    assert cost.recompute.compute_s == pytest.approx(norm_s) and cost.recompute.cp_s == 0
    plain = layer_cost(QWEN3_NEXT, JOB, ParallelPlan(tp=1, recompute="selective"), H100, kind=GDN)
    assert plain.recompute.compute_s == 0.0  # core_attn: nothing in a gated DeltaNet layer


def test_gdn_norm_out_reruns_the_all_to_all_under_cp() -> None:
    plan = ParallelPlan(tp=1, cp=2, recompute="selective", recompute_modules=("gdn_norm_out",))
    cost = layer_cost(QWEN3_NEXT, JOB, plan, H100, kind=GDN)
    assert cost.recompute.cp_bytes == gdn_cp_bytes(QWEN3_NEXT, layer_shape(JOB, plan))[1]
    assert cost.recompute.cp_exposed_s > 0


def test_gdn_norm_out_needs_gated_deltanet_layers() -> None:
    assert missing_recompute_modules(QWEN3_NEXT, ("gdn_norm_out",)) == []
    other = get_preset("qwen3-30b-a3b")
    assert missing_recompute_modules(other, ("gdn_norm_out",)) == [
        "gdn_norm_out (no gated DeltaNet layers)"
    ]


def test_search_offers_gdn_norm_out_to_gated_deltanet_models() -> None:
    space = SearchSpace()
    assert "gdn_norm_out" in recompute_module_sets(QWEN3_NEXT, space)
    assert "layernorm,moe_act,gdn_norm_out" in recompute_module_sets(QWEN3_NEXT, space)
    other = recompute_module_sets(get_preset("qwen3-30b-a3b"), space)
    assert not any("gdn_norm_out" in s for s in other)


def test_shared_expert_gate_costs_its_passes() -> None:
    # 16 experts, 4 sequences: kernels that outlast the host launches
    # (`moe_host_floor.moe_host_floor`)
    plan = ParallelPlan(tp=1, micro_batch_size=4)
    few = QWEN3_NEXT.replace(name="qwen3-next-16-experts", num_experts=16)
    gated = layer_cost(few, JOB, plan, H100, kind=MOE)
    ungated = few.replace(name="qwen3-next-16-ungated", moe_shared_expert_gate=False)
    plain = layer_cost(ungated, JOB, plan, H100, kind=MOE)
    forward, dgrad, wgrad = shared_expert_gate_s(H100, 4 * 4096, 2048, 2)
    assert gated.forward.compute_s - plain.forward.compute_s == pytest.approx(forward)
    assert gated.backward.compute_s - plain.backward.compute_s == pytest.approx(dgrad + wgrad)
    # shared_experts.py SharedExpertMLP.forward: GEMV, sigmoid, product; bf16 per token
    # (3·2048 + 4)·2 bytes in three kernels
    moved = 4 * 4096 * 2 * (3 * 2048 + 4)
    assert forward == pytest.approx(memory_bound_time_s(H100, moved, 3))


def test_shared_expert_gate_keeps_the_output_and_the_score() -> None:
    plan = ParallelPlan(tp=1)
    tensors = dict(kind_activations(QWEN3_NEXT, JOB, plan, MOE, dropout=False).tensors)
    assert tensors["shared_gate"] == 2 * 4096 * (2048 + 1)  # bf16 output and sigmoid
    plain = QWEN3_NEXT.replace(moe_shared_expert_gate=False)
    assert "shared_gate" not in dict(kind_activations(plain, JOB, plan, MOE).tensors)
    assert recomputed_bytes(tuple(tensors.items()), ("shared_experts",)) >= tensors["shared_gate"]
