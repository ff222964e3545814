"""Activation bytes of the vocabulary ends of a model chunk, per microbatch on one rank:
what the word embedding keeps (token ids, dropout mask; `embedding_microbatch_bytes`) and
what the final norm, the output layer and the loss keep (`output_layer_bytes`), by the
loss's cross-entropy implementation (`logits_element_bytes`). The pipeline stage's sums are
`costmodel.activations`'s; each multi-token-prediction depth runs the same embedding,
final norm, output layer and loss again (`costmodel.mtp_activations`).

Units: bytes per rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from costmodel.activation_shard import activation_shard
from costmodel.compute import FP32_BYTES
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import padded_vocab_size
from specs.plan import ParallelPlan

CrossEntropyFusion = Literal["unfused", "native", "te", "te_fp32_grad"]
CROSS_ENTROPY_FUSIONS: tuple[CrossEntropyFusion, ...] = ("unfused", "native", "te", "te_fp32_grad")
"""Cross-entropy implementations of the loss (`logits_element_bytes`), Megatron-core's
default first."""

TOKEN_ID_BYTES = 8
"""Token ids are int64 (Megatron's estimator: 8·s·b for the embedding input)."""


def logits_element_bytes(fusion: CrossEntropyFusion, element_bytes: int) -> tuple[int, int]:
    """(kept, transient) bytes per logits element of one microbatch under the loss's
    cross-entropy implementation ``fusion``, for logits of ``element_bytes`` (the output
    layer's dtype). Kept: what the loss saves for its backward, per in-flight microbatch.
    Transient: what exists beside it only while one microbatch's loss runs (forward or
    backward), counted once per stage.

    - ``unfused`` (``tensor_parallel.vocab_parallel_cross_entropy``, Megatron-core's default
      ``cross_entropy_loss_fusion=False``) and ``native`` (``fused_vocab_parallel_cross_
      entropy``): ``calculate_logits_max`` casts the logits to fp32 (``.float()``, a copy
      unless they are fp32), exp and the softmax division run in place on that copy, which
      is saved (``ctx.save_for_backward(exp_logits, ...)``); the backward writes the
      gradient into it and casts it back to the logits' dtype. Kept 4; transient: the
      logits' own storage beside the fp32 copy (0 for fp32 logits). Sources:
      NVIDIA/Megatron-LM ``megatron/core/tensor_parallel/cross_entropy.py`` and
      ``megatron/core/fusions/fused_cross_entropy.py``.
    - ``te`` (Transformer Engine ``parallel_cross_entropy``, v2.2 to v2.17): the Triton
      kernel writes the gradient into the logits' own storage and saves that tensor
      (``cross_entropy_forward`` returns ``_input``), so no fp32 copy exists. Kept: the
      logits' element size; no transient. Source: NVIDIA/TransformerEngine
      ``transformer_engine/pytorch/triton/cross_entropy.py`` at v2.17.
    - ``te_fp32_grad`` (Transformer Engine from v2.18, commit 01bbe3eea "Fix the numerical
      issue with the Fused CE loss"): the gradient goes to a new fp32 buffer
      (``torch.empty_like(_input, dtype=torch.float32)``), which is saved. Kept 4;
      transient: the logits, alive while that buffer is written.
    """
    if fusion == "te":
        return element_bytes, 0
    if fusion == "te_fp32_grad":
        return FP32_BYTES, element_bytes
    if fusion in ("unfused", "native"):
        return FP32_BYTES, 0 if element_bytes == FP32_BYTES else element_bytes
    raise SpecError(
        f"cross-entropy fusion must be one of {', '.join(CROSS_ENTROPY_FUSIONS)}, got "
        f"{fusion!r}; te for Transformer Engine's parallel_cross_entropy"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputBytes:
    """What the final norm, the output layer and the loss keep for one microbatch."""

    final_norm_input: float
    """The final norm's input, [s/cp, b, h] (/tp with SP)."""
    output_layer_input: float
    """The output layer's input, the final norm's output (none when it is frozen)."""
    logits: float
    """What the loss saves of the logits (`logits_element_bytes`' kept part)."""
    transient: float
    """Logits bytes that exist only while one microbatch's loss runs, beside ``logits``."""

    @property
    def kept(self) -> float:
        """Everything kept per in-flight microbatch."""
        return self.final_norm_input + self.output_layer_input + self.logits


def output_layer_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    cross_entropy: CrossEntropyFusion = "unfused",
) -> OutputBytes:
    """The bytes of the final norm, the output layer and the loss for one microbatch on the
    last stage: the final-norm input, the output-layer input and what the loss saves of the
    logits, and the logits bytes that exist only while one microbatch's loss runs
    (`logits_element_bytes`). The logits are in the activation dtype (Megatron-core's output
    layer is a bf16 ``ColumnParallelLinear``, never FP8), over the padded vocabulary split
    over TP. A LoRA job's frozen output layer keeps no input (Megatron-core's
    ``linear_with_frozen_weight`` saves the weight alone, ``tensor_parallel/layers.py``)."""
    x = activation_shard(job, plan)
    vocab = padded_vocab_size(model.vocab_size, plan.tp)
    hidden = x.element_bytes * x.tokens * model.hidden_size / x.sp
    logits = x.tokens * vocab / x.tp
    kept, transient = logits_element_bytes(cross_entropy, x.element_bytes)
    return OutputBytes(
        final_norm_input=hidden,
        output_layer_input=0.0 if job.lora is not None else hidden,
        logits=kept * logits,
        transient=transient * logits,
    )


def output_microbatch_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    cross_entropy: CrossEntropyFusion = "unfused",
) -> tuple[float, float]:
    """(kept, transient) of `output_layer_bytes`: what is kept per in-flight microbatch, and
    what exists only while one microbatch's loss runs."""
    out = output_layer_bytes(model, job, plan, cross_entropy)
    return out.kept, out.transient


def embedding_microbatch_bytes(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, dropout: bool = True
) -> float:
    """Token ids (int64, the indices ``F.embedding`` saves) and the embedding dropout mask
    (with hidden dropout) of one microbatch."""
    x = activation_shard(job, plan, dropout)
    return TOKEN_ID_BYTES * x.tokens + x.mask_bytes * x.tokens * model.hidden_size / x.sp
