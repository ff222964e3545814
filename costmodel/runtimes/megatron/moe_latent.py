"""The latent projections of a latent MoE layer (``ModelSpec.moe_latent_size`` ℓ) on one
rank, per microbatch.

Source: Megatron-LM `megatron/core/transformer/moe/moe_layer.py` (d98e8a64): ``MoELayer``
builds ``fc1_latent_proj`` (h -> ℓ) and ``fc2_latent_proj`` (ℓ -> h) as Transformer Engine
``TELinear`` modules with ``parallel_mode="duplicated"``: every tensor-parallel rank holds
the whole weight and projects the tokens it holds, with no TP collective. ``preprocess``
runs ``fc1_latent_proj`` after the router (which reads the full h-wide hidden state) and
before ``dispatch_preprocess``; ``postprocess`` runs ``fc2_latent_proj`` after
``combine_postprocess``, before the shared expert's output is added. So the token
dispatcher, its permutations and the experts see ℓ-wide rows
(`costmodel.runtimes.megatron.moe_costs`, `ModelSpec.expert_hidden_size`), and the layer
adds two GEMMs over the rank's router tokens T: [T, h] x [h, ℓ] and [T, ℓ] x [ℓ, h], each
with its input-gradient and weight-gradient GEMM.

Under FP8 or NVFP4 GEMMs the two are quantizing TE linears like the others: forward
quantizes each input (T x h, T x ℓ), backward each output gradient (T x ℓ, T x h), each
with its row-wise and column-wise copy (`costmodel.fp8_quantization.fp8_quantize_time_s`).
A duplicated linear has no tensor-parallel group, so no current-scaling amax all-reduce.
The fp8 weight copies are made once per iteration, as for every linear (not counted,
`costmodel.runtimes.megatron.linear_pairs.fp8_pair_quantize_s`).
"""

from __future__ import annotations

import math

from costmodel import compute as ops
from costmodel.fp8_quantization import fp8_quantize_time_s
from costmodel.memory_allowances import QuantRecipe
from profiles.schema import HardwareProfile
from specs.model import ModelSpec


def latent_projection_s(
    profile: HardwareProfile,
    model: ModelSpec,
    tokens: float,
    elem: int,
    dtype: str,
    recipe: QuantRecipe | None,
) -> tuple[float, float, float]:
    """(forward, dgrad, wgrad) seconds of the two latent projections over ``tokens`` router
    tokens of one rank (module docstring), with the operand quantization of an FP8 or
    NVFP4 run under ``recipe`` (None: 16-bit GEMMs) in forward and dgrad; zeros without
    ``moe_latent_size``."""
    latent = model.moe_latent_size
    if latent is None:
        return 0.0, 0.0, 0.0
    h, m = model.hidden_size, max(math.ceil(tokens), 1)
    forward = ops.gemm_time_s(profile, m, latent, h, dtype)
    forward += ops.gemm_time_s(profile, m, h, latent, dtype)
    dgrad = ops.gemm_time_s(profile, m, h, latent, dtype)
    dgrad += ops.gemm_time_s(profile, m, latent, h, dtype)
    wgrad = ops.gemm_time_s(profile, h, latent, m, dtype)
    wgrad += ops.gemm_time_s(profile, latent, h, m, dtype)
    if recipe is not None:
        both = fp8_quantize_time_s(profile, tokens * h, elem, recipe=recipe)
        both += fp8_quantize_time_s(profile, tokens * latent, elem, recipe=recipe)
        forward, dgrad = forward + both, dgrad + both
    return forward, dgrad, wgrad
