"""Which Transformer Engine linears of a Megatron-core layer save their 16-bit input
instead of its quantized copy (Megatron-core ``set_save_original_input``,
`megatron/core/extensions/transformer_engine.py`), by plan and model; the recipe gate is
`costmodel.activation_shard.projection_saves_original_input` (every recipe but
``delayed`` under fp8, every nvfp4 run), the time of the second cast in the backward is in
`costmodel.runtimes.megatron.requant_costs` (the recompute-dependent ones added per plan by
`costmodel.runtimes.megatron.saved_input_terms`).

TE's ``_Linear`` and ``_GroupedLinear`` with ``save_original_input`` cast the input
row-wise alone in the forward, keep the 16-bit tensor, and quantize it again for the wgrad
GEMM in the backward (TE `pytorch/module/linear.py` "Quantize input tensor",
`module/grouped_linear.py` ``_split_quantize`` after the dgrad GEMM; v2.7 to the 2026-08
HEAD). Delayed scaling raises there ("DelayedScaling recipe is not supported with
save_original_input"), so a call Megatron-core makes whatever the recipe is priced only
under the recipes TE accepts, and a plan reaching one in an fp8 run under delayed scaling
is refused (`delayed_scaling_problem`: `paraplan estimate`, the planner's search space).
A frozen (LoRA) weight needs no wgrad input: nothing is saved and nothing is cast again.

The calls, Megatron-LM 2026-08 HEAD (d98e8a64), all from core_v0.15.0 (781e7658, "Support
recomputation for FP8 layernorm/moe_act/shared_experts") unless said, so at the pin of
every Megatron-Bridge release v0.2.0 to v0.6.0:

- the attention output projection (``Attention.__init__``, `attention.py`, core_v0.14.0;
  MLA ``MultiLatentAttention.__init__``, `multi_latent_attention.py`; DSA's absorbed MLA,
  `experimental_attention_variant/absorbed_mla.py`): fp8 with a recipe other than
  ``delayed`` (TE 2.6) or fp4 (TE 2.7). Memory: `costmodel.activation_shard
  .ActivationShard.proj_copy_bytes`; time: `pair_quantization.fp8_pair_s`
  ``row_saves_input`` (GQA/MHA), `requant_costs.mla_requant_s` (MLA).
- the shared expert's ``linear_fc1`` (``SharedExpertMLP.__init__``, `moe/shared_experts.py`):
  the same recipe gate, unless ``shared_experts`` is recomputed (the checkpoint keeps the
  16-bit input); and under ``layernorm`` recompute with fp8 or fp4
  (``MoELayer.set_for_recompute_pre_mlp_layernorm``, `moe/moe_layer.py`), the same
  exception. `shared_fc1_saves_input`.
- the routed experts' ``linear_fc2`` under selective ``moe_act`` recompute with fp8 or fp4
  (``TEGroupedMLP.__init__``, `moe/experts.py`: the output-discarding checkpoint of the
  activation frees the 16-bit input, and the quantized copy would stay otherwise).
  Not with the fused grouped MLP (``use_transformer_engine_op_fuser``): its
  ``te.ops.GroupedLinear`` is built apart from ``linear_fc2`` and recomputes the activation
  inside the op. `expert_fc2_saves_input`.
- MLA's ``linear_q_down_proj`` (with ``q_lora_rank``) and ``linear_kv_down_proj`` under
  ``layernorm`` recompute with fp8 or fp4 (``MLASelfAttention.set_for_recompute_input_layernorm``,
  reached from ``TransformerLayer.__init__`` when ``input_layernorm`` is a norm of its
  own, as in the MLA layer spec): the norm output they read is discarded and recomputed.
  `mla_down_projections_saving_input`.
- the routed experts' ``linear_fc1`` under fine-grained offloading of ``expert_fc1``
  (``TEGroupedMLP.__init__``, `moe/experts.py`, from b97184db, core of Megatron-Bridge
  v0.3.0 on; HEAD and the core of v0.6.0 skip it under MXFP8 and NVFP4, v0.3.0 to v0.5.0
  set it under every recipe): of the recipes TE accepts, current scaling alone, as at
  HEAD. The expert rows it saves, and the offload moves, are 16-bit
  (`costmodel.layer_activations` ``expert_input``). `expert_fc1_saves_input`.

Calls that no paraplan plan reaches, not priced:

- ``Attention.set_for_recompute_input_layernorm`` (``linear_qkv``) and the dense
  ``linear_fc1`` (`transformer_layer.py`): Megatron-core's Transformer Engine layer spec
  (`models/gpt/gpt_layer_specs.py`) fuses those norms into ``TELayerNormColumnParallelLinear``,
  so ``input_layernorm`` and ``pre_mlp_layernorm`` of a dense block are ``IdentityOp`` and
  the call is skipped.
- ``FusedMLASelfAttention.set_for_recompute_input_layernorm`` (``linear_qkv_down_proj``,
  ``mla_down_proj_fusion``, from 8fd390d1, core of Megatron-Bridge v0.4.0 on): with
  Transformer Engine the spec fuses the input norm into the down projection
  (``IdentityOp`` input norm), so the call is skipped; paraplan has no such option either.
"""

from __future__ import annotations

