"""What one gated DeltaNet layer (hybrid symbol ``G``) keeps for backward per microbatch on
one rank, tensor by tensor (`gdn_tensors`), and the per-rank widths of the net
(`gdn_widths`).

The layer (Megatron-core ``megatron/core/models/hybrid/hybrid_layer_specs.py``
``gdn_layer``: a `TransformerLayer` whose self-attention is `GatedDeltaNet`,
``megatron/core/ssm/gated_delta_net/gdn.py`` and ``common.py``, d98e8a64) is a pre-norm
fused into the input projection (``TELayerNormColumnParallelLinear``), the net and a
bias-dropout-add into the residual stream. With TP degree t a rank holds Hk/t key heads and
Hv/t value heads (`_GDNBase.__init__`); the column-parallel ``in_proj`` maps h ->
(2·K + 2·V + 2·Hv)/t (q, k, v, the output gate z, beta, alpha), the row-parallel
``out_proj`` V/t -> h, with K = Hk·dk and V = Hv·dv.

Training (`GatedDeltaNet.forward`, no packed sequences, not deterministic mode) runs
flash-linear-attention's kernels (fla-org/flash-linear-attention): ``causal_conv1d`` with
SiLU on q, k, v (default Triton backend, ``fla/modules/conv/triton/ops.py``
`CausalConv1dFunction.forward`: it saves its input and recomputes the activation), the
fused gate preparation (`_prepare_input_for_gated_delta_rule`: ``l2norm`` on q and k,
``fla/modules/l2norm.py`` `L2NormFunction`, which saves its output and fp32 reciprocal
norms; q and k repeated to the Hv value heads; the fp32 decay
g = -exp(A_log)·softplus(alpha + dt_bias) and beta = sigmoid(beta)),
``chunk_gated_delta_rule`` (FLA bc3b101d ``fla/ops/gated_delta_rule/chunk.py``,
`ChunkGatedDeltaRuleFunction.forward`'s ``save_for_backward``: q, k, v, the chunk-local
cumulative decay g in fp32 (``chunk_local_cumsum``, ``output_dtype=torch.float``), beta
(``beta_raw`` is the same tensor, the sigmoid running outside the kernel), and the WY
representation ``A``, Hv x BT per token with BT = `GDN_CHUNK_TOKENS`, in k's dtype
(``chunk_fwd.py`` `chunk_gated_delta_rule_fwd_intra`); ``q_rstd`` and ``k_rstd`` are None,
Megatron calling it with ``use_qk_l2norm_in_kernel=False``, and so is the initial state;
its backward, `chunk_gated_delta_rule_bwd`, recomputes w, u and the chunk states), then
the gated RMSNorm (`_apply_gated_norm`: ``out_norm`` over each head's dv channels, times
SiLU of z) and ``out_proj``.

Tensors (``e`` the activation element size, T = b·s tokens, sp the sequence-parallel
divisor, bytes per rank; `ActivationShard`):

- ``gdn_norm_input``: the layer input the fused pre-norm keeps, e·T·h/sp.
- ``gdn_in_proj_input``: the normalized input the input projection keeps for its wgrad
  GEMM, T·h at the saved-GEMM-input size (gathered over the sequence with SP).
- ``gdn_mask``: the 1-byte hidden-dropout mask of the bias-dropout-add, with dropout.
- ``conv_input``: q, k, v before the convolution, e·T·(2·K + V)/t.
- ``gate_inputs``: alpha and beta before their activations, e·T·2·Hv/t.
- ``qk_l2norm``: the normalized q and k and their fp32 reciprocal norms,
  e·T·2·K/t + 4·T·2·Hk/t.
- ``rule_inputs``: the kernel's q and k at Hv heads (e·T·2·Hv·dk/t), v (e·T·V/t), g in
  fp32 and beta (4·T·Hv/t + e·T·Hv/t).
- ``rule_wy``: the WY representation ``A``, e·T·Hv·BT/t.
- ``gated_norm_input``: the delta rule's output the norm keeps, e·T·V/t.
- ``gdn_norm_rstd``: its fp32 reciprocal RMS per token and value head, 4·T·Hv/t.
- ``output_gate``: z, which the SiLU gate's backward reads, e·T·V/t.
- ``gdn_out_proj_input``: the gated norm output the output projection keeps for its wgrad
  GEMM, T·V/t at the saved-GEMM-input size.

Megatron's selective recompute module ``gdn_norm_out`` (`_GDNBase.__init__`
``recompute_norm_out``) frees ``gdn_norm_rstd`` and ``gdn_out_proj_input``
(`costmodel.activation_savers`); no other module covers the layer. Full recompute keeps
the layer input and layer-level offloading moves every tensor.

With context parallelism (cp > 1) T = b·s/cp is the rank's sequence shard. From the conv
input to the gated norm the net runs on the whole sequence, b·s tokens, at Hk/(tp·cp) and
Hv/(tp·cp) heads (`gdn_widths` with cp), so each of those tensors holds the same bytes as
the formulas above on T tokens at the tp widths; the all-to-alls save nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.activation_shard import ActivationShard
from costmodel.compute import FP32_BYTES
from specs.model import ModelSpec

GDN_CHUNK_TOKENS = 64
"""Chunk length BT of the chunked gated delta rule (`GatedDeltaNet._setup_variant_attrs`:
``self.chunk_size = 64``; FLA's ``chunk_gated_delta_rule`` uses chunks of 64)."""

GDN_TENSOR_NAMES: tuple[str, ...] = (
    "gdn_norm_input",
    "gdn_in_proj_input",
    "gdn_mask",
    "conv_input",
    "gate_inputs",
    "qk_l2norm",
    "rule_inputs",
    "rule_wy",
    "gated_norm_input",
    "gdn_norm_rstd",
    "output_gate",
    "gdn_out_proj_input",
)
"""The names of `gdn_tensors`, in its order (module docstring)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GdnWidths:
    """Per-rank widths of one gated DeltaNet under TP degree t (`gdn_widths`)."""

    key_heads: float
    """Key heads on the rank, Hk/t."""
    value_heads: float
    """Value heads on the rank, Hv/t."""
    key_head_dim: int
    """Channels per key head, dk."""
    value_head_dim: int
    """Channels per value head, dv."""

    @property
    def key(self) -> float:
        """Query (and key) width on the rank, K/t."""
        return self.key_heads * self.key_head_dim

    @property
    def value(self) -> float:
        """Value (and output-gate) width on the rank, V/t."""
        return self.value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> float:
        """Channels of the causal conv1d on the rank (q, k, v): (2·K + V)/t."""
        return 2 * self.key + self.value

    @property
    def in_proj(self) -> float:
        """Output width of the input projection on the rank (q, k, v, z, beta, alpha):
        (2·K + 2·V + 2·Hv)/t."""
        return self.conv_channels + self.value + 2 * self.value_heads


def gdn_widths(model: ModelSpec, tp: int, cp: int = 1) -> GdnWidths:
    """The per-rank widths of ``model``'s gated DeltaNet at TP degree ``tp``
    (`_GDNBase.__init__`: ``num_k_heads_local_tp``, ``num_v_heads_local_tp``,
    ``qk_dim_local_tp``, ``v_dim_local_tp``). With ``cp`` > 1, the widths the conv1d, the
    delta rule and the gated norm see after the all-to-all from the sequence split to the
    head split (`GatedDeltaNet.forward`, ``a2a_cp_to_hp``; ``feat_dim_split`` divides every
    section by cp): Hk/(tp·cp) and Hv/(tp·cp) heads; the projections keep the cp = 1
    widths on the rank's sequence shard. The divisibility by tp·cp is checked by
    `specs.rules_hybrid.gdn_heads_divisible_by_tp_cp`."""
    return GdnWidths(
        key_heads=model.linear_num_key_heads / (tp * cp),
        value_heads=model.linear_num_value_heads / (tp * cp),
        key_head_dim=model.linear_key_head_dim,
        value_head_dim=model.linear_value_head_dim,
    )


def gdn_tensors(model: ModelSpec, x: ActivationShard) -> dict[str, float]:
    """Bytes one gated DeltaNet layer keeps for backward per microbatch on one rank, by the
    names of `GDN_TENSOR_NAMES` (module docstring for each tensor and its source)."""
    e, n, h = x.element_bytes, x.tokens, model.hidden_size
    w = gdn_widths(model, x.tp)
    heads = w.value_heads
    return {
        "gdn_norm_input": e * n * h / x.sp,
        "gdn_in_proj_input": x.gemm_input_bytes * n * h / x.sp,
        "gdn_mask": x.mask_bytes * n * h / x.sp,
        "conv_input": e * n * w.conv_channels,
        "gate_inputs": e * n * 2 * heads,
        "qk_l2norm": e * n * 2 * w.key + FP32_BYTES * n * 2 * w.key_heads,
        "rule_inputs": (
            e * n * 2 * heads * w.key_head_dim + e * n * w.value + (FP32_BYTES + e) * n * heads
        ),
        "rule_wy": e * n * heads * GDN_CHUNK_TOKENS,
        "gated_norm_input": e * n * w.value,
        "gdn_norm_rstd": FP32_BYTES * n * heads,
        "output_gate": e * n * w.value,
        "gdn_out_proj_input": x.gemm_input_bytes * n * w.value,
    }
