"""Parameters one rank holds: per layer, per chunk of layers and per pipeline stage, split
by how the distributed optimizer shards them (dense over dp·cp, routed experts over
expert_dp). The one per-rank parameter count of the cost model: memory
(`costmodel.memory`), the optimizer step and the screens count through here.

Layer placement: chunk j of PP rank r holds layers [(j·p + r)·Lc, (j·p + r + 1)·Lc),
Lc = L/(p·v) (`costmodel.schedules.layer_range`). The first stage also holds the word
embedding (and the learned position table), the last stage the final norm and the output
layer; with tied embeddings and pp > 1 the last stage holds its own copy of the embedding
matrix (Megatron keeps both in sync by an all-reduce). A model chunk that runs MTP depths
and is not virtual stage 0 holds a copy of the word embedding (and of the learned position
table) too, beside its output layer:
Megatron-core's `GPTModel` builds ``self.embedding`` when ``pre_process or mtp_process``
(``megatron/core/models/gpt/gpt_model.py``), and ``finalize_model_grads`` all-reduces its
gradient with the first stage's whenever ``mtp_num_layers`` is set
(`_get_shared_word_embedding_weight`, `shared_word_embedding`). Both use the vocabulary
padded to a multiple of 128·tp.

LoRA jobs (`TrainingJob.lora`): every layer also holds the adapters of the targets it has
(`specs.params.lora_layer_params` by its kind, 1/tp of them per rank) and the model's own parameters
are frozen (`StageParams.frozen`): the optimizer shards and steps, and the gradient buffers
hold, the adapters only (`StageParams.trained_dense`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from costmodel.schedules import ChunkPosition, plan_split, plan_stage_chunks
from specs.errors import SpecError
from specs.finetune import LoraSpec, layer_targets
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.params import (
    LayerParams,
    count_params,
    held_mtp_layers,
    lora_layer_params,
    padded_vocab_size,
)
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds, by how the optimizer shards them."""

    dense: float
    """TP-sharded and replicated parameters (sharded over dp·cp by the distributed optimizer)."""
    expert: float
    """Routed-expert parameters (sharded over expert_dp by the distributed optimizer)."""
    linear: float = 0.0
    """Of ``dense + expert``, the weights (and biases) of the transformer layers' linear
    layers, which Transformer Engine runs: attention projections, MLP or shared experts,
    a latent MoE layer's projections, routed experts (`Fp8WeightStorage`); not norms,
    router, embedding or output layer."""
    adapter: float = 0.0
    """LoRA adapter parameters on the rank: 16-bit matrices of Megatron-core's own linear
    layers (not Transformer Engine's, so never FP8), sharded over dp·cp by the
    distributed optimizer as dense parameters are; 0 without LoRA."""
    frozen: bool = False
    """The model's own parameters (``dense`` and ``expert``) are frozen (a LoRA job): they
    keep their weights but no gradient buffer and no optimizer state."""

    @property
    def total(self) -> float:
        """All parameters on the rank: the model's and the adapters'."""
        return self.dense + self.expert + self.adapter

    @property
    def trained_dense(self) -> float:
        """Trained parameters sharded over dp·cp: the adapters when the base is frozen,
        else the dense parameters."""
        return self.adapter if self.frozen else self.dense + self.adapter

    @property
    def trained_expert(self) -> float:
        """Trained routed-expert parameters (none when the base is frozen)."""
        return 0.0 if self.frozen else self.expert

    @property
    def trained(self) -> float:
        """Every parameter with a gradient and optimizer state."""
        return self.trained_dense + self.trained_expert

    @property
    def frozen_base(self) -> float:
        """Frozen parameters on the rank: the model's own when the base is frozen, else 0."""
        return self.dense + self.expert if self.frozen else 0.0

    @property
    def frozen_linear(self) -> float:
        """Of `frozen_base`, Transformer Engine's linear-layer weights."""
        return self.linear if self.frozen else 0.0

    @property
    def trained_linear(self) -> float:
        """Of the trained parameters, Transformer Engine's linear-layer weights (FP8 or
        NVFP4 parameters where the job stores them so); none when the base is frozen."""
        return 0.0 if self.frozen else self.linear