from specs.model import ModelSpec
from specs.plan import ParallelPlan


def shared_fc1_saves_input(
    model: ModelSpec, plan: ParallelPlan, *, recipe_saves: bool = True
) -> bool:
    """True when the shared expert's ``linear_fc1`` of a MoE layer saves its 16-bit input
    (the pre-MLP norm output the router keeps); ``recipe_saves``: the run's recipe gate
    (`costmodel.activation_shard.projection_saves_original_input` of an fp8 or nvfp4 job)
    and a trained weight, True where the caller applies them itself
    (`pair_quantization.fp8_pair_s`). ``SharedExpertMLP.__init__`` skips the call when
    ``shared_experts`` is recomputed; the ``layernorm`` path makes the same call under the
    same exception, so it adds no case under the recipes TE accepts (module docstring)."""
    if not recipe_saves or not model.moe_shared_expert_size:
        return False
    return "shared_experts" not in plan.selective_modules


def expert_fc2_saves_input(plan: ParallelPlan, *, fused_grouped_mlp: bool) -> bool:
    """True when the routed experts' ``linear_fc2`` saves its 16-bit input: selective
    ``moe_act`` recompute on the unfused ``GroupedLinear`` path (module docstring); the
    recipe gate is the caller's."""
    return "moe_act" in plan.selective_modules and not fused_grouped_mlp


def expert_fc1_saves_input(plan: ParallelPlan, precision: str, fp8_recipe: str) -> bool:
    """True when the routed experts' ``linear_fc1`` saves its 16-bit input rows: fine-grained
    offloading of ``expert_fc1`` in an fp8 job under per-tensor current scaling
    (``tensorwise``); Megatron-core skips MXFP8 and NVFP4 and TE refuses ``delayed``
    (module docstring)."""
    offloaded = "expert_fc1" in plan.offload_modules
    return offloaded and precision == "fp8" and fp8_recipe == "tensorwise"


def mla_down_projections_saving_input(model: ModelSpec, plan: ParallelPlan) -> int:
    """MLA down projections that save their 16-bit input under ``layernorm`` recompute:
    ``linear_q_down_proj`` when the query is compressed (``q_lora_rank``) and
    ``linear_kv_down_proj``; 0 without MLA or without ``layernorm`` recompute (module
    docstring). The recipe gate is the caller's."""
    if not model.uses_mla or "layernorm" not in plan.selective_modules:
        return 0
    return 2 if model.q_lora_rank else 1


DELAYED_SAVE_INPUT_RULE = "delayed_scaling_refuses_original_input"
"""`Violation.rule` of `delayed_scaling_problem`."""


def save_input_calls(model: ModelSpec, plan: ParallelPlan, *, fused_grouped_mlp: bool) -> list[str]:
    """The plan's memory savers that make Megatron-core call ``set_save_original_input``
    whatever the recipe (module docstring), each as ``field module (linear)``: ``moe_act``
    recompute (the experts' ``linear_fc2``, `expert_fc2_saves_input`), ``layernorm``
    recompute (a MoE layer's shared ``linear_fc1`` unless ``shared_experts`` is recomputed,
    MLA's down projections) and ``expert_fc1`` offloading (the experts' ``linear_fc1``,
    ``TEGroupedMLP.__init__``: every recipe but MXFP8 and NVFP4)."""
    calls = []
    if model.is_moe and expert_fc2_saves_input(plan, fused_grouped_mlp=fused_grouped_mlp):
        calls.append("recompute_modules moe_act (experts' linear_fc2)")
    layernorm = "layernorm" in plan.selective_modules
    if layernorm and model.is_moe and shared_fc1_saves_input(model, plan):
        calls.append("recompute_modules layernorm (shared expert's linear_fc1)")
    if mla_down_projections_saving_input(model, plan):
        calls.append("recompute_modules layernorm (MLA down projections)")
    if model.is_moe and "expert_fc1" in plan.offload_modules:
        calls.append("offload_modules expert_fc1 (experts' linear_fc1)")
    return calls


def delayed_scaling_problem(
    model: ModelSpec,
    plan: ParallelPlan,
    *,
    precision: str,
    fp8_recipe: str,
    fused_grouped_mlp: bool,
) -> str | None:
    """Why an fp8 run under delayed scaling cannot run the plan's memory savers, or None:
    Transformer Engine raises "DelayedScaling recipe is not supported with
    save_original_input" in the forward of a ``Linear`` (`pytorch/module/linear.py`
    ``_Linear.forward``, line 326 at TE d0067d0d) or ``GroupedLinear``
    (`module/grouped_linear.py`, line 679) that Megatron-core set to save its original
    input (`save_input_calls`)."""
    if precision != "fp8" or fp8_recipe != "delayed":
        return None
    calls = save_input_calls(model, plan, fused_grouped_mlp=fused_grouped_mlp)
    if not calls:
        return None
    return (
        f"fp8_recipe (delayed) with {', '.join(calls)}: Megatron-core sets "
        "save_original_input on those linears and Transformer Engine refuses it under "
        "delayed scaling ('DelayedScaling recipe is not supported with save_original_input'): "
        "use --fp8-recipe tensorwise or mxfp8, or drop those modules (layernorm also runs "
        "with shared_experts recomputed)"
    )
