"""Parameter counts of a `ModelSpec`, split the way parallelism shards them.

Each transformer layer is split into the parts that different process groups own:
attention and dense/shared MLP weights are sharded by tensor parallelism, routed experts
by expert parallelism x expert tensor parallelism, norms and the router are replicated.
The memory model (`costmodel.memory`) divides each part by its own degree.

Conventions:
- Counts use the tokenizer's vocabulary as published, not Megatron's padded vocabulary
  (published parameter counts do the same); `padded_vocab_size` gives the padded size for
  the memory model.
- Attention sinks (GPT-OSS): one learned logit per head and layer, counted with the
  attention.
- Biases are counted when `add_bias_linear` (every linear layer) or `add_qkv_bias` (the
  query/key/value projections only) is set. LayerNorm has a weight and a bias, RMSNorm a
  weight only. SwiGLU MLPs have three matrices (gate, up, down), GELU MLPs two.
- Attention projections, standard, gated or multi-latent: `specs.attention_params`.
- Router: one h x E matrix per MoE layer, no bias (DeepSeek-V3's score-correction bias is
  a buffer, not a trained parameter).
- Latent MoE (``ModelSpec.moe_latent_size`` ℓ, Megatron-LM `MoELayer.__init__` in
  ``megatron/core/transformer/moe/moe_layer.py``): each routed expert maps ℓ -> F -> ℓ, so
  its matrices are ℓ wide (`mlp_params` at ℓ), and the layer adds ``fc1_latent_proj``
  (h x ℓ) and ``fc2_latent_proj`` (ℓ x h), TE linears with ``parallel_mode="duplicated"``:
  replicated over tp, not expert-sharded (`LayerParams.latent_projections`). Megatron's
  own count (``theoretical_memory_usage.py``) is the same: routed 2·ℓ·F·E (x3/2 gated) and
  projections 2·h·ℓ in the replicated part.
- Multi-token prediction (Megatron's `MultiTokenPredictionLayer`, DeepSeek-V3 §2.2), per
  depth: two RMS norms on the inputs (``enorm``, ``hnorm``), the projection ``eh_proj``
  (2h x h, no bias), the depth's layers (`ModelSpec.mtp_depth_kinds`: a transformer's one
  layer of the last decoder layer's kind; a hybrid model's ``mtp_hybrid_pattern``, each
  layer with its pre-norm, built as a ``HybridStack`` without a final norm) and its final
  norm (``final_layernorm``); the embedding and the output layer are shared with the main
  model. Hugging Face checkpoints store a copy of both per depth (``embed_tokens``,
  ``shared_head``), which is why the published DeepSeek-V3 total (685B = 671B main + 14B
  MTP) is larger than the parameters trained. With ``mtp_repeated_layer`` one depth's
  weights serve every depth (Megatron ``MultiTokenPredictionBlock._build_layers`` builds
  one depth module), so they are counted once (`ParamCounts.mtp_weights`).
- Hybrid models (``ModelSpec.hybrid_layer_pattern``, `specs.layer_kinds`): each layer holds
  one part and its own pre-norm (`LayerParams` by `LayerKind`). An ``M`` layer is a
  Mamba-2 mixer (`mamba_mixer_params`), counted in `LayerParams.attention`, the part that
  holds a layer's tensor-parallel token-mixer weights (Megatron shards every mixer weight
  over tp); a ``*`` layer is attention alone, a ``-`` layer a dense MLP alone, an ``E``
  layer the router, the routed experts and the shared expert. The Mamba-2 mixer has no
  linear bias whatever ``add_bias_linear`` says (Megatron's `MambaMixer` asserts
  ``not bias``).
- Gated DeltaNet (hybrid ``G`` layer, `gdn_mixer_params`): counted in
  `LayerParams.attention` as the Mamba-2 mixer; no linear bias (Megatron's hybrid layer
  spec builds `GatedDeltaNet` with ``bias=False`` and ``conv_bias=False``).
- Gated attention (``attention_output_gate``): the query projection is twice as wide, one
  gate per query channel (`specs.attention_params.attention_params`). A gated shared expert
  (``moe_shared_expert_gate``) adds its h -> 1 weight, replicated, counted with the router.
- DeepSeek sparse attention (``ModelSpec.dsa_indexer_*``, `specs.dsa_checks`): each layer
  that computes its own top-k holds a lightning indexer (`dsa_indexer_params`), counted in
  `LayerParams.indexer`, replicated over tp; the layers that reuse another's top-k (index
  sharing) hold none. An MTP depth's layer is numbered after the decoder's.
- A parallel attention+MLP block (``ModelSpec.layer_block``, `specs.block_checks`) holds
  the same weights as the sequential block, one pre-norm fewer when its norm is shared
  (``parallel_shared_norm``).
- Per-head q/k norms (``qk_layernorm``, 2·d weights per attention layer) are not counted.
- LoRA adapters (`lora_layer_params`, a job's `specs.finetune.LoraSpec`): per targeted
  linear layer in -> out, A (in x r) and B (r x out), no bias, on the targets each layer
  holds (`specs.finetune.layer_targets`: a hybrid ``M`` layer its in_proj and out_proj);
  they are not part of the model's counts above, which stay the frozen base.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from specs.attention_params import attention_params, mla_down_projection_params
from specs.block_checks import block_norms
from specs.errors import SpecError
from specs.finetune import LoraSpec, layer_targets, lora_target_features
from specs.layer_kinds import DENSE_LAYER, LayerKind
from specs.mixer_params import (
    dsa_indexer_params,
    gdn_mixer_params,
    latent_projection_params,
    linear_params,
    mamba_mixer_params,
)
from specs.model import ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerParams:
    """Parameters of one decoder layer, by the parallel group that shards them."""

    attention: int
    """The token mixer's weights, TP-sharded: QKV (or MLA's up projections) + output
    projection with their biases (MLA's down projections are `latent_down_projections`);
    for a hybrid model's Mamba-2 layer the whole mixer (`mamba_mixer_params`), for a gated
    DeltaNet layer the whole net (`gdn_mixer_params`); 0 for a layer without a mixer
    (hybrid ``-`` and ``E``)."""
    norms: int
    """Layer norms of this layer (and MLA's internal q/kv norms): replicated."""
    mlp: int
    """Dense MLP, or the shared expert(s) of an MoE layer: TP-sharded; 0 for a hybrid
    layer without a feed-forward part (``M``, ``*``)."""
    routed_experts: int
    """All routed experts of the layer (0 for dense layers): sharded over EP x ETP."""
    router: int
    """Router weights, and the shared expert's gate with ``moe_shared_expert_gate`` (0 for
    dense layers): replicated."""
    is_moe: bool
    """True when the layer has routed experts."""
    latent_projections: int = 0
    """A latent MoE layer's h -> ℓ and ℓ -> h projections (`latent_projection_params`):
    replicated over tp, not expert-sharded; 0 otherwise."""
    latent_down_projections: int = 0
    """A multi-latent-attention layer's down projections ``q_a`` and ``kv_a``
    (`specs.attention_params.mla_down_projection_params`): replicated over tp
    (``parallel_mode="duplicated"``), their gradients all-reduced over tp under sequence
    parallelism like the norms'; not part of `attention`; 0 without MLA."""
    indexer: int = 0
    """A DeepSeek-sparse-attention layer's lightning indexer (`dsa_indexer_params`):
    replicated over tp (Megatron builds its linears ``parallel_mode="duplicated"`` and
    averages their gradients over tp); 0 for a layer without one (index sharing) and
    without DSA."""

    @property
    def total(self) -> int:
        """Every parameter of the layer."""
        return (
            self.attention
            + self.norms
            + self.mlp
            + self.routed_experts
            + self.router
            + self.latent_projections
            + self.latent_down_projections
            + self.indexer
        )

    def active(self, model: ModelSpec) -> int:
        """Parameters one token passes through: top-k routed experts instead of all."""
        if not self.is_moe:
            return self.total
        per_expert = self.routed_experts // model.num_experts
        return self.total - self.routed_experts + per_expert * model.moe_top_k


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamCounts:
    """Parameters of a whole model: embedding, layers, final norm and output layer."""

    embedding: int
    """Word embedding (+ the learned position-embedding table)."""
    output_layer: int
    """Output (LM head) projection; 0 when tied to the word embedding."""
    final_norm: int
    """Norm after the last layer."""
    layers: tuple[LayerParams, ...]
    """One entry per transformer layer, in order."""
    num_experts: int = 0
    """Routed experts per MoE layer (0 for a dense model); needed for `active`."""
    moe_top_k: int = 0
    """Experts each token is routed to; needed for `active`."""
    mtp_layers: tuple[MtpParams, ...] = ()
    """One entry per multi-token-prediction depth (empty without MTP): what each depth
    computes with."""
    mtp_repeated: bool = False
    """One set of MTP weights serves every depth (``ModelSpec.mtp_repeated_layer``)."""

    @property
    def main_total(self) -> int:
        """Parameters of the main model: everything but the MTP layers (the figure model
        cards quote as the model size)."""
        return (
            self.embedding
            + self.output_layer
            + self.final_norm
            + sum(layer.total for layer in self.layers)
        )

    def mtp_weights(self, depths: int) -> tuple[MtpParams, ...]:
        """The MTP weight sets a rank that runs the first ``depths`` depths holds: one per
        depth, or a single one for all of them with ``mtp_repeated`` (none for 0 depths).
        The one place that says how many copies of the MTP weights exist."""
        held = self.mtp_layers[:depths]
        return held[:1] if self.mtp_repeated else held

    @property
    def mtp(self) -> int:
        """Parameters of the MTP layers (embedding and output layer shared, not counted;
        repeated weights once)."""
        return sum(layer.total for layer in self.mtp_weights(len(self.mtp_layers)))

    @property
    def total(self) -> int:
        """Every parameter trained: the main model and the MTP layers."""
        return self.main_total + self.mtp

    @property
    def active(self) -> int:
        """Parameters of the main model one token passes through (MoE: only its top-k
        routed experts); the MTP layers are excluded, as in published activated counts."""
        routed = sum(layer.routed_experts for layer in self.layers)
        active_routed = sum(
            layer.routed_experts // self.num_experts * self.moe_top_k
            for layer in self.layers
            if layer.is_moe
        )
        return self.main_total - routed + active_routed


@dataclass(frozen=True, kw_only=True, slots=True)
class MtpParams:
    """Parameters of one MTP depth (Megatron `MultiTokenPredictionLayer`)."""

    layers: tuple[LayerParams, ...]
    """Its layers, in order (`ModelSpec.mtp_depth_kinds`): a transformer's one layer of the
    last decoder layer's kind, a hybrid model's ``mtp_hybrid_pattern`` layers."""
    projection: int
    """``eh_proj``: the concatenated (embedding, hidden) 2h -> h projection, TP-sharded."""
    norms: int
    """``enorm``, ``hnorm`` and the final norm: replicated."""

    @property
    def total(self) -> int:
        """Every parameter of the depth."""
        return sum(layer.total for layer in self.layers) + self.projection + self.norms


def norm_params(model: ModelSpec, width: int) -> int:
    """Parameters of one norm over ``width`` features: LayerNorm 2·width, RMSNorm width."""
    return (2 if model.normalization == "layernorm" else 1) * width


def layer_norm_params(model: ModelSpec) -> int:
    """Norms of one layer: its pre-norms (two, one for ``parallel_shared_norm``:
    `specs.block_checks.block_norms`), plus MLA's q and kv latent norms."""
    total = block_norms(model.layer_block) * norm_params(model, model.hidden_size)
    if model.uses_mla:
        total += norm_params(model, model.kv_lora_rank or 0)
        if model.q_lora_rank is not None:
            total += norm_params(model, model.q_lora_rank)
    return total


def mlp_params(model: ModelSpec, ffn_hidden_size: int, width: int | None = None) -> int:
    """One MLP of inner size F on rows of ``width`` (default hidden_size h): SwiGLU
    3·width·F, GELU 2·width·F, plus biases when enabled."""
    h = model.hidden_size if width is None else width
    if ffn_hidden_size == 0:
        return 0
    bias = model.add_bias_linear
    up_width = 2 * ffn_hidden_size if model.activation == "swiglu" else ffn_hidden_size
    return linear_params(h, up_width, bias=bias) + linear_params(ffn_hidden_size, h, bias=bias)


def _layer_params(model: ModelSpec, kind: LayerKind) -> LayerParams:
    """The parameters of one layer of kind ``kind``: a transformer layer (two pre-norms) or
    a hybrid layer of one part (one pre-norm)."""
    if kind.mlp == "moe":
        mlp = mlp_params(model, model.moe_shared_expert_size)
        expert = mlp_params(model, model.expert_ffn_hidden_size, model.expert_hidden_size)
        routed, latent = model.num_experts * expert, latent_projection_params(model)
        router = model.hidden_size * (model.num_experts + model.moe_shared_expert_gate)
    elif kind.mlp == "dense":
        mlp, routed, router, latent = mlp_params(model, model.ffn_hidden_size), 0, 0, 0
    else:
        mlp, routed, router, latent = 0, 0, 0, 0
    down = 0
    if kind.mixer == "attention":
        down = mla_down_projection_params(model)
        mixer = attention_params(model) - down
    elif kind.mixer == "mamba":
        mixer = mamba_mixer_params(model)
    elif kind.mixer == "gdn":
        mixer = gdn_mixer_params(model)
    else:
        mixer = 0
    # a hybrid layer has the one pre-norm of its part (MLA is refused by check_hybrid)
    norms = norm_params(model, model.hidden_size) if model.is_hybrid else layer_norm_params(model)
    return LayerParams(
        attention=mixer,
        norms=norms,
        mlp=mlp,
        routed_experts=routed,
        router=router,
        is_moe=kind.is_moe,
        latent_projections=latent,
        latent_down_projections=down,
    )


@lru_cache(maxsize=64)
def count_params(model: ModelSpec) -> ParamCounts:
    """Parameter counts of ``model`` by part and layer (unpadded vocabulary). Cached on the
    frozen ``model``: the result is frozen, and a plan search asks for it once per rank
    layout of every candidate."""
    h = model.hidden_size
    embedding = model.vocab_size * h
    if model.position_embedding == "learned":
        embedding += model.max_position_embeddings * h
    kinds, depth_kinds = model.layer_kinds(), model.mtp_depth_kinds()
    by_kind = {kind: _layer_params(model, kind) for kind in {*kinds, *depth_kinds}}
    indexer = dsa_indexer_params(model)
    mask = model.dsa_indexer_mask()

    def held(kind: LayerKind, position: int) -> LayerParams:
        layer = by_kind[kind]
        has_indexer = kind.mixer == "attention" and mask[position]
        return replace(layer, indexer=indexer) if has_indexer else layer

    depth_size = len(depth_kinds)
    mtp = tuple(
        MtpParams(
            layers=tuple(
                held(kind, model.num_layers + depth * depth_size + i)
                for i, kind in enumerate(depth_kinds)
            ),
            projection=linear_params(2 * h, h, bias=False),
            norms=3 * norm_params(model, h),
        )
        for depth in range(model.mtp_num_layers)
    )
    return ParamCounts(
        embedding=embedding,
        output_layer=0 if model.tied_embeddings else model.vocab_size * h,
        final_norm=norm_params(model, h),
        layers=tuple(held(kind, i) for i, kind in enumerate(kinds)),
        num_experts=model.num_experts,
        moe_top_k=model.moe_top_k if model.is_moe else 0,
        mtp_layers=mtp,
        mtp_repeated=model.mtp_repeated_layer,
    )


def held_mtp_layers(model: ModelSpec, depths: int) -> int:
    """Layers whose weights a rank that runs ``depths`` MTP depths holds: each weight set's
    layers (`ParamCounts.mtp_weights`), one per depth for a transformer."""
    return sum(len(depth.layers) for depth in count_params(model).mtp_weights(depths))


def lora_layer_params(model: ModelSpec, lora: LoraSpec, kind: LayerKind = DENSE_LAYER) -> int:
    """Adapter parameters of one layer of ``kind`` (default a transformer layer): r·(in + out)
    per target the layer holds (`specs.finetune.layer_targets`,
    `specs.finetune.lora_target_features`; Megatron-Bridge ``ParallelLinearAdapter``:
    ``linear_in`` in -> r and ``linear_out`` r -> out, both without bias). Tensor
    parallelism splits every adapter matrix along one of its dimensions (A over r for a
    column-parallel base, over in for a row-parallel one; B over out), so a rank holds
    1/tp of it."""
    total = 0
    for target in layer_targets(lora, kind):
        fan_in, fan_out, _ = lora_target_features(model, target)
        total += lora.rank * (fan_in + fan_out)
    return total


def padded_vocab_size(vocab_size: int, tp: int, multiple: int = 128) -> int:
    """Megatron's padded vocabulary: V rounded up to a multiple of ``multiple``·tp.

    Source: Megatron-LM `--make-vocab-size-divisible-by` (default 128), padded
    V = ceil(V / (128·tp))·128·tp (megatron-facts.md §8.2).
    """
    for name, value in (("vocab_size", vocab_size), ("tp", tp), ("multiple", multiple)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(
                f"padded_vocab_size: {name} must be a positive integer, got {value!r}; "
                "pass the tokenizer size, the tensor-parallel degree and the padding multiple"
            )
    step = multiple * tp
    return -(-vocab_size // step) * step
