"""Hardware FLOPs (the HFU convention): the model FLOPs of `costmodel.flops` plus the forward
work activation recompute runs again (`recompute_forward_flops_per_token`), the MTP depths'
checkpoints included (`mtp_recompute_forward_flops_per_token`)."""

from __future__ import annotations

from costmodel.activations import recomputed_layers
from costmodel.flops import (
    attention_layer_count,
    core_attention_forward_flops_per_token,
    layers_forward_flops_per_token,
    lora_forward_flops_per_token,
    mtp_depth_layers_forward,
    mtp_projection_forward_flops_per_token,
)
from costmodel.iteration_flops import job_model_flops_per_iteration
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def recompute_forward_flops_per_token(
    model: ModelSpec, plan: ParallelPlan, seq_length: int, lora: LoraSpec | None = None
) -> float:
    """Extra forward FLOPs per token that activation recompute adds.

    Selective: the core attention of every attention layer runs again (Megatron's default
    `--recompute-modules core_attn`; a hybrid model's ``*`` layers), each MTP depth's
    attention layers included, as the simulator reruns them. Full: the whole
    forward of each recomputed layer (`costmodel.activations.recomputed_layers`; every
    layer for the uniform method, the first N of each chunk for block), with its ``lora``
    adapters, and each MTP depth's checkpoint (`mtp_recompute_forward_flops_per_token`)
    where Megatron-core takes one (`specs.plan.ParallelPlan.checkpoints_mtp_depths`: the
    uniform method; block runs the depths without it). The logits and embedding are never
    recomputed.
    """
    if plan.recompute == "selective":
        core = core_attention_forward_flops_per_token(model, seq_length)
        depth = sum(kind.mixer == "attention" for kind in model.mtp_depth_kinds())
        return (attention_layer_count(model) + model.mtp_num_layers * depth) * core
    if plan.recompute == "full":
        layers = recomputed_layers(model, plan)
        adapters = 0.0 if lora is None else lora_forward_flops_per_token(model, lora, layers)
        checkpointed = plan.checkpoints_mtp_depths
        mtp = mtp_recompute_forward_flops_per_token(model, seq_length) if checkpointed else 0.0
        return layers_forward_flops_per_token(model, layers, seq_length) + adapters + mtp
    return 0.0


def mtp_recompute_forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """Forward FLOPs per token that full recompute reruns of the MTP depths: Megatron-core
    checkpoints each depth's ``_proj_and_transformer_layer`` (``MultiTokenPredictionLayer.
    _checkpointed_forward``, ``megatron/core/transformer/multi_token_prediction.py``), its
    layers, ``eh_proj`` and norms, as the simulator reruns them
    (`costmodel.runtimes.megatron.mtp_costs.MtpDepthCost.projection_forward` and the
    depth's layers); the embedding, output layer and loss run outside it. Counted as
    `mtp_forward_flops_per_token` counts the depth without its logits: its layers by kind
    (`mtp_depth_layers_forward`) and, for a transformer, the "MTP norms and proj" term
    (`mtp_projection_forward_flops_per_token`); 0 without MTP."""
    if not model.mtp_num_layers:
        return 0.0
    per_depth = mtp_depth_layers_forward(model, seq_length)
    if not model.is_hybrid:
        per_depth += mtp_projection_forward_flops_per_token(model)
    return model.mtp_num_layers * per_depth


def hardware_flops_per_iteration(model: ModelSpec, job: TrainingJob, plan: ParallelPlan) -> float:
    """Hardware FLOPs of one iteration (HFU convention): model FLOPs + recompute forwards."""
    extra = recompute_forward_flops_per_token(model, plan, job.attention_span_tokens, job.lora)
    return job_model_flops_per_iteration(model, job) + extra * job.tokens_per_iteration
