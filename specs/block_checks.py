"""The layer block of a `specs.model.ModelSpec` (``ModelSpec.layer_block``): the sequential
block of Megatron-LM, or the parallel attention+MLP block of GPT-J, GPT-NeoX, PaLM and
Falcon, with its model rules (`check_layer_block`) and why paraplan's executor refuses it
(`executor_block_refusal`).

The parallel block computes ``x + attn(ln1(x)) + mlp(ln2(x))``: GPT-NeoX
``ParallelTransformerLayer.forward`` under ``gpt_j_residual`` (EleutherAI/gpt-neox
``megatron/model/transformer.py``). ``parallel`` keeps two norms over the same input
(``input_layernorm`` and ``post_attention_layernorm``, GPT-NeoX-20B's untied pair);
``parallel_shared_norm`` runs one norm whose output feeds both branches (``gpt_j_tied``;
GPT-J and PaLM). The attention and MLP row-parallel GEMMs are built with
``parallel_output=True`` and leave their outputs unreduced; the branches' sum takes one
tensor-parallel reduction (``reduce_from_model_parallel_region``, or
``reduce_scatter_to_sequence_parallel_region`` with sequence parallelism) before the
residual add.
"""

from __future__ import annotations

from typing import Literal, Protocol

from specs.errors import SpecError

LayerBlock = Literal["sequential", "parallel", "parallel_shared_norm"]
"""How a transformer layer joins its attention and MLP: ``sequential`` (Megatron-LM,
``x + attn(ln1(x))`` then ``+ mlp(ln2(.))``), ``parallel`` (two norms of the layer input,
GPT-NeoX-20B) or ``parallel_shared_norm`` (one norm for both branches, GPT-J, PaLM)."""

BLOCK_RULE = "parallel_block_needs_dense_attention_layers"
"""Rule id of `check_layer_block`."""
EXECUTOR_BLOCK_RULE = "parallel_block_not_in_executor"
"""Rule id of `executor_block_refusal`."""


class BlockFields(Protocol):
    """The `specs.model.ModelSpec` fields these checks read (a protocol, so that this module,
    which `specs.model` imports, does not import it back)."""

    @property
    def name(self) -> str: ...
    @property
    def layer_block(self) -> LayerBlock: ...
    @property
    def num_experts(self) -> int: ...
    @property
    def hybrid_layer_pattern(self) -> str | None: ...


def is_parallel_block(layer_block: LayerBlock) -> bool:
    """True for either parallel attention+MLP block."""
    return layer_block != "sequential"


def block_norms(layer_block: LayerBlock) -> int:
    """Pre-norms of one transformer layer: one for ``parallel_shared_norm``, two otherwise
    (the sequential block's two, or the parallel block's untied pair)."""
    return 1 if layer_block == "parallel_shared_norm" else 2


def check_layer_block(model: BlockFields) -> None:
    """`SpecError` (rule, values, fix) for a parallel block on layers paraplan does not price
    it for: MoE layers (GPT-NeoX's dropless MoE reduces its own output, so the block's
    single reduction does not hold) and a hybrid pattern (its layers hold one part each)."""
    if not is_parallel_block(model.layer_block):
        return
    where = f"[{BLOCK_RULE}] ModelSpec {model.name!r}: layer_block ({model.layer_block!r})"
    if model.num_experts:
        raise SpecError(
            f"{where} with num_experts ({model.num_experts}): the parallel block is priced "
            "for dense attention+MLP layers only; set layer_block='sequential' or "
            "num_experts=0"
        )
    if model.hybrid_layer_pattern is not None:
        raise SpecError(
            f"{where} with hybrid_layer_pattern ({model.hybrid_layer_pattern!r}): a hybrid "
            "layer holds one part, not attention and an MLP side by side; set "
            "layer_block='sequential'"
        )


def executor_block_refusal(model: BlockFields) -> str | None:
    """Why paraplan's executor (and the ``torch`` runtime, which prices it) cannot run
    ``model``, or None: its decoder layer is the sequential block."""
    if not is_parallel_block(model.layer_block):
        return None
    return (
        f"[{EXECUTOR_BLOCK_RULE}] model {model.name!r} sets layer_block "
        f"({model.layer_block!r}): the executor's decoder layer is the sequential block, "
        "and the torch runtime prices that executor: use --runtime megatron"
    )


EXPORT_BLOCK_RULE = "parallel_block_not_exported"
"""Rule id of `export_block_refusal`."""


def export_block_refusal(model: BlockFields, target: str) -> str | None:
    """Why a plan of ``model`` exports to no ``target`` framework, or None: Megatron-LM's
    `TransformerLayer` (``megatron/core/transformer/transformer_layer.py``) and
    torchtitan's decoders add attention and MLP in sequence, with no parallel block."""
    if not is_parallel_block(model.layer_block):
        return None
    return (
        f"[{EXPORT_BLOCK_RULE}] model {model.name!r} sets layer_block "
        f"({model.layer_block!r}): {target} has no parallel attention+MLP block (GPT-NeoX's "
        "gpt_j_residual runs it); export a model with layer_block='sequential'"
    )
