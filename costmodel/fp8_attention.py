"""FP8 attention (Megatron-core ``fp8_dot_product_attention``,
`costmodel.execution.ExecutionOptions.fp8_attention`): the attention curve a job's fused
attention core reads, the bytes its core saves for backward, and the rules that refuse it
(`attention_dtype`, `check_fp8_attention` for the job and the profile,
`check_fp8_attention_kernel` for the other options).

Megatron-core passes ``fp8_dpa=config.fp8_dot_product_attention`` to Transformer Engine's
``DelayedScaling`` (through ``TEDelayedScaling``), ``Float8CurrentScaling`` and
``MXFP8BlockScaling``, and not to ``Float8BlockScaling`` (``megatron/core/fp8_utils.py``
``get_fp8_recipe``, core_v0.19.0), so with the blockwise recipe the flag has no effect;
under ``NVFP4BlockScaling`` Transformer Engine runs FP8 attention only with
``NVTE_DPA_FP8_RECIPE`` naming an FP8 recipe for it (TE v2.16
``dot_product_attention/dot_product_attention.py``), which is not priced. With ``fp8_dpa``
on, TE's ``FusedAttention`` runs the cuDNN kernel in FP8 with the recipe's own scaling,
forward and (``NVTE_FP8_DPA_BWD``, default 1) backward: per-tensor delayed and current
scaling on cuDNN's ``fp8`` kernels, MXFP8 on its ``mxfp8`` kernels, the curve dtypes of
`ATTENTION_CURVE_DTYPES` (`profiles.derive_cudnn`).

Saved for backward (`core_saved_bytes`), per element of Q, K, V and the output O, from
``FusedAttnFunc.forward`` (``transformer_engine/pytorch/attention/dot_product_attention/
backends.py``) and ``get_attention_quantizers`` / ``combine_and_quantize`` (``utils.py``
beside it) at TE v2.16, the pin of Megatron-Bridge 26.06 (``pyproject.toml`` at v0.5.0,
commit 4220403e):

- ``delayed``: Q, K, V 1 byte (``Float8Tensor``), O 1 byte (``out_fp8``); the output
  projection keeps its own FP8 copy of the bf16 output it receives;
- ``tensorwise``: Q, K, V 1 byte, O 2 bytes: ``NVTE_DPA_FP8CS_O_in_F16`` (default ``1``)
  keeps the bf16 output, the tensor the projection saves
  (`costmodel.activation_shard.projection_saves_original_input`);
- ``mxfp8``: Q, K, V 2·(1 + 1/32) bytes, the quantizer keeping row-wise and column-wise
  data, each with one E8M0 scale per 32 elements; O 2 bytes (bf16, as above).

Not priced: the casts around the kernel (Q, K and V to FP8 and the output back to bf16 in
the forward, the output gradient to FP8 in the backward), memory-bound passes over
tensors of the layer's width.
"""

from __future__ import annotations

from costmodel.compute import activation_dtype
from profiles.schema import HardwareProfile
from specs.errors import SpecError

FP8_ATTENTION_RULE = "fp8_attention_needs_fp8_recipe"
"""Rule id of `attention_dtype`: FP8 attention in a job or recipe that cannot run it."""
FP8_ATTENTION_CURVE_RULE = "fp8_attention_needs_curve"
"""Rule id of `check_fp8_attention`: a profile without the recipe's attention curves."""
FP8_ATTENTION_KERNEL_RULE = "fp8_attention_kernel"
"""Rule id of `check_fp8_attention_kernel`, and of FP8 attention under another runtime than
``megatron`` (`costmodel.execution_rules.check_megatron_only`)."""

ATTENTION_CURVE_DTYPES: dict[str, str] = {"delayed": "fp8", "tensorwise": "fp8", "mxfp8": "mxfp8"}
"""Attention curve dtype of each FP8 recipe that passes ``fp8_dpa`` to Transformer Engine
(module docstring); Megatron-core's ``blockwise`` recipe does not."""

MXFP8_SAVED_BYTES = 2 * (1 + 1 / 32)
"""Bytes per element of a saved MXFP8 attention input: row-wise and column-wise E4M3 data,
each with one E8M0 scale per 32 elements (module docstring)."""

CORE_SAVED_BYTES: dict[str, tuple[float, float]] = {
    "delayed": (1.0, 1.0),
    "tensorwise": (1.0, 2.0),
    "mxfp8": (MXFP8_SAVED_BYTES, 2.0),
}
"""(Q/K/V, O) bytes per element the fused attention core saves under FP8 attention, per
recipe (module docstring's table)."""


