"""Time of the second quantization of a saved 16-bit GEMM input in the backward pass of a
Megatron-core layer, one microbatch on one rank: the linears Megatron-core marks with
``set_save_original_input`` (`costmodel.saved_inputs` lists them and their gates) keep
their 16-bit input and Transformer Engine quantizes it again for the wgrad GEMM.

One pass (`saved_input_requant_s`) per saved input, with the bytes and amax pass of
`costmodel.fp8_quantization.fp8_quantize_time_s`: MXFP8 and NVFP4 write the column-wise
copy alone (TE ``_Linear.backward``: ``quantizer.set_usage(rowwise=False,
columnwise=True)``; ``_GroupedLinear.backward`` the same for MXFP8/NVFP4 quantizers);
per-tensor current scaling writes both copies after a new amax pass
(``supports_only_rowwise_all_gather``: ``columnwise=not backward_input_needs_gather``;
``_GroupedLinear.backward`` ``set_usage(rowwise=True, columnwise=True)`` for
``Float8CurrentScalingQuantizer``), the row-wise copy alone when the input is then
all-gathered over TP (a column-parallel linear with sequence parallelism). Delayed
scaling is refused by TE with ``save_original_input``: no pass. The forward's saving (the
input cast row-wise alone) is priced where each forward cast is
(`pair_quantization.fp8_pair_s`, `moe_experts.expert_fp8_quantize_s`).
"""

from __future__ import annotations

from costmodel.activation_shard import projection_saves_original_input
from costmodel.compute import LOW_PRECISION_GEMM_DTYPES
from costmodel.fp8_quantization import fp8_quantize_time_s, operand_recipe
from costmodel.memory_allowances import Fp8Recipe, QuantRecipe
from costmodel.runtimes.megatron.layer_shape import LayerShape
from profiles.schema import HardwareProfile
from specs.attention_params import mla_head_dims
from specs.model import ModelSpec


def saved_input_requant_s(
    profile: HardwareProfile,
    elements: float,
    elem: int,
    recipe: QuantRecipe,
    *,
    gathered: bool,
    fused_rht: bool = True,
) -> float:
    """Seconds of quantizing one saved 16-bit GEMM input of ``elements`` elements (of
    ``elem`` bytes) again in the backward under ``recipe`` (module docstring); ``gathered``:
    the quantized copy is then all-gathered over TP (sequence parallelism, column-parallel
    input); ``fused_rht``: `ExecutionOptions.nvfp4_fused_rht_cast`. 0 under ``delayed``."""
    if not projection_saves_original_input(recipe):
        return 0.0
    copies = 2 if recipe == "tensorwise" and not gathered else 1
    return fp8_quantize_time_s(
        profile, elements, elem, recipe=recipe, copies=copies, fused_rht=fused_rht
    )


def mla_requant_s(
    model: ModelSpec,
    profile: HardwareProfile,
    x: LayerShape,
    fp8_recipe: Fp8Recipe,
    *,
    down_projection: bool = False,
    frozen: bool = False,
    fused_rht: bool = True,
) -> float:
    """Backward seconds of one MLA input saved in 16 bits and quantized again (0 unless the
    job runs fp8 or nvfp4 GEMMs, or for a ``frozen`` LoRA base): the output projection's
    input, T x a·d_v/tp (``MultiLatentAttention.__init__``; row-parallel, not gathered), or
    with ``down_projection`` the norm output one down projection reads under ``layernorm``
    recompute (`costmodel.saved_inputs.mla_down_projections_saving_input` counts them;
    ``parallel_mode='duplicated'`` linears on the rank's T/tp rows with sequence
    parallelism, not gathered). MLA's forward casts are priced as one column-parallel input
    (`attention_costs`), so no forward saving is taken off."""
    if x.dtype not in LOW_PRECISION_GEMM_DTYPES or frozen or not model.uses_mla:
        return 0.0
    _, _, d_v = mla_head_dims(model)
    elements = x.tokens * model.num_attention_heads * d_v / x.tp
    if down_projection:
        elements = x.norm_tokens * model.hidden_size
    recipe = operand_recipe(x.dtype, fp8_recipe)
    return saved_input_requant_s(
        profile, elements, x.elem, recipe, gathered=False, fused_rht=fused_rht
    )
