"""Parameter counts of the layer parts beyond a transformer layer's attention and MLP: a latent
MoE layer's projections, a Mamba-2 mixer, a gated DeltaNet and a DeepSeek sparse attention
indexer, each as Megatron-core builds it (sources per function); `specs.params` composes
them into layers and models."""

from __future__ import annotations

from specs.model import ModelSpec


def linear_params(fan_in: int, fan_out: int, *, bias: bool) -> int:
    """A linear layer fan_in -> fan_out with an optional bias of fan_out."""
    return fan_in * fan_out + (fan_out if bias else 0)


def latent_projection_params(model: ModelSpec) -> int:
    """A latent MoE layer's ``fc1_latent_proj`` (h -> ℓ) and ``fc2_latent_proj`` (ℓ -> h),
    with their biases when ``add_bias_linear`` (Megatron-LM `MoELayer.__init__`,
    ``bias=config.add_bias_linear``); 0 without ``moe_latent_size``."""
    latent = model.moe_latent_size
    if latent is None:
        return 0
    bias = model.add_bias_linear
    return linear_params(model.hidden_size, latent, bias=bias) + linear_params(
        latent, model.hidden_size, bias=bias
    )


def mamba_mixer_params(model: ModelSpec) -> int:
    """Parameters of one Mamba-2 mixer, d = ``mamba_inner_size``, H heads, G groups, state
    N, conv kernel k (Megatron-LM `MambaMixer.__init__`,
    ``megatron/core/ssm/mamba_mixer.py``, d98e8a64): ``in_proj`` h x (2·d + 2·G·N + H)
    (z, x, B, C, dt), the depthwise ``conv1d`` weight (d + 2·G·N) x k and bias (d + 2·G·N),
    ``A_log``, ``D`` and ``dt_bias`` (H each), the gated RMSNorm weight (d) and
    ``out_proj`` d x h. No linear bias: the mixer asserts ``not bias``; its norm is an
    RMSNorm whatever ``normalization`` says."""
    h, d = model.hidden_size, model.mamba_inner_size
    heads, bc = model.mamba_heads, 2 * model.mamba_num_groups * model.mamba_state_dim
    conv_channels = d + bc
    in_proj = h * (2 * d + bc + heads)
    conv = conv_channels * model.mamba_conv_kernel + conv_channels
    return in_proj + conv + 3 * heads + d + d * h


def gdn_mixer_params(model: ModelSpec) -> int:
    """Parameters of one gated DeltaNet, key width K = ``gdn_key_size``, value width
    V = ``gdn_value_size``, Hv value heads of dv channels, conv kernel k (Megatron-LM
    `_GDNBase.__init__` and `GatedDeltaNet._setup_variant_attrs`,
    ``megatron/core/ssm/gated_delta_net/``, d98e8a64): ``in_proj`` h x (2·K + 2·V + 2·Hv)
    (q, k, v, the output gate z, beta, alpha), the depthwise ``conv1d`` weight
    (2·K + V) x k without bias, ``A_log`` and ``dt_bias`` (Hv each), the output RMSNorm
    over one head's dv channels (``out_norm``, shared by the heads) and ``out_proj``
    V x h. No linear bias."""
    h, k_width, v_width = model.hidden_size, model.gdn_key_size, model.gdn_value_size
    heads = model.linear_num_value_heads
    in_proj = h * (2 * k_width + 2 * v_width + 2 * heads)
    conv = (2 * k_width + v_width) * model.linear_conv_kernel_dim
    return in_proj + conv + 2 * heads + model.linear_value_head_dim + v_width * h


def dsa_indexer_params(model: ModelSpec) -> int:
    """Parameters of one lightning indexer, H_i heads of d_i channels (Megatron-LM
    `DSAIndexer.__init__`, ``experimental_attention_variant/dsa.py``): ``linear_wq_b``
    (q_lora x H_i·d_i; the hidden size without a query latent), ``linear_wk`` (h x d_i),
    the key's LayerNorm (``k_norm``, weight and bias over d_i, a LayerNorm whatever
    ``normalization`` says) and ``linear_weights_proj`` (h x H_i), no biases; 0 without
    DSA. Megatron-Bridge's GLM-5 mapping carries exactly these five tensors
    (``indexer.wq_b``, ``wk``, ``k_norm.weight``, ``k_norm.bias``, ``weights_proj``)."""
    if not model.uses_dsa:
        return 0
    h, heads = model.hidden_size, model.dsa_indexer_n_heads or 0
    dim = model.dsa_indexer_head_dim or 0
    query_in = model.q_lora_rank or h
    return query_in * heads * dim + h * dim + 2 * dim + h * heads
