"""Per-microbatch costs of a TP-sharded MLP on one rank (`mlp_block`): the dense MLP of a
layer, or the shared experts of a MoE layer. FC1 (column-parallel, twice as wide for a
gated activation) and FC2 (row-parallel), the activation function, the unfused bias
gradients, and the pair's TP communication and FP8 quantization
(`costmodel.runtimes.megatron.linear_pairs`). Under LoRA the MLP is frozen: no
weight-gradient GEMMs (its adapters: `costmodel.runtimes.megatron.lora_costs`).
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.runtimes.megatron.pair_quantization import fp8_amax_pair, fp8_pair_s
from costmodel.runtimes.megatron.userbuffers import Shape
from profiles.schema import HardwareProfile
from specs.finetune import LoraSpec, has_adapter
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def mlp_block(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    ffn: int,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    *,
    lora: LoraSpec | None = None,
    row_reduction: bool = True,
    saves_input: bool = False,
) -> tuple[PassCost, PassCost, float, float]:
    """A TP-sharded MLP of inner size ``ffn`` over all tokens (dense MLP or shared expert).

    Without ``bias_fusion`` the FC1 and FC2 bias gradients are reductions of their output
    gradients (the forward adds ride in the fused bias-GeLU and bias-dropout-add). With
    ``lora`` (a LoRA job's dense MLP) the weights are frozen: no wgrad GEMM, and FC1's norm
    output is returned to its adapter when ``linear_fc1`` is a target
    (`costmodel.runtimes.megatron.pair_quantization.fp8_pair_s`). ``row_reduction`` False:
    the MLP of a parallel attention+MLP block, its FC2 output left unreduced
    (`costmodel.runtimes.megatron.linear_pairs.tp_pair`). ``saves_input``: FC1 saves its
    16-bit input and quantizes it again in the backward (a shared expert:
    `costmodel.saved_inputs.shared_fc1_saves_input`; ``fp8_pair_s`` ``column_saves_input``)."""
    if ffn == 0:
        return ZERO, ZERO, 0.0, 0.0
    h, gated = model.hidden_size, model.activation == "swiglu"
    width = ffn / x.tp
    fc1_shape: Shape = (x.tokens, (2 if gated else 1) * width, h)
    fc2_shape: Shape = (x.tokens, h, width)
    fc1, fc2 = gemm3(profile, x, *fc1_shape), gemm3(profile, x, *fc2_shape)
    act_f = ops.activation_time_s(
        profile, x.tokens, width, x.elem, gated=gated, direction="forward"
    )
    act_b = ops.activation_time_s(
        profile, x.tokens, width, x.elem, gated=gated, direction="backward"
    )
    if model.add_bias_linear and not options.bias_fusion:
        fc1_width = (2 if gated else 1) * width
        act_b += ops.bias_time_s(profile, x.tokens, fc1_width, x.elem, "backward")
        act_b += ops.bias_time_s(profile, x.norm_tokens, h, x.elem, "backward")
    recipe, frozen = options.fp8_recipe, lora is not None
    fp8_f, fp8_b = fp8_pair_s(
        profile,
        x,
        h,
        (2 if gated else 1) * width,
        width,
        recipe,
        options.cudnn_norm,
        frozen=frozen,
        norm_returned=has_adapter(lora, "linear_fc1"),
        fused_rht=options.nvfp4_fused_rht_cast,
        tn_gemm_only=options.fp8_tn_gemm_only is not False,
        userbuffers=plan.tp_comm_overlap,
        column_saves_input=saves_input,
    )
    act_f, act_b = act_f + fp8_f, act_b + fp8_b
    tp_f, tp_b = tp_pair(
        profile,
        plan,
        x,
        h,
        groups,
        fc1_shape,
        fc2_shape,
        options,
        frozen=frozen,
        norm_returned=has_adapter(lora, "linear_fc1"),
        row_reduction=row_reduction,
    )
    amax_f, amax_b = fp8_amax_pair(profile, x, groups, recipe, width)
    tp_f, tp_b = tp_f.plus(amax_f), tp_b.plus(amax_b)
    dgrad, wgrad = fc1[1] + fc2[1] + act_b, 0.0 if frozen else fc1[2] + fc2[2]
    forward = PassCost(compute_s=fc1[0] + fc2[0] + act_f).plus(tp_f)
    return forward, PassCost(compute_s=dgrad + wgrad).plus(tp_b), dgrad, wgrad
