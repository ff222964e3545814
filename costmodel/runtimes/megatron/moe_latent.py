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
`costmodel.runtimes.megatron.pair_quantization.fp8_pair_quantize_s`).

Host launches (`latent_launches`), counted as the experts' are
(`costmodel.runtimes.megatron.moe_experts.UNFUSED_EXPERT_LAUNCHES`): one GEMM per
projection forward, a dgrad and a wgrad GEMM per projection backward, and under FP8 or
NVFP4 one quantization per projection and pass. ``fc1_latent_proj`` runs inside
``MoELayer.preprocess``: before the dropless dispatcher's stream synchronization, and
inside the ``moe_preprocess`` CUDA graph scope (``maybe_skip_or_early_return_by_cudagraph
("preprocess")``); ``fc2_latent_proj`` runs in ``postprocess``, after the combine, which
only the whole-layer scopes capture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.fp8_quantization import fp8_quantize_time_s
from costmodel.memory_allowances import QuantRecipe
from costmodel.runtimes.megatron.moe_launches import WHOLE_MOE_SCOPES
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


LATENT_LAUNCHES = {"forward": 2, "backward": 4}
"""Launches of the two projections per pass in 16-bit: one GEMM each forward, a dgrad and
a wgrad GEMM each backward (module docstring)."""

LATENT_QUANTIZE_LAUNCHES = {"forward": 2, "backward": 2}
"""Extra launches per pass under FP8 or NVFP4: one quantization of each projection's input
forward, of each projection's output gradient backward."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LatentLaunches:
    """Host launches of a latent MoE layer's two projections in one layer's passes."""

    forward: int
    """Forward launches of both projections."""
    backward: int
    """Backward launches of both projections."""
    pre_sync: int
    """Of ``forward``, those of ``fc1_latent_proj``, issued before the dropless
    dispatcher's stream synchronization."""
    captured_forward: int
    """Of ``forward``, those a CUDA graph of ``scopes`` replays."""
    captured_backward: int
    """Of ``backward``, those a CUDA graph of ``scopes`` replays."""


def latent_launches(model: ModelSpec, fp8: bool, scopes: frozenset[str]) -> LatentLaunches:
    """`LatentLaunches` of ``model``'s projections (module docstring) in a run with
    quantized GEMMs (``fp8``) under the CUDA graph ``scopes``; all zero without
    ``moe_latent_size``."""
    if model.moe_latent_size is None:
        return LatentLaunches(forward=0, backward=0, pre_sync=0, captured_forward=0,
                              captured_backward=0)  # fmt: skip
    forward = LATENT_LAUNCHES["forward"] + (LATENT_QUANTIZE_LAUNCHES["forward"] if fp8 else 0)
    backward = LATENT_LAUNCHES["backward"] + (LATENT_QUANTIZE_LAUNCHES["backward"] if fp8 else 0)
    fc1 = forward // 2
    whole = bool(scopes & WHOLE_MOE_SCOPES)
    preprocess = {"moe_router", "moe_preprocess"} <= scopes
    return LatentLaunches(
        forward=forward,
        backward=backward,
        pre_sync=fc1,
        captured_forward=forward if whole else fc1 if preprocess else 0,
        captured_backward=backward if whole else 0,
    )
