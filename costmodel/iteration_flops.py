"""Model FLOPs of a training iteration (MFU convention), a LoRA job's count and the SC21
paper formula, from the per-token counts of `costmodel.flops`.

LoRA jobs (`TrainingJob.lora`) compute no weight gradient of the frozen GEMMs: the model
FLOPs are Megatron-Bridge's LoRA count (``training/utils/flop_utils.py``, tag v0.5.0: the
frozen GEMMs at 2/3 of 3 x forward, the attention core at 3 x) plus the adapters' GEMMs at
3 x forward, which Bridge leaves out (`lora_model_flops_per_token`). A hybrid model's
Mamba-2 SSD scan term (7·d·N per token) has no weight and counts at 3 x as the attention
core; its in_proj and out_proj are frozen GEMMs. Each layer counts the adapters of the
targets it holds (`specs.finetune.layer_targets`).
"""

from __future__ import annotations

from costmodel.flops import (
    BACKWARD_FORWARD_RATIO,
    FORWARD_BACKWARD_FACTOR,
    core_attention_forward_flops_per_token,
    forward_flops_per_token,
    layer_core_attention_forward_flops_per_token,
    lora_forward_flops_per_token,
    require_seq_length,
    ssd_scan_forward_flops_per_token,
)
from specs.errors import SpecError
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.model import ModelSpec


def _mtp_weightless_forward(model: ModelSpec, seq_length: int) -> float:
    """Forward FLOPs per token of the MTP depths' terms without a weight (attention core,
    SSD scan), which a LoRA count takes at 3 x forward (module docstring)."""
    per_depth = 0.0
    for kind in model.mtp_depth_kinds():
        if kind.mixer == "attention":
            per_depth += core_attention_forward_flops_per_token(model, seq_length)
        elif kind.mixer == "mamba":
            per_depth += ssd_scan_forward_flops_per_token(model)
    return model.mtp_num_layers * per_depth


def mamba_scan_forward_flops_per_token(model: ModelSpec) -> float:
    """The SSD scan term of every Mamba-2 layer of ``model`` per token
    (`ssd_scan_forward_flops_per_token`); 0 for a transformer."""
    mamba = sum(kind.mixer == "mamba" for kind in model.layer_kinds())
    return mamba * ssd_scan_forward_flops_per_token(model)


def lora_model_flops_per_token(model: ModelSpec, seq_length: int, lora: LoraSpec) -> float:
    """Model FLOPs per token of a LoRA iteration: the frozen GEMMs (projections, MLP,
    logits) forward and input gradient, 2 x forward; the attention core, a hybrid model's
    SSD scans and the adapters forward, input and weight gradient, 3 x forward (module
    docstring)."""
    core = sum(
        layer_core_attention_forward_flops_per_token(model, i, seq_length)
        for i in range(model.num_layers)
    )
    core += mamba_scan_forward_flops_per_token(model) + _mtp_weightless_forward(model, seq_length)
    frozen = forward_flops_per_token(model, seq_length) - core
    adapters = lora_forward_flops_per_token(model, lora, range(model.num_layers))
    return BACKWARD_FORWARD_RATIO * frozen + FORWARD_BACKWARD_FACTOR * (core + adapters)


def model_flops_per_iteration(
    model: ModelSpec,
    seq_length: int,
    global_batch_size: int,
    lora: LoraSpec | None = None,
    *,
    document_tokens: int | None = None,
) -> float:
    """Model FLOPs of one iteration over the whole job (MFU convention, no recompute).

    3 x forward x B·s tokens, as Megatron-LM `num_floating_point_operations` with
    fixed-length sequences. Example: a Llama-3-8B shape at s = 8192 is 4.216e14 FLOPs per
    sequence (megatron-facts.md §1.3). With ``lora`` (a LoRA job),
    `lora_model_flops_per_token` x B·s.

    ``document_tokens`` (packed sequences, `specs.job.TrainingJob.packed_document_tokens`)
    is the length the attention core counts per token in place of s: Megatron-Bridge's
    count (``training/utils/flop_utils.py``, tag v0.6.0: ``core_attn_seq_factor`` =
    Σ sᵢ² / Σ sᵢ over the packed documents); Megatron-LM's ``num_floating_point_operations``
    counts s whatever the packing.
    """
    require_seq_length(seq_length)
    _require_batch(global_batch_size)
    tokens = seq_length * global_batch_size
    span = seq_length if document_tokens is None else document_tokens
    if lora is not None:
        return lora_model_flops_per_token(model, span, lora) * tokens
    return FORWARD_BACKWARD_FACTOR * forward_flops_per_token(model, span) * tokens


def job_model_flops_per_iteration(model: ModelSpec, job: TrainingJob) -> float:
    """`model_flops_per_iteration` of ``job``: its tokens, its LoRA and its packing."""
    return model_flops_per_iteration(
        model,
        job.seq_length,
        job.global_batch_size,
        job.lora,
        document_tokens=job.packed_document_tokens,
    )


def sc21_flops_per_iteration(model: ModelSpec, seq_length: int, global_batch_size: int) -> float:
    """SC21 Eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).

    Narayanan et al. 2021 (arXiv 2104.04473), for a GELU multi-head model with F = 4h. It
    counts full recompute (4 forward-equivalents per layer) and non-causal attention, so it
    is a hardware-FLOP count; use it only to compare with the paper's published numbers.
    V is the model's vocabulary as given (the paper's 51200 is already padded).
    """
    require_seq_length(seq_length)
    _require_batch(global_batch_size)
    h, layers, s = model.hidden_size, model.num_layers, seq_length
    correction = 1 + s / (6 * h) + model.vocab_size / (16 * layers * h)
    return 96 * global_batch_size * s * layers * h * h * correction


def _require_batch(global_batch_size: int) -> None:
    if global_batch_size < 1:
        raise SpecError(
            f"global_batch_size must be >= 1, got {global_batch_size}; pass sequences per iteration"
        )
