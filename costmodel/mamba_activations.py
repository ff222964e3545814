"""What one Mamba-2 layer of a hybrid model keeps for backward per microbatch on one rank,
tensor by tensor (`mamba_tensors`), and the per-rank widths of its mixer (`mamba_widths`).

The layer (Megatron-core ``megatron/core/ssm/mamba_layer.py``, `MambaLayer.forward`, with
the spec of ``megatron/core/models/hybrid/hybrid_layer_specs.py``) is a pre-norm fused into
the input projection (``TELayerNormColumnParallelLinear``), the mixer
(``megatron/core/ssm/mamba_mixer.py``, `MambaMixer`) and a bias-dropout-add into the
residual stream. With TP degree t the mixer keeps H/t heads and G/t groups per rank
(`MambaMixer.__init__`: ``nheads_local_tp``, ``ngroups_local_tp``); its input projection
is column-parallel, h -> 2·d_inner + 2·G·N + H (z, x, B, C, dt), its output projection
row-parallel, d_inner -> h.

Training runs the memory-efficient path (``TransformerConfig.use_mamba_mem_eff_path``,
default True, turned off by ``--disable-mamba-mem-eff-path``): `MambaMixer._ssm_training`
calls mamba_ssm's ``mamba_split_conv1d_scan_combined`` (state-spaces/mamba
``mamba_ssm/ops/triton/ssd_combined.py``, `MambaSplitConv1dScanCombinedFn`) with no norm
weight and no output projection, then applies the grouped ``RMSNormGated`` (``self.norm``,
mamba_ssm ``ops/triton/layernorm_gated.py``, `LayerNormFn`) and the output projection. So
the saved tensors come from that function, not from ``mamba_chunk_scan_combined``
(`MambaChunkScanCombinedFn`, the unfused path): its ``ctx.save_for_backward`` keeps the
input projection's output ``zxbcdt``, the conv weight and bias, ``out_x`` (the scan output
with the D skip, before the z gate), ``A``, ``D``, ``dt_bias`` (parameters, not counted
here); its backward recomputes the convolution, the dt softplus and decay cumsum
(``_chunk_cumsum_fwd``), the chunk states and the CB products
(`_mamba_chunk_scan_combined_bwd`), so neither the conv output nor the fp32 per-head dt
and dA cumsum nor the chunk states are kept. The unfused path (Megatron-Bridge's
Nemotron-H 4B provider sets ``use_mamba_mem_eff_path=False``) would keep them instead; it
is not priced here.

Tensors (``e`` the activation element size, T = b·s tokens, sp the sequence-parallel
divisor, bytes per rank; `ActivationShard`):

- ``mamba_norm_input``: the layer input the fused pre-norm keeps, e·T·h/sp.
- ``in_proj_input``: the normalized input the input projection keeps for its wgrad GEMM,
  as the QKV projection's (`costmodel.activation_shard.lora_column_input_bytes`: the
  quantized copy under FP8/NVFP4; under LoRA none for an untargeted frozen base, else the
  16-bit norm output the ``in_proj`` adapter's A saves, gathered over the sequence with SP,
  plus the base's quantized copy).
- ``mamba_mask``: the 1-byte hidden-dropout mask of the bias-dropout-add, with dropout.
- ``in_proj_output``: ``zxbcdt``, e·T·(2·d_inner + 2·G·N + H)/t; the
  ``rearrange(...).contiguous()`` copy of `MambaMixer._ssm_training` replaces the GEMM
  output, which is freed.
- ``ssd_output``: ``out_x``, e·T·d_inner/t.
- ``gated_norm_input``: the gated scan output the grouped RMSNorm keeps, e·T·d_inner/t.
- ``gated_norm_rstd``: its fp32 reciprocal RMS per token and group, 4·T·G/t.
- ``out_proj_input``: the norm output the output projection keeps for its wgrad GEMM,
  T·d_inner/t at the saved-GEMM-input size: Megatron calls ``set_save_original_input``
  only for the attention projections, so under FP8 this is the quantized copy alone (no
  other module keeps the norm output); under LoRA none for an untargeted frozen base, else
  the 16-bit T·d_inner/t the ``out_proj`` adapter's A saves
  (`costmodel.activation_shard.lora_row_input_bytes`).
- ``in_proj_adapter``, ``out_proj_adapter`` (LoRA, each targeted projection): A's output,
  T x rank, that B saves (`costmodel.activation_shard.lora_adapter_tensors`, added by
  `costmodel.layer_activations.shard_layer_activations`).

With context parallelism (cp > 1, ``megatron/core/ssm/mamba_context_parallel.py``,
`MambaContextParallel`), T = b·s/cp is the rank's sequence shard. The all-to-alls after
the input projection (``pre_conv_ssm``) and before the norm (``post_conv_ssm``) save
nothing, so ``in_proj_output`` and ``ssd_output`` are the scan-side tensors: the whole
sequence, b·s tokens, at the widths of `mamba_widths` with cp (H/(tp·cp) heads, the B and C
groups repeated where G/tp < cp); the norm and the output projection run after the
all-to-all back, on T tokens at the cp = 1 widths.

No selective recompute module (``recompute_modules``) and no fine-grained offload module
(``offload_modules``) covers the Mamba layer, so none of these names is in
`costmodel.activation_savers`' tables: recomputing or offloading modules frees none of
them; full recompute keeps the layer input and layer-level offloading moves them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.activation_shard import (
    ActivationShard,
    lora_column_input_bytes,
    lora_row_input_bytes,
)
from costmodel.compute import FP32_BYTES
from specs.model import ModelSpec

MAMBA_TENSOR_NAMES: tuple[str, ...] = (
    "mamba_norm_input",
    "in_proj_input",
    "mamba_mask",
    "in_proj_output",
    "ssd_output",
    "gated_norm_input",
    "gated_norm_rstd",
    "out_proj_input",
)
"""The names of `mamba_tensors`, in its order (module docstring)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MambaWidths:
    """Per-rank widths of one Mamba-2 mixer under TP degree t (`mamba_widths`)."""

    heads: float
    """Heads on the rank, H/t."""
    groups: float
    """B/C groups on the rank, G/t."""
    head_dim: int
    """Channels per head, P."""
    state_dim: int
    """SSM state size, N."""

    @property
    def inner(self) -> float:
        """Inner width on the rank, d_inner/t = (H/t)·P."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> float:
        """Channels of the causal conv1d on the rank (x, B, C): (d_inner + 2·G·N)/t."""
        return self.inner + 2 * self.groups * self.state_dim

    @property
    def in_proj(self) -> float:
        """Output width of the input projection on the rank (z, x, B, C, dt):
        (2·d_inner + 2·G·N + H)/t."""
        return self.inner + self.conv_channels + self.heads


def mamba_widths(model: ModelSpec, tp: int, cp: int = 1) -> MambaWidths:
    """The per-rank widths of ``model``'s Mamba-2 mixer at TP degree ``tp`` (Megatron
    `MambaMixer.__init__`: ``nheads_local_tp``, ``ngroups_local_tp``, ``d_inner_local_tp``
    and the in_proj width ``d_inner * 2 + 2 * ngroups * d_state + nheads``); the divisibility
    of heads and groups by tp is checked by the plan rules.

    With ``cp`` > 1, the widths the conv1d and the SSD scan see after the all-to-all from
    the sequence split to the head split (``megatron/core/ssm/mamba_context_parallel.py``,
    `MambaContextParallel.__init__`): H/(tp·cp) heads (``nheads_local_tpcp``) and
    max(G/tp, cp)/cp groups (``ngroups_local_tpcp``: 1 when G/tp < cp, each group's B and C
    repeated on cp/(G/tp) ranks, ``group_repeat_count``; else G/(tp·cp)). The in_proj and
    out_proj keep the cp = 1 widths on the rank's sequence shard. `specs.rules_hybrid`
    checks the divisibility."""
    return MambaWidths(
        heads=model.mamba_heads / (tp * cp),
        groups=max(model.mamba_num_groups / tp, cp) / cp,
        head_dim=model.mamba_head_dim,
        state_dim=model.mamba_state_dim,
    )


def mamba_tensors(model: ModelSpec, x: ActivationShard) -> dict[str, float]:
    """Bytes one Mamba-2 layer keeps for backward per microbatch on one rank, by the names
    of `MAMBA_TENSOR_NAMES` (module docstring for each tensor and its source)."""
    e, n, h = x.element_bytes, x.tokens, model.hidden_size
    w = mamba_widths(model, x.tp)
    scan = mamba_widths(model, x.tp, x.cp)
    out_proj_bytes = x.gemm_input_bytes if x.lora is None else lora_row_input_bytes(x, "out_proj")
    return {
        "mamba_norm_input": e * n * h / x.sp,
        "in_proj_input": lora_column_input_bytes(x, h, "in_proj"),
        "mamba_mask": x.mask_bytes * n * h / x.sp,
        "in_proj_output": e * (n * x.cp) * scan.in_proj,
        "ssd_output": e * (n * x.cp) * scan.inner,
        "gated_norm_input": e * n * w.inner,
        "gated_norm_rstd": FP32_BYTES * n * w.groups,
        "out_proj_input": out_proj_bytes * n * w.inner,
    }
