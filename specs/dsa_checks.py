"""Checks and derived layer masks of DeepSeek Sparse Attention (DSA) on a `specs.model.ModelSpec`.

DSA (DeepSeek-V3.2, GLM-5) puts a lightning indexer in front of multi-latent attention:
per token it projects ``dsa_indexer_n_heads`` query heads of ``dsa_indexer_head_dim``
channels from the query latent and one key of the same width from the hidden state, scores
every earlier key, keeps the ``dsa_indexer_topk`` best and runs the attention core over
those keys only. Megatron-LM (`megatron/core/transformer/experimental_attention_variant/
dsa.py`, `DSAIndexer` and `DSAttention`; `TransformerConfig.dsa_indexer_*`) builds it as
``experimental_attention_variant="dsa"`` over `AbsorbedMLASelfAttention`
(`experimental_attention_variant/absorbed_mla.py`), so:

- DSA needs multi-latent attention (`dsa_needs_mla`): the indexer's query projection
  ``linear_wq_b`` reads the query latent (``q_lora_rank`` wide, else the hidden size) and
  its keys reuse MLA's rotary width ``qk_pos_emb_head_dim``, which must fit in one indexer
  head (``DSAIndexer._apply_rope`` splits the first ``qk_pos_emb_head_dim`` channels off);
- no linear biases (`TransformerConfig.__post_init__`: "DSA uses AbsorbedMLASelfAttention,
  which requires add_bias_linear=False");
- ``dsa_indexer_topk_freq`` >= 1 and ``dsa_indexer_skip_topk_offset`` >= 0 (same asserts).

Index sharing (GLM-5.2, ``dsa_indexer_topk_freq`` f > 1): a layer numbered n (1-based)
computes its own top-k unless ``max(n - max(o, 1), 0) % f != 0`` for the offset o, and
then reuses the top-k of the layer ``n - (n - max(o, 1)) % f`` (`is_dsa_skip_topk_layer`,
`source_dsa_compute_layer` in dsa.py); a layer that reuses holds no indexer
(`DSAttention.__init__` builds ``self.indexer`` only when ``not self.skip_topk``). An MTP
depth's layer is numbered after the decoder's (``num_layers + depth``).
"""

from __future__ import annotations

from typing import Protocol

from specs.errors import SpecError


class DsaFields(Protocol):
    """The `specs.model.ModelSpec` fields these checks read (a protocol, so that this module,
    which `specs.model` imports, does not import it back)."""

    @property
    def name(self) -> str: ...
    @property
    def uses_mla(self) -> bool: ...
    @property
    def is_hybrid(self) -> bool: ...
    @property
    def add_bias_linear(self) -> bool: ...
    @property
    def add_qkv_bias(self) -> bool: ...
    @property
    def qk_pos_emb_head_dim(self) -> int | None: ...
    @property
    def dsa_indexer_head_dim(self) -> int | None: ...
    @property
    def dsa_indexer_topk(self) -> int | None: ...
    @property
    def dsa_indexer_topk_freq(self) -> int: ...
    @property
    def dsa_indexer_skip_topk_offset(self) -> int: ...
    @property
    def dsa_indexer_loss_coeff(self) -> float: ...
    @property
    def dsa_indexer_use_sparse_loss(self) -> bool: ...


DSA_SIZES = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")
"""The three sizes that turn DSA on; all or none."""


def check_dsa(model: DsaFields) -> None:
    """`SpecError` naming the field, the values and the fix when the DSA fields of
    ``model`` are inconsistent (module docstring)."""
    where = f"ModelSpec {model.name!r}"
    sizes = {name: getattr(model, name) for name in DSA_SIZES}
    given = [name for name, value in sizes.items() if value is not None]
    if not given:
        _check_unused(model, where)
        return
    if len(given) != len(DSA_SIZES):
        missing = [name for name in DSA_SIZES if name not in given]
        raise SpecError(
            f"{where}: DeepSeek sparse attention needs all of {', '.join(DSA_SIZES)}; "
            f"{', '.join(missing)} missing: set them, or drop {', '.join(given)}"
        )
    if not model.uses_mla:
        raise SpecError(
            f"{where}: DeepSeek sparse attention runs over multi-latent attention "
            "(Megatron's DSA spec builds AbsorbedMLASelfAttention): set kv_lora_rank, "
            "qk_head_dim, qk_pos_emb_head_dim and v_head_dim, or drop the dsa_indexer_* sizes"
        )
    if model.add_bias_linear or model.add_qkv_bias:
        raise SpecError(
            f"{where}: DeepSeek sparse attention requires add_bias_linear and add_qkv_bias "
            "False (Megatron's TransformerConfig: AbsorbedMLASelfAttention takes no linear "
            "bias): turn the biases off"
        )
    if model.is_hybrid:
        raise SpecError(
            f"{where}: DeepSeek sparse attention is expressed on transformer layers only "
            "(hybrid symbol 'D' is not): drop hybrid_layer_pattern"
        )
    rope = model.qk_pos_emb_head_dim or 0
    if model.dsa_indexer_head_dim < rope:  # type: ignore[operator]
        raise SpecError(
            f"{where}: dsa_indexer_head_dim ({model.dsa_indexer_head_dim}) must be at least "
            f"qk_pos_emb_head_dim ({rope}): the indexer rotates the first "
            f"{rope} channels of each head (DSAIndexer._apply_rope)"
        )
    _check_loss(model, where)


