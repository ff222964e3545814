"""`ModelSpec`: the shape of a decoder-only transformer, dense or mixture-of-experts.

Names follow Megatron-LM's arguments (`--num-layers`, `--num-query-groups`,
`--moe-ffn-hidden-size`, ...) so a spec maps one-to-one onto an exported command line.
Derived sizes (head dim, MoE layer mask) are methods, never stored twice. The MoE router's
settings are a nested `specs.router.RouterSpec` (`ModelSpec.router`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from specs.block_checks import LayerBlock
from specs.dsa_checks import computes_topk
from specs.fieldcheck import (
    require_choice,
    require_non_negative,
    require_optional_positive,
    require_positive,
)
from specs.layer_kinds import DENSE_LAYER, MOE_LAYER, LayerKind, parse_hybrid_pattern
from specs.model_checks import check_relations
from specs.mtp_checks import mtp_depth_kinds
from specs.router import RouterSpec

Activation = Literal["swiglu", "gelu"]
Normalization = Literal["rmsnorm", "layernorm"]
PositionEmbedding = Literal["rope", "learned", "none"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A decoder-only transformer (Llama/GPT style), optionally with MoE layers and MLA."""

    name: str
    """Preset or user-chosen name; shown in tables and reports."""
    num_layers: int
    """Transformer layers (Megatron `--num-layers`)."""
    hidden_size: int
    """Model width h (`--hidden-size`)."""
    num_attention_heads: int
    """Query heads a (`--num-attention-heads`)."""
    ffn_hidden_size: int
    """Dense MLP inner size F (`--ffn-hidden-size`); for SwiGLU the width of each of the two
    up projections."""
    vocab_size: int
    """Tokenizer vocabulary, before Megatron's padding to a multiple of 128·tp."""
    num_query_groups: int | None = None
    """Key/value heads g for grouped-query attention; None means g = a (plain MHA)."""
    kv_channels: int | None = None
    """Head dimension d (`--kv-channels`); None means hidden_size / num_attention_heads."""
    activation: Activation = "swiglu"
    """MLP activation: `swiglu` (gated, three weight matrices) or `gelu` (two)."""
    normalization: Normalization = "rmsnorm"
    """`rmsnorm` (one weight vector) or `layernorm` (weight and bias)."""
    layer_block: LayerBlock = "sequential"
    """How each transformer layer joins attention and MLP (`specs.block_checks`):
    ``sequential`` (Megatron-LM), ``parallel`` (``x + attn(ln1(x)) + mlp(ln2(x))``, two
    norms of the layer input: GPT-NeoX ``gpt_j_residual``, GPT-NeoX-20B) or
    ``parallel_shared_norm`` (one norm for both branches: GPT-NeoX ``gpt_j_tied``, GPT-J,
    PaLM). The parallel blocks run one tensor-parallel reduction per layer forward instead
    of two; Megatron-LM has no such block, so an export refuses it."""
    position_embedding: PositionEmbedding = "rope"
    """`rope` (no parameters), `learned` (a max_position_embeddings x h table) or `none`."""
    max_position_embeddings: int = 4096
    """Longest sequence the position embedding supports (`--max-position-embeddings`)."""
    tied_embeddings: bool = False
    """Input embedding and output layer share one matrix (Megatron's default; Llama unties)."""
    add_bias_linear: bool = False
    """Biases on every linear layer (GPT-2, GPT-NeoX); Megatron's `--disable-bias-linear`
    turns them off."""
    add_qkv_bias: bool = False
    """Biases on the QKV projection only (Qwen2)."""
    num_experts: int = 0
    """Routed experts per MoE layer (`--num-experts`); 0 means a dense model."""
    moe_top_k: int = 2
    """Experts each token is routed to (`--moe-router-topk`)."""
    moe_ffn_hidden_size: int | None = None
    """Inner size of one routed expert (`--moe-ffn-hidden-size`); None means ffn_hidden_size."""
    moe_shared_expert_size: int = 0
    """Total inner size of the shared expert(s) (`--moe-shared-expert-intermediate-size`);
    0 means none."""
    moe_layer_freq: int = 1
    """Layer i (counted after the leading dense layers) is MoE when i % freq == 0."""
    moe_first_dense_layers: int = 0
    """Leading layers that stay dense (DeepSeek's `first_k_dense_replace`)."""
    moe_capacity_factor: float | None = None
    """Expert capacity factor (`--moe-expert-capacity-factor`); None means dropless."""
    moe_latent_size: int | None = None
    """Latent width ℓ of the routed experts (Megatron `--moe-latent-size`,
    `TransformerConfig.moe_latent_size`; Nemotron 3 Super): each MoE layer projects its
    tokens h -> ℓ before the dispatch (``fc1_latent_proj``) and ℓ -> h after the combine
    (``fc2_latent_proj``), both replicated over tp; the dispatcher moves ℓ-wide rows and
    the experts map ℓ -> F -> ℓ (`megatron/core/transformer/moe/moe_layer.py`). The router
    and the shared expert stay on h. None: the experts run on h."""
    router: RouterSpec = field(default_factory=RouterSpec)
    """How the MoE layers score, select, weight and balance experts (`specs.router`);
    the default is Megatron-core's default router. Ignored by dense models."""
    q_lora_rank: int | None = None
    """Multi-latent attention (DeepSeek): rank of the query down-projection; None = no
    query compression."""
    kv_lora_rank: int | None = None
    """Multi-latent attention: rank of the joint key/value compression; None means the
    model does not use MLA."""
    qk_head_dim: int | None = None
    """MLA: per-head query/key dimension without the rotary part."""
    qk_pos_emb_head_dim: int | None = None
    """MLA: per-head rotary dimension shared by keys."""
    v_head_dim: int | None = None
    """MLA: per-head value dimension."""
    mtp_num_layers: int = 0
    """Multi-token-prediction depths after the decoder (Megatron `--mtp-num-layers`,
    DeepSeek's `num_nextn_predict_layers`); 0 means none. Megatron places them on the last
    pipeline stage unless a pipeline layout puts them elsewhere (`specs.pipeline_split`).
    A transformer's depth holds one layer of the last layer's kind, a hybrid model's the
    layers of `mtp_hybrid_pattern` (`mtp_depth_kinds`)."""
    mtp_hybrid_pattern: str | None = None
    """A hybrid model's layers of one MTP depth, one symbol each as in
    `hybrid_layer_pattern` (the part after each ``/`` of Megatron-core's unified pattern
    ``<main>/<mtp>/<mtp>...``; Hugging Face `mtp_hybrid_override_pattern`); None for a
    transformer and for a hybrid model without MTP (`specs.mtp_checks`)."""
    mtp_repeated_layer: bool = False
    """One set of MTP weights run at every depth (Megatron `mtp_use_repeated_layer`,
    `--mtp-use-repeated-layer`): parameters, gradients and optimizer state once, compute
    and activations per depth."""
    sliding_window: int | None = None
    """Keys a windowed (local) attention layer attends to, the query's own included
    (Hugging Face `sliding_window`); None when every layer attends to all earlier keys."""
    sliding_window_every: int = 2
    """With `sliding_window`: layer i is windowed unless i % every == every - 1 (2: even
    layers windowed, odd layers full, as GPT-OSS's `layer_types`)."""
    attention_sinks: bool = False
    """One learned sink logit per attention head and layer (GPT-OSS)."""
    rotary_base: int = 10000
    """RoPE base θ (Megatron `--rotary-base`, default 10000; Hugging Face `rope_theta`).
    Changes no cost; an export carries it so the launched model is the published one."""
    qk_layernorm: bool = False
    """A norm over each head's query and key before RoPE (Qwen3; Megatron `--qk-layernorm`,
    `TransformerConfig.qk_layernorm`). The Megatron runtime prices the two norms' kernels
    and saved inputs; their 2·d weights per layer are left out of the parameter count; an
    export carries it."""
    layernorm_zero_centered_gamma: bool = False
    """Zero-centred norm weights: every norm scales by 1 + γ, γ initialised to 0
    (Megatron-core `TransformerConfig.layernorm_zero_centered_gamma`, flag
    `--apply-layernorm-1p`; Transformer Engine's ``zero_centered_gamma``). Megatron-Bridge
    sets it for Qwen3-Next (``Qwen3NextBridge.provider_bridge``, v0.4.0 to v0.6.0; the
    ``Qwen3NextModelProvider`` default in v0.2.0 and v0.3.0) and Nemotron-4
    (``NemotronModelProvider`` in v0.2.0 and v0.3.0, ``NemotronBridge.provider_bridge``
    from v0.4.0). A reparametrisation of the same weights: it changes no parameter,
    FLOP, byte or time the cost model counts; an export carries it."""

    hybrid_layer_pattern: str | None = None
    """A hybrid model's layers, one symbol each (Megatron-core `--hybrid-override-pattern`):
    ``M`` Mamba-2 mixer, ``*`` self-attention, ``-`` dense MLP, ``E`` routed experts
    (`specs.layer_kinds.HYBRID_SYMBOLS`); None for a transformer, every layer attention
    plus an MLP or experts."""
    mamba_state_dim: int = 128
    """SSM state size N of a Mamba-2 mixer (Megatron `--mamba-state-dim`, Hugging Face
    `ssm_state_size`)."""
    mamba_head_dim: int = 64
    """Channels P per Mamba-2 head (Megatron `--mamba-head-dim`)."""
    mamba_num_groups: int = 8
    """Groups of the B and C projections (Megatron `--mamba-num-groups`, Hugging Face
    `n_groups`)."""
    mamba_num_heads: int | None = None
    """Mamba-2 heads (Megatron `--mamba-num-heads`); None: 2·hidden_size / mamba_head_dim
    (the mixer's expansion factor 2, Megatron `MambaMixer` ``expand``)."""
    mamba_conv_kernel: int = 4
    """Width of the Mamba-2 mixer's causal depthwise convolution (`MambaMixer` ``d_conv``,
    Hugging Face `conv_kernel`)."""
    linear_key_head_dim: int = 128
    """Channels of one query/key head of a gated DeltaNet (``G`` layer; Megatron
    `TransformerConfig.linear_key_head_dim`, Hugging Face `linear_key_head_dim`)."""
    linear_value_head_dim: int = 128
    """Channels of one value/gate head of a gated DeltaNet (`linear_value_head_dim`)."""
    linear_num_key_heads: int = 16
    """Query/key heads of a gated DeltaNet (`linear_num_key_heads`)."""
    linear_num_value_heads: int = 32
    """Value heads of a gated DeltaNet (`linear_num_value_heads`), a multiple of the key
    heads: each key head serves value_heads / key_heads of them (`GatedDeltaNet`
    ``repeat_interleave``)."""
    linear_conv_kernel_dim: int = 4
    """Width of the gated DeltaNet's causal depthwise convolution
    (`linear_conv_kernel_dim`). The five ``linear_*`` defaults are Megatron-core's."""
    attention_output_gate: bool = False
    """Gated attention (Megatron `TransformerConfig.attention_output_gate`, Qwen3-Next): the
    query projection also produces one gate per query channel, and the core attention
    output is multiplied by its sigmoid before the output projection
    (`megatron/core/transformer/attention.py`)."""
    moe_shared_expert_gate: bool = False
    """A sigmoid gate on the shared expert's output, one h -> 1 weight per MoE layer
    (Megatron `--moe-shared-expert-gate`, `SharedExpertMLP`; Hugging Face
    `shared_expert_gate`)."""
    rotary_percent: float = 1.0
    """Share of each head's channels RoPE rotates (Megatron `--rotary-percent`, Hugging Face
    `partial_rotary_factor`). Changes no cost; an export carries it."""
    dsa_indexer_n_heads: int | None = None
    """DeepSeek sparse attention (`specs.dsa_checks`; Megatron
    `TransformerConfig.dsa_indexer_n_heads`, Hugging Face `index_n_heads`): query heads of
    the lightning indexer. None with the other two sizes: dense attention."""
    dsa_indexer_head_dim: int | None = None
    """DSA: channels of one indexer head, its single key head alike
    (`dsa_indexer_head_dim`, Hugging Face `index_head_dim`)."""
    dsa_indexer_topk: int | None = None
    """DSA: keys each query attends to, chosen by the indexer (`dsa_indexer_topk`, Hugging
    Face `index_topk`); a query with fewer earlier keys attends to all of them."""
    dsa_indexer_topk_freq: int = 1
    """DSA index sharing (`dsa_indexer_topk_freq`, Hugging Face `index_topk_freq`): one
    layer in this many computes the top-k, the others reuse it and hold no indexer."""
    dsa_indexer_skip_topk_offset: int = 0
    """DSA index sharing: the layers up to this one compute their own top-k
    (`dsa_indexer_skip_topk_offset`, Hugging Face `index_skip_topk_offset`)."""
    dsa_indexer_loss_coeff: float = 0.0
    """DSA: weight of the indexer's KL loss against the attention distribution
    (`dsa_indexer_loss_coeff`; Megatron-Bridge's GLM-5 bridge sets 0.001); 0: no loss, and
    the indexer, whose inputs are detached, gets no gradient."""
    dsa_indexer_use_sparse_loss: bool = False
    """DSA: the indexer loss over the top-k keys only, not every key
    (`dsa_indexer_use_sparse_loss`; the GLM-5 bridge sets it)."""

    def __post_init__(self) -> None:
        require_positive(
            self,
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "ffn_hidden_size",
            "vocab_size",
            "max_position_embeddings",
            "moe_top_k",
            "moe_layer_freq",
            "sliding_window_every",
            "rotary_base",
            "mamba_state_dim",
            "mamba_head_dim",
            "mamba_num_groups",
            "mamba_conv_kernel",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_conv_kernel_dim",
        )
        require_optional_positive(
            self, "dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"
        )
        require_optional_positive(
            self,
            "num_query_groups",
            "kv_channels",
            "moe_ffn_hidden_size",
            "moe_latent_size",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_head_dim",
            "qk_pos_emb_head_dim",
            "v_head_dim",
            "sliding_window",
            "mamba_num_heads",
        )
        require_non_negative(
            self,
            "num_experts",
            "moe_shared_expert_size",
            "moe_first_dense_layers",
            "mtp_num_layers",
        )
        require_choice(self, "activation", Activation)
        require_choice(self, "normalization", Normalization)
        require_choice(self, "position_embedding", PositionEmbedding)
        require_choice(self, "layer_block", LayerBlock)
        check_relations(self)

    # ---- derived sizes -------------------------------------------------------------

    @property
    def query_groups(self) -> int:
        """Key/value heads g (equal to the query heads for plain multi-head attention)."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Per-head dimension d."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.num_experts > 0

    @property
    def uses_mla(self) -> bool:
        """True for multi-latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def uses_dsa(self) -> bool:
        """True for DeepSeek sparse attention over MLA (`specs.dsa_checks`)."""
        return self.dsa_indexer_topk is not None

    def dsa_indexer_mask(self) -> tuple[bool, ...]:
        """For each decoder layer and then each MTP depth's layer, True when it holds a
        lightning indexer and computes its own top-k; False for the layers that reuse
        another's (index sharing) and for every layer without DSA
        (`specs.dsa_checks.computes_topk`, 1-based layer numbers as Megatron's)."""
        layers = self.num_layers + self.mtp_num_layers * len(self.mtp_depth_kinds())
        if not self.uses_dsa:
            return (False,) * layers
        freq, offset = self.dsa_indexer_topk_freq, self.dsa_indexer_skip_topk_offset
        return tuple(computes_topk(n, freq, offset) for n in range(1, layers + 1))

    @property
    def expert_ffn_hidden_size(self) -> int:
        """Inner size of one routed expert."""
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def expert_hidden_size(self) -> int:
        """Width of the rows the token dispatcher moves and the routed experts take in and
        give out: `moe_latent_size`, else hidden_size (Megatron-LM
        `token_dispatcher.py` ``hidden_dim = moe_latent_size or hidden_size``,
        `experts.py` ``input_size``)."""
        return self.moe_latent_size or self.hidden_size

    def window_layer_mask(self) -> tuple[bool, ...]:
        """For each layer, True when it uses the sliding window (`sliding_window`)."""
        every = self.sliding_window_every
        windowed = self.sliding_window is not None
        return tuple(windowed and i % every != every - 1 for i in range(self.num_layers))

    @property
    def is_hybrid(self) -> bool:
        """True for a hybrid model (`hybrid_layer_pattern`)."""
        return self.hybrid_layer_pattern is not None

    @property
    def mamba_heads(self) -> int:
        """Mamba-2 heads H: `mamba_num_heads`, else 2·hidden_size / mamba_head_dim."""
        return self.mamba_num_heads or 2 * self.hidden_size // self.mamba_head_dim

    @property
    def gdn_key_size(self) -> int:
        """Query (and key) width of a gated DeltaNet, key heads x key head dim (Megatron
        `GatedDeltaNet` ``qk_dim``)."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def gdn_value_size(self) -> int:
        """Value (and output-gate) width of a gated DeltaNet, value heads x value head dim
        (``v_dim``)."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def mamba_inner_size(self) -> int:
        """Inner width of a Mamba-2 mixer, H·P (Megatron ``d_inner``)."""
        return self.mamba_heads * self.mamba_head_dim

    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """For each layer, what it holds (`specs.layer_kinds.LayerKind`): the hybrid
        pattern's symbols, else a transformer layer with an MLP or with routed experts
        (`moe_layer_mask`)."""
        if self.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(
                self.hybrid_layer_pattern, num_layers=self.num_layers, where=self.name
            )
        return tuple(MOE_LAYER if moe else DENSE_LAYER for moe in self.moe_layer_mask())

    def mtp_depth_kinds(self) -> tuple[LayerKind, ...]:
        """The layer kinds of one multi-token-prediction depth, in order: a transformer's
        last layer kind, a hybrid model's `mtp_hybrid_pattern`; none without MTP
        (`specs.mtp_checks`)."""
        return mtp_depth_kinds(self, self.layer_kinds())

    def moe_layer_mask(self) -> tuple[bool, ...]:
        """For each layer, True when it is an MoE layer (Megatron `--moe-layer-freq`; a
        hybrid model's ``E`` layers)."""
        if self.hybrid_layer_pattern is not None:
            return tuple(kind.is_moe for kind in self.layer_kinds())
        if not self.is_moe:
            return (False,) * self.num_layers
        first = self.moe_first_dense_layers
        return tuple(
            i >= first and (i - first) % self.moe_layer_freq == 0 for i in range(self.num_layers)
        )

    @property
    def num_moe_layers(self) -> int:
        """Number of MoE layers."""
        return sum(self.moe_layer_mask())

    def replace(self, **changes: object) -> ModelSpec:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