def attention_dtype(precision: str, fp8_attention_recipe: str | None) -> str:
    """The attention curve dtype of a ``precision`` job: `costmodel.compute.activation_dtype`
    without FP8 attention (``fp8_attention_recipe`` None), else the recipe's
    `ATTENTION_CURVE_DTYPES` entry. `SpecError` [`FP8_ATTENTION_RULE`] for FP8 attention in
    a job that is not fp8 or under a recipe that does not pass ``fp8_dpa``."""
    if fp8_attention_recipe is None:
        return activation_dtype(precision)
    if precision != "fp8":
        raise SpecError(
            f"[{FP8_ATTENTION_RULE}] fp8_attention (Megatron-core fp8_dot_product_attention) "
            f"runs attention under Transformer Engine's FP8 recipe, but the job's precision is "
            f"{precision}: use precision fp8, or drop fp8_attention (an nvfp4 job needs an "
            "environment override of the attention recipe, which is not priced)"
        )
    dtype = ATTENTION_CURVE_DTYPES.get(fp8_attention_recipe)
    if dtype is None:
        raise SpecError(
            f"[{FP8_ATTENTION_RULE}] fp8_attention has no effect under fp8_recipe "
            f"{fp8_attention_recipe!r}: Megatron-core passes fp8_dpa to the delayed, tensorwise "
            "and mxfp8 recipes only (not to Float8BlockScaling): use one of "
            f"{', '.join(ATTENTION_CURVE_DTYPES)}, or drop fp8_attention"
        )
    return dtype


def check_fp8_attention(
    precision: str, fp8_attention_recipe: str | None, profile: HardwareProfile
) -> None:
    """`attention_dtype`'s rules, then `SpecError` [`FP8_ATTENTION_CURVE_RULE`] when
    ``profile`` lacks the forward or backward curve of the recipe's dtype (A100, MI300X
    and CPU profiles have none; Hopper has ``fp8`` but no ``mxfp8``). Nothing without FP8
    attention."""
    dtype = attention_dtype(precision, fp8_attention_recipe)
    if fp8_attention_recipe is None:
        return
    have = {(c.direction, c.dtype) for c in profile.compute.attention}
    missing = [d for d in ("forward", "backward") if (d, dtype) not in have]
    if missing:
        fp8_dtypes = sorted({c.dtype for c in profile.compute.attention} & {"fp8", "mxfp8"})
        raise SpecError(
            f"[{FP8_ATTENTION_CURVE_RULE}] fp8_attention under fp8_recipe "
            f"{fp8_attention_recipe!r} reads {dtype} attention curves, and profile "
            f"{profile.name!r} has no {'/'.join(missing)} {dtype} curve (its FP8 attention "
            f"curves: {', '.join(fp8_dtypes) or 'none'}): drop fp8_attention, or use a profile "
            "with those curves (mxfp8: b200, gb200-nvl72, b300, gb300-nvl72; fp8 also "
            "h100-sxm-80gb, h200-sxm-141gb)"
        )


def core_saved_bytes(
    precision: str, fp8_attention_recipe: str | None, element_bytes: int
) -> tuple[float, float]:
    """(Q/K/V, O) bytes per element the fused attention core saves for backward:
    ``element_bytes`` each without FP8 attention, `CORE_SAVED_BYTES` of the recipe with it
    (`attention_dtype`'s rules apply)."""
    attention_dtype(precision, fp8_attention_recipe)
    if fp8_attention_recipe is None:
        return float(element_bytes), float(element_bytes)
    return CORE_SAVED_BYTES[fp8_attention_recipe]


def check_fp8_attention_kernel(
    fp8_attention: bool, *, attention: str, flash_attention_version: int
) -> None:
    """FP8 attention (`ExecutionOptions.fp8_attention`) runs Transformer Engine's fused cuDNN
    kernel, priced on cuDNN 9.19 and 9.22 measurements (`profiles.derive_cudnn`): not with
    the ``materialized`` kernel (no FP8 path is priced for it) nor with
    FlashAttention-2-class kernels (a stack from before 2024-10, whose FP8 attention rate
    has no source)."""
    if not fp8_attention:
        return
    if attention != "flash":
        raise SpecError(
            f"[{FP8_ATTENTION_KERNEL_RULE}] fp8_attention runs Transformer Engine's fused "
            f"attention, but attention is {attention!r}: use attention 'flash', or drop "
            "fp8_attention"
        )
    if flash_attention_version != 3:
        raise SpecError(
            f"[{FP8_ATTENTION_KERNEL_RULE}] fp8_attention is priced on cuDNN 9.19 and 9.22 FP8 "
            f"kernels, but flash_attention_version is {flash_attention_version} (a stack "
            "from before 2024-10): use flash_attention_version 3, or drop fp8_attention"
        )
