"""Linears that save their 16-bit input (costmodel.saved_inputs) and the backward's second
quantization of that input (costmodel.runtimes.megatron.requant_costs,
pair_quantization.fp8_pair_s ``column_saves_input``, moe_experts.expert_fp8_quantize_s
``fc2_saves_input``, saved_input_terms through layer_cost), with the MoE layer's norm-output
tensors they change (costmodel.layer_activations)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute import memory_bound_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.layer_activations import kind_activations
from costmodel.runtimes.megatron.layer_costs import LayerCost, layer_cost
from costmodel.runtimes.megatron.layer_shape import layer_shape
from costmodel.runtimes.megatron.moe_costs import expert_quantize_s
from costmodel.runtimes.megatron.moe_experts import expert_fp8_quantize_s
from costmodel.runtimes.megatron.pair_quantization import fp8_pair_s
from costmodel.runtimes.megatron.requant_costs import mla_requant_s, saved_input_requant_s
from costmodel.runtimes.megatron.saved_input_terms import SavedInputTerms, saved_input_s
from costmodel.saved_inputs import (
    expert_fc1_saves_input,
    expert_fc2_saves_input,
    mla_down_projections_saving_input,
    shared_fc1_saves_input,
)
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.plan import ParallelPlan
from specs.presets import get_preset

GB200 = load_profile("gb200-nvl72")
DSV3 = get_preset("deepseek-v3")
LLAMA = get_preset("llama3-70b")
FP8_JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BF16_JOB = TrainingJob(seq_length=4096, global_batch_size=64)
SP2 = ParallelPlan.for_world(64, tp=2, sequence_parallel=True)
MOE_LAYER = LayerKind(mixer="attention", mlp="moe")


def _selective(*modules: str, tp: int = 2) -> ParallelPlan:
    return ParallelPlan.for_world(
        64, tp=tp, sequence_parallel=True, recompute="selective", recompute_modules=modules
    )


def test_shared_expert_fc1_saves_its_input_unless_the_shared_expert_is_recomputed():
    # SharedExpertMLP.__init__ (megatron/core/transformer/moe/shared_experts.py, core_v0.15.0
    # to HEAD): set_save_original_input(linear_fc1) under fp8 (not delayed) or fp4, skipped
    # when "shared_experts" is in recompute_modules.
    assert shared_fc1_saves_input(DSV3, SP2)
    assert shared_fc1_saves_input(DSV3, _selective("layernorm", "moe_act"))
    assert not shared_fc1_saves_input(DSV3, _selective("shared_experts"))
    assert not shared_fc1_saves_input(DSV3, SP2, recipe_saves=False)
    assert not shared_fc1_saves_input(LLAMA, SP2)  # no shared expert


def test_expert_fc2_and_mla_down_projections_save_their_input_under_recompute():
    # TEGroupedMLP.__init__ (moe/experts.py): linear_fc2 under selective moe_act; the fused
    # grouped MLP builds its own te.ops.GroupedLinear. MLASelfAttention
    # .set_for_recompute_input_layernorm (multi_latent_attention.py): q_down (q_lora_rank)
    # and kv_down under layernorm recompute.
    assert expert_fc2_saves_input(_selective("moe_act"), fused_grouped_mlp=False)
    assert not expert_fc2_saves_input(_selective("moe_act"), fused_grouped_mlp=True)
    assert not expert_fc2_saves_input(_selective("layernorm"), fused_grouped_mlp=False)
    assert not expert_fc2_saves_input(SP2, fused_grouped_mlp=False)
    assert mla_down_projections_saving_input(DSV3, _selective("layernorm")) == 2
    no_q_lora = dataclasses.replace(DSV3, q_lora_rank=None)
    assert mla_down_projections_saving_input(no_q_lora, _selective("layernorm")) == 1
    assert mla_down_projections_saving_input(DSV3, _selective("moe_act")) == 0
    assert mla_down_projections_saving_input(LLAMA, _selective("layernorm")) == 0


def _norm_output(job: TrainingJob, plan: ParallelPlan, saves: bool) -> tuple[float, float]:
    layer = dict(kind_activations(DSV3, job, plan, MOE_LAYER, proj_saves_input=saves).tensors)
    return layer["router_input"], layer["shared_fc1_input"]


def test_moe_layer_keeps_the_16_bit_norm_output_once_and_the_shared_copy_where_kept():
    # DeepSeek-V3, s = 4096, mbs 1, tp2 with SP: the pre-MLP norm output is 2048 x 7168 per
    # rank. The router keeps it in bf16 (RouterGatingLinearFunction.forward,
    # moe/moe_utils.py: ctx.save_for_backward(inp, weight, bias)): 2 bytes = 29_360_128 B.
    # Delayed scaling: the shared fc1 adds its FP8 copy, 1 byte per element = 14_680_064 B;
    # current scaling and MXFP8 (set_save_original_input): it saves the router's tensor, no
    # copy; with the shared expert recomputed, the FP8 copy again (freed by the recompute).
    assert _norm_output(FP8_JOB, SP2, saves=False) == (29_360_128, 14_680_064)
    assert _norm_output(FP8_JOB, SP2, saves=True) == (29_360_128, 0)
    assert _norm_output(FP8_JOB, _selective("shared_experts"), saves=True) == (
        29_360_128,
        14_680_064,
    )
    assert _norm_output(BF16_JOB, SP2, saves=True) == (29_360_128, 0)


def test_saved_input_is_cast_again_by_recipe():
    # TE _Linear.backward "Quantize input tensor" (module/linear.py): MXFP8 column-wise alone
    # (read 2, write 1 byte per element); current scaling both copies after an amax read
    # (2 + 2, then 2), the row-wise copy alone when it is then all-gathered; delayed: TE
    # refuses save_original_input, nothing.
    n = 2048.0 * 8192
    assert saved_input_requant_s(GB200, n, 2, "mxfp8", gathered=False) == pytest.approx(
        memory_bound_time_s(GB200, 3 * n)
    )
    current = memory_bound_time_s(GB200, 4 * n) + memory_bound_time_s(GB200, 2 * n)
    assert saved_input_requant_s(GB200, n, 2, "tensorwise", gathered=False) == pytest.approx(
        current
    )
    gathered = memory_bound_time_s(GB200, 3 * n) + memory_bound_time_s(GB200, 2 * n)
    assert saved_input_requant_s(GB200, n, 2, "tensorwise", gathered=True) == pytest.approx(
        gathered
    )
    assert saved_input_requant_s(GB200, n, 2, "delayed", gathered=False) == 0.0


def test_column_input_saved_moves_one_copy_from_forward_to_a_backward_cast():
    # Llama 3 70B shape, s = 4096, tp2 with SP: the column input is 2048 x 8192 per rank.
    # MXFP8 (TE norm, then the cast: e + 2 bytes per element): the forward writes the
    # row-wise copy alone (e + 1), the backward reads the 16-bit input again and writes the
    # column-wise copy (e + 1). Current scaling with SP writes the row-wise copy alone either
    # way (it is gathered); the backward adds the amax read (e) and the row-wise cast (e + 1).
    h, n = LLAMA.hidden_size, 2048.0 * LLAMA.hidden_size
    x = layer_shape(FP8_JOB, SP2)
    col, row = 2 * LLAMA.ffn_hidden_size / 2, LLAMA.ffn_hidden_size / 2
    plain = fp8_pair_s(GB200, x, h, col, row, "mxfp8", False)
    saved = fp8_pair_s(GB200, x, h, col, row, "mxfp8", False, column_saves_input=True)
    forward = memory_bound_time_s(GB200, 4 * n) - memory_bound_time_s(GB200, 3 * n)
    assert plain[0] - saved[0] == pytest.approx(forward)
    assert saved[1] - plain[1] == pytest.approx(memory_bound_time_s(GB200, 3 * n))
    plain = fp8_pair_s(GB200, x, h, col, row, "tensorwise", False)
    saved = fp8_pair_s(GB200, x, h, col, row, "tensorwise", False, column_saves_input=True)
    assert saved[0] == pytest.approx(plain[0])
    again = memory_bound_time_s(GB200, 3 * n) + memory_bound_time_s(GB200, 2 * n)
    assert saved[1] - plain[1] == pytest.approx(again)
    delayed = fp8_pair_s(GB200, x, h, col, row, "delayed", False, column_saves_input=True)
    assert delayed == fp8_pair_s(GB200, x, h, col, row, "delayed", False)


def test_expert_fc2_input_is_cast_again_per_expert_under_moe_act_recompute():
    # _GroupedLinear with save_original_input (TE module/grouped_linear.py): the forward
    # casts FC2's input row-wise alone (e + 1 instead of e + 2 per element), the backward
    # _split_quantize of the recomputed input per expert, column-wise for MXFP8 (e + 1).
    rows, h, w, experts = 65536.0, 2048, 768.0, 16
    shape = dict(rows=rows, hidden=h, width=w, gated=True, elem=2, local_experts=experts)
    plain = expert_fp8_quantize_s(GB200, **shape, fused=False, recipe="mxfp8")
    saved = expert_fp8_quantize_s(GB200, **shape, fused=False, recipe="mxfp8", fc2_saves_input=True)
    s = rows * w / experts
    forward = memory_bound_time_s(GB200, 4 * s) - memory_bound_time_s(GB200, 3 * s)
    assert plain[0] - saved[0] == pytest.approx(experts * forward)
    assert saved[1] - plain[1] == pytest.approx(experts * memory_bound_time_s(GB200, 3 * s))
    # Delayed scaling: TE refuses save_original_input, the casts stay as they are.
    assert expert_fp8_quantize_s(
        GB200, **shape, fused=False, recipe="delayed", fc2_saves_input=True
    ) == expert_fp8_quantize_s(GB200, **shape, fused=False, recipe="delayed")


def test_mla_casts_its_projection_input_and_down_projection_inputs_again():
    # DeepSeek-V3, s = 4096, tp2 with SP: the output projection's input is
    # 4096 x 128 heads x 128 (v_head_dim) / 2 per rank; under layernorm recompute each down
    # projection casts the 2048 x 7168 norm output again. MXFP8: read 2, write 1 byte per
    # element each.
    x = layer_shape(FP8_JOB, SP2)
    proj, down = 4096.0 * 128 * 128 / 2, 2048.0 * 7168
    want = memory_bound_time_s(GB200, 3 * proj)
    assert mla_requant_s(DSV3, GB200, x, "mxfp8") == pytest.approx(want)
    want = memory_bound_time_s(GB200, 3 * down)
    assert mla_requant_s(DSV3, GB200, x, "mxfp8", down_projection=True) == pytest.approx(want)
    assert mla_requant_s(DSV3, GB200, x, "delayed") == 0.0
    assert mla_requant_s(DSV3, GB200, x, "mxfp8", frozen=True) == 0.0
    assert mla_requant_s(DSV3, GB200, layer_shape(BF16_JOB, SP2), "mxfp8") == 0.0
    assert mla_requant_s(LLAMA, GB200, x, "mxfp8") == 0.0


MX = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")


def _layer(plan: ParallelPlan, kind: LayerKind = MOE_LAYER) -> LayerCost:
    return layer_cost(DSV3, FP8_JOB, plan, GB200, kind=kind, options=MX)


def test_moe_layer_backward_carries_the_shared_expert_cast_unless_it_is_recomputed():
    # DeepSeek-V3 MoE layer, MXFP8, tp2 with SP: recomputing the shared expert
    # (SharedExpertMLP.__init__ skips set_save_original_input) restores the saved MXFP8 copy:
    # the layer's forward writes one copy more and its backward lacks exactly the shared FC1
    # input's second cast (fp8_pair_s on the shared expert's shapes: FC1 2 x 2048/2 wide, FC2
    # input 2048/2).
    saving, recomputed = _selective("core_attn"), _selective("core_attn", "shared_experts")
    x = layer_shape(FP8_JOB, saving)
    h, ffn = DSV3.hidden_size, DSV3.moe_shared_expert_size / 2
    plain = fp8_pair_s(GB200, x, h, 2 * ffn, ffn, "mxfp8", MX.cudnn_norm)
    saved = fp8_pair_s(GB200, x, h, 2 * ffn, ffn, "mxfp8", MX.cudnn_norm, column_saves_input=True)
    with_save, without = _layer(saving), _layer(recomputed)
    assert with_save.backward.compute_s - without.backward.compute_s == pytest.approx(
        saved[1] - plain[1]
    )
    assert with_save.forward.compute_s - without.forward.compute_s == pytest.approx(
        saved[0] - plain[0]
    )
    assert with_save.dgrad_s - without.dgrad_s == pytest.approx(saved[1] - plain[1])


def test_layer_backward_adds_expert_fc2_and_down_projection_casts_by_recompute_module():
    # moe_act: the routed experts' FC2 input cast again per expert (expert_quantize_s with
    # and without fc2_saves_input); layernorm: the two down projections' norm output (q_lora
    # set), 2048 x 7168 each, MXFP8 read 2 write 1.
    base = _layer(_selective("core_attn"))
    x = layer_shape(FP8_JOB, SP2)
    tokens = x.norm_tokens
    routed = [
        expert_quantize_s(DSV3, SP2, GB200, tokens, 2, "fp8", MX, fc2_saves_input=s)
        for s in (False, True)
    ]
    moe_act = _layer(_selective("core_attn", "moe_act"))
    assert moe_act.backward.compute_s - base.backward.compute_s == pytest.approx(
        routed[1][1] - routed[0][1]
    )
    assert moe_act.forward.compute_s - base.forward.compute_s == pytest.approx(
        routed[1][0] - routed[0][0]
    )
    layernorm = _layer(_selective("core_attn", "layernorm"))
    down = 2 * memory_bound_time_s(GB200, 3 * 2048.0 * 7168)
    assert layernorm.backward.compute_s - base.backward.compute_s == pytest.approx(down)
    dense = LayerKind(mixer="attention", mlp="dense")
    dense_delta = _layer(_selective("core_attn", "layernorm"), dense).backward.compute_s
    dense_delta -= _layer(_selective("core_attn"), dense).backward.compute_s
    assert dense_delta == pytest.approx(down)


def _offloading(*modules: str) -> ParallelPlan:
    return ParallelPlan.for_world(64, tp=2, sequence_parallel=True, etp=1, offload_modules=modules)


def test_offloaded_expert_fc1_saves_its_16_bit_rows_under_current_scaling_only():
    # TEGroupedMLP.__init__ (moe/experts.py, HEAD and the core of Megatron-Bridge v0.6.0):
    # set_save_original_input(linear_fc1) with expert_fc1 offloading unless MXFP8 or NVFP4;
    # TE refuses delayed scaling. DeepSeek-V3, s = 4096, tp2 with SP, etp1: 2048 tokens x
    # top-8 = 16384 expert rows x 7168 per rank, 1 byte each as FP8 (117_440_512 B), 2 as
    # bf16.
    offload = _offloading("expert_fc1")
    assert expert_fc1_saves_input(offload, "fp8", "tensorwise")
    assert not expert_fc1_saves_input(offload, "fp8", "mxfp8")
    assert not expert_fc1_saves_input(offload, "fp8", "delayed")
    assert not expert_fc1_saves_input(offload, "nvfp4", "tensorwise")
    assert not expert_fc1_saves_input(_offloading("moe_act"), "fp8", "tensorwise")
    layer = kind_activations(DSV3, FP8_JOB, offload, MOE_LAYER, proj_saves_input=True)
    assert dict(layer.tensors)["expert_input"] == 117_440_512
    layer = kind_activations(
        DSV3, FP8_JOB, offload, MOE_LAYER, proj_saves_input=True, expert_fc1_saves_input=True
    )
    assert dict(layer.tensors)["expert_input"] == 234_881_024


def test_expert_fc1_input_is_cast_again_per_expert_under_current_scaling():
    # _GroupedLinear.backward with save_original_input: Float8CurrentScalingQuantizer writes
    # both copies (rowwise and columnwise), after its amax read (e); the forward casts the
    # rows row-wise alone (e + 1 instead of e + 2; the amax read stays).
    rows, h, w, experts = 65536.0, 2048, 768.0, 16
    shape = dict(rows=rows, hidden=h, width=w, gated=True, elem=2, local_experts=experts)
    plain = expert_fp8_quantize_s(GB200, **shape, fused=False, recipe="tensorwise")
    saved = expert_fp8_quantize_s(
        GB200, **shape, fused=False, recipe="tensorwise", fc1_saves_input=True
    )
    s = rows * h / experts
    forward = memory_bound_time_s(GB200, 4 * s) - memory_bound_time_s(GB200, 3 * s)
    assert plain[0] - saved[0] == pytest.approx(experts * forward)
    again = memory_bound_time_s(GB200, 4 * s) + memory_bound_time_s(GB200, 2 * s)
    assert saved[1] - plain[1] == pytest.approx(experts * again)


def test_plan_turns_on_the_saved_input_terms_of_its_modules():
    # saved_input_s adds each term where costmodel.saved_inputs' gate holds for the plan.
    terms = SavedInputTerms(
        shared_fc1=(-1.0, 2.0),
        expert_fc2=(-10.0, 20.0),
        expert_fc1=(-100.0, 200.0),
        down_projection_s=1000.0,
    )
    cs = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    assert saved_input_s(terms, DSV3, FP8_JOB, SP2, cs) == (-1.0, 2.0)
    plan = _selective("shared_experts", "moe_act", "layernorm")
    assert saved_input_s(terms, DSV3, FP8_JOB, plan, cs) == (-10.0, 2020.0)
    offload = _offloading("expert_fc1")
    assert saved_input_s(terms, DSV3, FP8_JOB, offload, cs) == (-101.0, 202.0)
    assert saved_input_s(terms, DSV3, FP8_JOB, offload, MX) == (-1.0, 2.0)
    fused = dataclasses.replace(cs, moe_fused_grouped_mlp=True)
    assert saved_input_s(terms, DSV3, FP8_JOB, _selective("moe_act"), fused) == (-1.0, 2.0)