def _check_unused(model: DsaFields, where: str) -> None:
    """The DSA-only settings left at their defaults when DSA is off."""
    changed = [
        name
        for name, default in (
            ("dsa_indexer_topk_freq", 1),
            ("dsa_indexer_skip_topk_offset", 0),
            ("dsa_indexer_loss_coeff", 0.0),
            ("dsa_indexer_use_sparse_loss", False),
        )
        if getattr(model, name) != default
    ]
    if changed:
        raise SpecError(
            f"{where}: {', '.join(changed)} apply to DeepSeek sparse attention, which is "
            f"off (no {', '.join(DSA_SIZES)}): set those sizes, or reset {', '.join(changed)}"
        )


def _check_loss(model: DsaFields, where: str) -> None:
    """Index sharing and the indexer loss settings."""
    if model.dsa_indexer_topk_freq < 1 or model.dsa_indexer_skip_topk_offset < 0:
        raise SpecError(
            f"{where}: dsa_indexer_topk_freq ({model.dsa_indexer_topk_freq}) must be >= 1 and "
            f"dsa_indexer_skip_topk_offset ({model.dsa_indexer_skip_topk_offset}) >= 0 "
            "(TransformerConfig asserts both)"
        )
    if model.dsa_indexer_loss_coeff < 0:
        raise SpecError(
            f"{where}: dsa_indexer_loss_coeff ({model.dsa_indexer_loss_coeff}) must be >= 0 "
            "(0 turns the indexer's KL loss off)"
        )
    if model.dsa_indexer_use_sparse_loss and model.dsa_indexer_loss_coeff == 0:
        raise SpecError(
            f"{where}: dsa_indexer_use_sparse_loss selects the form of the indexer loss, "
            "which dsa_indexer_loss_coeff 0 turns off: set a coefficient (GLM-5: 0.001), or "
            "drop dsa_indexer_use_sparse_loss"
        )


EXECUTOR_DSA_RULE = "executor_dsa"
"""Rule id of the executor's and the torch runtime's refusal of DeepSeek sparse attention."""


def executor_dsa_refusal(model: DsaFields) -> str | None:
    """Why paraplan's executor (and the ``torch`` runtime, which prices it) cannot run
    ``model``, or None: it builds no lightning indexer and no sparse attention core. The one
    check both use (`executor.model.check_model_supported`,
    `costmodel.runtimes.torch.runtime`)."""
    if model.dsa_indexer_topk is None:
        return None
    return (
        f"[{EXECUTOR_DSA_RULE}] model {model.name!r} uses DeepSeek sparse attention "
        f"(dsa_indexer_topk {model.dsa_indexer_topk}): the executor builds no lightning "
        "indexer or sparse attention core, and the torch runtime prices that executor: use "
        "--runtime megatron (Megatron-LM --experimental-attention-variant dsa)"
    )


def computes_topk(layer_number: int, topk_freq: int, skip_offset: int) -> bool:
    """True when the layer numbered ``layer_number`` (1-based, Megatron's ``layer_number``)
    runs its own indexer and top-k; False when it reuses an earlier layer's (Megatron-LM
    `is_dsa_skip_topk_layer`)."""
    start = max(skip_offset, 1)
    return max(layer_number - start, 0) % topk_freq == 0


def topk_source_layer(layer_number: int, topk_freq: int, skip_offset: int) -> int:
    """The 1-based layer whose top-k the layer ``layer_number`` uses: itself when it
    computes one (Megatron-LM `source_dsa_compute_layer`)."""
    start = max(skip_offset, 1)
    if layer_number <= start:
        return layer_number
    return layer_number - (layer_number - start) % topk_freq