def stage_params(
    model: ModelSpec, plan: ParallelPlan, pp_rank: int, lora: LoraSpec | None = None
) -> StageParams:
    """Parameters one rank of stage ``pp_rank`` holds (biases split with their matrix),
    with the adapters of ``lora`` (`chunk_params`)."""
    split = plan_split(model, plan)
    return chunk_params(
        model,
        plan,
        split.rank_layers(pp_rank),
        first=pp_rank == 0,
        last=pp_rank == plan.pp - 1,
        mtp_layers=split.rank_mtp_layers(pp_rank),
        lora=lora,
    )


def shared_word_embedding(model: ModelSpec) -> bool:
    """True when, with pp > 1, the last stage holds a copy of the word embedding whose
    gradient the finalize step all-reduces with the first stage's: tied embeddings or
    multi-token prediction (Megatron-core ``finalize_model_grads``,
    `_get_shared_word_embedding_weight`: ``share_embeddings_and_output_weights or
    mtp_num_layers``; `_allreduce_word_embedding_grads` over the embedding group)."""
    return model.tied_embeddings or model.mtp_num_layers > 0


def chunk_weight_layers(model: ModelSpec, at: ChunkPosition) -> int:
    """Layers whose weights one rank holds in the model chunk at ``at``: its decoder layers
    and the layers of each MTP weight set it holds (`specs.params.held_mtp_layers`: one set
    per depth, or one for all depths with ``mtp_repeated_layer``). Megatron trains the MTP
    block like the decoder (`MultiTokenPredictionBlock`,
    ``megatron/core/transformer/multi_token_prediction.py``, built on the last virtual
    pipeline stage): its layers hold weights, main gradients and optimizer state. The one
    layer count of the optimizer step's tensors
    (`costmodel.optimizer_passes.optimizer_step_tensors`), the gradient buckets and
    Megatron-FSDP's unit modules, in the simulator and the screen alike."""
    return len(at.layers) + held_mtp_layers(model, at.mtp_layers)


def outside_tensors(
    model: ModelSpec, plan: ParallelPlan, *, first: bool, last: bool, mtp_layers: int = 0
) -> tuple[str, ...]:
    """Parameter tensors one rank holds in a model chunk outside its transformer layers, by
    Megatron-core parameter name: the word embedding (and the learned position table) when
    the chunk is virtual stage 0 or runs MTP depths (``GPTModel`` builds
    ``self.embedding`` when ``pre_process or mtp_process``, one module for both), the final
    norm and the output layer on the last virtual stage (the output layer is the embedding
    itself when it is tied and one stage holds both, as `chunk_params` counts it), and per
    MTP weight set held (`specs.params.ParamCounts.mtp_weights`) ``eh_proj`` (no bias),
    ``enorm``, ``hnorm`` and ``final_layernorm`` (``MultiTokenPredictionLayer.__init__``,
    ``megatron/core/transformer/multi_token_prediction.py``). A norm is a weight, and a
    bias for LayerNorm. The optimizer step's tensors outside the layers
    (`costmodel.optimizer_passes.optimizer_step_tensors`) and Muon's whole embedding
    tensors (`costmodel.muon_sharding`) count through here."""
    norm = ("weight", "bias") if model.normalization == "layernorm" else ("weight",)
    names: list[str] = []
    if first or mtp_layers:
        names.append("embedding.word_embeddings.weight")
        if model.position_embedding == "learned":
            names.append("embedding.position_embeddings.weight")
    if last:
        names += [f"decoder.final_layernorm.{part}" for part in norm]
        if not model.tied_embeddings or plan.pp > 1:
            names.append("output_layer.weight")
    for index, _ in enumerate(count_params(model).mtp_weights(mtp_layers)):
        names.append(f"mtp.layers.{index}.eh_proj.weight")
        for module in ("enorm", "hnorm", "final_layernorm"):
            names += [f"mtp.layers.{index}.{module}.{part}" for part in norm]
    return tuple(names)


