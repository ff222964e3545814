"""Rules of a LoRA job (`TrainingJob.lora`) against the model and the plan: what
Megatron-Bridge's adapters need of the tensor-parallel shapes, and the models and plans the
cost model prices LoRA for.

Sources: Megatron-Bridge tag v0.5.0 ``src/megatron/bridge/peft/utils.py``
(``ParallelLinearAdapter`` builds Megatron-core's ``ColumnParallelLinear`` and
``RowParallelLinear``, which split their partitioned dimension with
``megatron.core.utils.divide``, asserting exact division) and ``peft/lora.py`` (expert
linears get ``GroupedExpertLinearAdapter`` or expert-parallel adapters; MLA's projections
are other modules than the targets of `specs.finetune.LORA_TARGETS`). A dense hybrid
model's layers take the targets they hold (`specs.finetune.layer_targets`: a Mamba-2
mixer's in_proj and out_proj, an attention layer's QKV and output projection, an MLP
layer's FC1 and FC2); a MoE hybrid is refused by `lora_not_on_experts`, a model with
gated DeltaNet layers by `lora_not_on_gdn`.
"""

from __future__ import annotations

import dataclasses
import math

from specs.cluster import ClusterSpec
from specs.finetune import LORA_TARGETS, LoraSpec, lora_target_features, model_targets
from specs.gdn_checks import has_gdn
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import degree_choices, multiples_around, rule


@rule
def lora_rank_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Every adapter matrix splits over tp: A of a column-parallel base (QKV, FC1, in_proj)
    over its rank (``ColumnParallelLinear(in, rank)``), B over the base's output
    (``ColumnParallelLinear(rank, out)``), A of a row-parallel base over its input, which
    the base's own rules already divide. Only the targets some layer of the model holds
    are built (`specs.finetune.model_targets`)."""
    lora = job.lora
    if lora is None or plan.tp == 1:
        return None
    bad, split = [], []
    for target in model_targets(model, lora):
        _, fan_out, column = lora_target_features(model, target)
        split += [lora.rank, fan_out] if column else [fan_out]
        if column and lora.rank % plan.tp:
            bad.append(f"{target}: rank ({lora.rank})")
        if fan_out % plan.tp:
            bad.append(f"{target}: out_features ({fan_out})")
    if not bad:
        return None
    options = degree_choices(math.gcd(*split), plan.tp, cluster.num_gpus)
    rank_bad = any(b.endswith(f"rank ({lora.rank})") for b in bad)
    rank_fix = f"rank in {multiples_around(lora.rank, plan.tp)} or " if rank_bad else ""
    return (
        f"LoRA adapters split over tp ({plan.tp}), which must divide {', '.join(bad)} "
        f"(Megatron-core's ColumnParallelLinear divides exactly): try {rank_fix}tp in {options}"
    )


@rule
def lora_not_on_experts(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """LoRA on a MoE model adapts the expert linears (Bridge's grouped or expert-parallel
    adapters), which the cost model does not price."""
    if job.lora is None or not model.is_moe:
        return None
    return (
        f"LoRA on the MoE model {model.name!r} ({model.num_experts} experts) is not priced: "
        "Megatron-Bridge wraps the expert linears with grouped or expert-parallel adapters "
        "that the cost model does not model; fine-tune a dense model, or train every weight "
        "(drop --lora-rank)"
    )


@rule
def lora_not_on_mla(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Multi-latent attention has no fused ``linear_qkv``: its projections are other
    modules, whose adapters are not priced."""
    if job.lora is None or not model.uses_mla:
        return None
    return (
        f"LoRA on the multi-latent-attention model {model.name!r} is not priced: its "
        "projections (linear_q_proj, linear_kv_down_proj, ...) are not the targets "
        "linear_qkv, linear_proj, linear_fc1, linear_fc2; fine-tune a model with standard "
        "attention, or train every weight (drop --lora-rank)"
    )


@rule
def lora_not_on_gdn(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """A gated DeltaNet's in_proj and out_proj adapters (and its delta rule's FLOPs under
    LoRA) are not priced."""
    if job.lora is None or not has_gdn(model):
        return None
    return (
        f"LoRA on {model.name!r}, which has gated DeltaNet (G) layers, is not priced: the "
        "cost model has no adapters of the net's in_proj and out_proj; fine-tune a model "
        "without G layers, or train every weight (drop --lora-rank)"
    )


@rule
def lora_targets_in_model(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Every target names a linear layer some layer of the model holds
    (`specs.finetune.model_targets`): Bridge's ``ModuleMatcher`` matches by module name, so
    a target no layer holds gets no adapter (a transformer has no ``in_proj`` or
    ``out_proj``; a hybrid model without ``*`` layers no ``linear_qkv``)."""
    lora = job.lora
    if lora is None:
        return None
    held = model_targets(model, lora)
    absent = [t for t in lora.targets if t not in held]
    if not absent:
        return None
    present = model_targets(model, _all_targets(lora))
    layers = (
        f"hybrid_layer_pattern {model.hybrid_layer_pattern!r}"
        if model.is_hybrid
        else "transformer layers"
    )
    return (
        f"LoRA targets {', '.join(absent)} are linear layers no layer of {model.name!r} "
        f"holds ({layers}): Megatron-Bridge would build no adapter there; choose "
        f"--lora-targets from {', '.join(present)}"
    )


def _all_targets(lora: LoraSpec) -> LoraSpec:
    """``lora`` with every name of `specs.finetune.LORA_TARGETS` as its targets."""
    return dataclasses.replace(lora, targets=LORA_TARGETS)


@rule
def lora_not_with_megatron_fsdp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Megatron-FSDP's buffers of a model with frozen parameters are not modelled."""
    if job.lora is None or not plan.use_megatron_fsdp:
        return None
    return (
        "LoRA with use_megatron_fsdp (True) is not priced: Megatron-FSDP's sharded buffers "
        "of a model whose base is frozen are not modelled; use the distributed optimizer "
        "(--dist-opt), as Megatron-Bridge's LoRA recipes do"
    )


@rule
def lora_needs_adam(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """The adapters are priced with Adam's state and step only."""
    if job.lora is None or job.optimizer == "adam":
        return None
    return (
        f"LoRA with optimizer ({job.optimizer}) is not priced: Muon's step and sharding of "
        "adapter matrices are not modelled; use --optimizer adam (Megatron-Bridge's LoRA "
        "recipes run Adam)"
    )


LORA_RULES = (
    lora_rank_divisible_by_tp,
    lora_not_on_experts,
    lora_not_on_mla,
    lora_not_on_gdn,
    lora_targets_in_model,
    lora_not_with_megatron_fsdp,
    lora_needs_adam,
)
"""The LoRA rules in check order."""