def stage_outside_tensors(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> int:
    """`outside_tensors` of every chunk of stage ``pp_rank``, counted."""
    return sum(
        len(outside_tensors(model, plan, first=at.first, last=at.last, mtp_layers=at.mtp_layers))
        for at in plan_stage_chunks(model, plan, pp_rank)
    )


def stage_weight_layers(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> int:
    """`chunk_weight_layers` summed over the chunks of stage ``pp_rank``."""
    chunks = plan_stage_chunks(model, plan, pp_rank)
    return sum(chunk_weight_layers(model, at) for at in chunks)


def non_unit_params(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> float:
    """Parameters one rank of stage ``pp_rank`` holds outside its transformer layers (and
    the transformer layers of its MTP depths): the word embedding and learned positions on
    the first stage, the final norm and the output layer on the last, each MTP depth's
    projection and norms. Megatron-FSDP's unit modules are the transformer layers
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`); these are the rest."""
    mtp = plan_split(model, plan).rank_mtp_layers(pp_rank)
    outside = chunk_params(
        model, plan, (), first=pp_rank == 0, last=pp_rank == plan.pp - 1, mtp_layers=mtp
    )
    depths = count_params(model).mtp_weights(mtp)
    inside = (layer for depth in depths for layer in depth.layers)
    return outside.dense - sum(_layer_per_rank(model, plan, layer).dense for layer in inside)


def layer_params_per_rank(model: ModelSpec, plan: ParallelPlan, index: int) -> StageParams:
    """Parameters one rank holds of layer ``index``: attention and MLP split over tp (K/V
    replicas kept, `_attention_per_rank`), norms, router, a latent MoE layer's projections
    a DSA layer's indexer and MLA's down projections
    (`specs.params.LayerParams.latent_down_projections`) replicated, routed experts split
    over ep·etp. The one
    per-rank parameter count of the cost model."""
    return _layer_per_rank(model, plan, count_params(model).layers[index])


def _layer_per_rank(model: ModelSpec, plan: ParallelPlan, layer: LayerParams) -> StageParams:
    """`layer_params_per_rank` of one layer's counts."""
    linear = _attention_per_rank(model, layer.attention, plan.tp) + layer.mlp / plan.tp
    linear += layer.latent_projections  # duplicated over tp (`MoELayer.fc1_latent_proj`)
    linear += layer.indexer  # duplicated over tp (`DSAIndexer` linears)
    linear += layer.latent_down_projections  # duplicated over tp (MLA's q_a, kv_a)
    expert = layer.routed_experts / (plan.ep * plan.expert_tp)
    return StageParams(
        dense=linear + layer.norms + layer.router, expert=expert, linear=linear + expert
    )


def chunk_params(
    model: ModelSpec,
    plan: ParallelPlan,
    layers: Iterable[int],
    *,
    first: bool,
    last: bool,
    mtp_layers: int = 0,
    lora: LoraSpec | None = None,
) -> StageParams:
    """Parameters one rank holds of ``layers``, plus the word embedding (and learned
    positions) when ``first`` (virtual stage 0) and the final norm and the output layer when
    ``last`` (the last virtual stage; the output layer is the embedding itself when it is
    tied and one stage holds both), plus ``mtp_layers`` multi-token-prediction depths
    (`specs.params.MtpParams`: the layers split like the others, the projection over tp,
    the norms replicated; repeated MTP weights once, `specs.params.ParamCounts.mtp_weights`).
    With ``lora`` each of those layers adds the adapters of its kind over tp
    (`specs.params.lora_layer_params`; an MTP depth's layers take the kinds of
    `specs.model.ModelSpec.mtp_depth_kinds`) and the rest is `StageParams.frozen`."""
    counts = count_params(model)
    dense = expert = linear = 0.0
    weights = counts.mtp_weights(mtp_layers)
    layers = tuple(layers)
    held = [counts.layers[index] for index in layers]
    held += [layer for depth in weights for layer in depth.layers]
    for layer_counts in held:
        layer = _layer_per_rank(model, plan, layer_counts)
        dense += layer.dense
        expert += layer.expert
        linear += layer.linear
    for depth in weights:
        dense += depth.projection / plan.tp + depth.norms
    matrix = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
    if first:
        dense += matrix + (counts.embedding - model.vocab_size * model.hidden_size)
    if last:
        dense += counts.final_norm
        if not model.tied_embeddings or plan.pp > 1:
            dense += matrix
    if mtp_layers and not first:  # the MTP depths' own embedding (module docstring)
        dense += matrix + (counts.embedding - model.vocab_size * model.hidden_size)
    if lora is None:
        return StageParams(dense=dense, expert=expert, linear=linear)
    held_kinds = _held_kinds(model, layers, mtp_layers)
    adapter = sum(lora_layer_params(model, lora, kind) for kind in held_kinds) / plan.tp
    return StageParams(dense=dense, expert=expert, linear=linear, adapter=adapter, frozen=True)


def _held_kinds(model: ModelSpec, layers: Iterable[int], mtp_layers: int) -> list[LayerKind]:
    """Kinds of the layers whose weights a rank holds: ``layers`` and the layers of the MTP
    weight sets of ``mtp_layers`` depths (`specs.params.ParamCounts.mtp_weights`; an MTP
    depth's layers take the kinds of `specs.model.ModelSpec.mtp_depth_kinds`)."""
    kinds, depth_kinds = model.layer_kinds(), model.mtp_depth_kinds()
    held = [kinds[index] for index in layers]
    for depth in count_params(model).mtp_weights(mtp_layers):
        held += depth_kinds[: len(depth.layers)]
    return held


def stage_lora_adapters(model: ModelSpec, plan: ParallelPlan, pp_rank: int, lora: LoraSpec) -> int:
    """LoRA adapters (an A and a B matrix each) one rank of stage ``pp_rank`` holds: the
    targets each of its layers holds by kind (`specs.finetune.layer_targets`), its MTP
    weight sets' layers included; the optimizer step's tensor count of a LoRA job
    (`costmodel.optimizer_passes.optimizer_step_tensors`), in the simulator and the screen
    alike."""
    return sum(
        len(layer_targets(lora, kind))
        for at in plan_stage_chunks(model, plan, pp_rank)
        for kind in _held_kinds(model, at.layers, at.mtp_layers)
    )


def position_params(
    model: ModelSpec, plan: ParallelPlan, at: ChunkPosition, lora: LoraSpec | None = None
) -> StageParams:
    """`chunk_params` of the model chunk at ``at`` (its layers, embedding or output layer,
    and MTP layers), with ``lora``'s adapters."""
    return chunk_params(
        model,
        plan,
        at.layers,
        first=at.first,
        last=at.last,
        mtp_layers=at.mtp_layers,
        lora=lora,
    )


def _attention_per_rank(model: ModelSpec, attention: int, tp: int) -> float:
    """Attention parameters on one TP rank. K/V projections split over min(tp, g) ranks:
    with tp > g (Megatron allows tp % g == 0) each rank holds a replica of one K/V head."""
    if model.uses_mla:
        return attention / tp
    g = model.query_groups
    bias = model.add_bias_linear or model.add_qkv_bias
    key_value = 2 * g * model.head_dim * (model.hidden_size + (1 if bias else 0))
    return (attention - key_value) / tp + key_value / min(tp, g)


def stage_layer_indices(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> tuple[int, ...]:
    """Layers of every chunk of stage ``pp_rank``, in chunk order."""
    return plan_split(model, plan).rank_layers(pp_rank)


def optimizer_shards(model: ModelSpec, plan: ParallelPlan) -> tuple[int, int]:
    """(dense, expert) ranks the optimizer state is sharded over: (dp·cp, expert_dp) with
    the distributed optimizer, (1, 1) without."""
    if not plan.distributed_optimizer:
        return 1, 1
    expert = plan.expert_dp
    if model.is_moe and expert < 1:
        raise SpecError(
            f"expert_dp is not whole: world ({plan.world_size}) must be divisible by "
            f"etp ({plan.expert_tp}) * ep ({plan.ep}) * pp ({plan.pp}); change ep or etp"
        )
    return plan.dp * plan.cp, max(expert, 1)
