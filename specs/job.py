"""`TrainingJob`: what one training iteration processes and in which precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_optional_positive, require_positive
from specs.finetune import LoraSpec

Precision = Literal["bf16", "fp8", "nvfp4", "fp32"]
Optimizer = Literal["adam", "muon", "dist_muon"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingJob:
    """Sequence length, batch, precision and optimizer of a training run, and whether it
    fine-tunes LoRA adapters on a frozen model (`lora`)."""

    seq_length: int
    """Tokens per sequence (`--seq-length`)."""
    global_batch_size: int
    """Sequences per iteration over the whole job (`--global-batch-size`)."""
    precision: Precision = "bf16"
    """Compute precision: `bf16` mixed precision (fp32 master weights and gradients), `fp8`
    GEMMs on top of bf16, `nvfp4` GEMMs on top of bf16 (Transformer Engine's
    ``NVFP4BlockScaling``: E2M1 values with an FP8 E4M3 scale per 16 elements and a
    per-tensor fp32 scale; Megatron-core ``--fp4-format e2m1 --fp4-recipe nvfp4``; Blackwell
    only), or plain `fp32` (CPU runs)."""
    optimizer: Optimizer = "adam"
    """Megatron-LM ``--optimizer``: ``adam`` (two fp32 moments per parameter), ``muon``
    (Megatron-core's Muon on the 2-D weights, Adam on the rest, every parameter stepped on
    every rank) or ``dist_muon`` (the same dealt out layer-wise over the data-parallel
    ranks); `costmodel.optimizer_muon`."""
    token_budget: int | None = None
    """Total training tokens, for time and cost estimates; None when not sizing."""
    lora: LoraSpec | None = None
    """LoRA fine-tuning (`specs.finetune.LoraSpec`, Megatron-Bridge's ``peft`` config): the
    model's own parameters are frozen and only the adapters train; None (the default)
    trains every parameter."""
    packed_document_tokens: int | None = None
    """Sequence packing (THD layout): the length in tokens of the documents packed into one
    sequence, as attention sees them, Σ Lᵢ² / Σ Lᵢ over the documents of a packed sequence
    (k documents of L tokens each: L). Megatron-core attends causally within each document
    (``PackedSeqParams.cu_seqlens_q``, Transformer Engine ``DotProductAttention`` with
    ``qkv_format="thd"``), so the attention core runs Σ Lᵢ²/2 score pairs per packed
    sequence instead of s²/2; every token-wise part is unchanged. None (the default): each
    sequence is one causal document of ``seq_length`` tokens."""

    def __post_init__(self) -> None:
        require_positive(self, "seq_length", "global_batch_size")
        require_optional_positive(self, "token_budget", "packed_document_tokens")
        self._check_packing()
        require_choice(self, "precision", Precision)
        require_choice(self, "optimizer", Optimizer)
        if self.lora is not None and not isinstance(self.lora, LoraSpec):
            raise SpecError(
                f"TrainingJob.lora must be a LoraSpec or None, got {type(self.lora).__name__}; "
                "build it with specs.finetune.LoraSpec(rank=...)"
            )

    def _check_packing(self) -> None:
        doc = self.packed_document_tokens
        if doc is not None and doc > self.seq_length:
            raise SpecError(
                f"[packed_document_tokens] TrainingJob.packed_document_tokens ({doc}) exceeds "
                f"seq_length ({self.seq_length}): a packed document fits in its sequence; pass "
                "a length <= seq_length, or None for unpacked sequences"
            )

    @property
    def attention_span_tokens(self) -> int:
        """Tokens of one causal attention span: the packed document length
        (`packed_document_tokens`), else the whole sequence. The attention core's FLOPs,
        its kernel's rate and its context-parallel steps read this length; token counts
        read `seq_length`."""
        if self.packed_document_tokens is None:
            return self.seq_length
        return self.packed_document_tokens

    @property
    def tokens_per_iteration(self) -> int:
        """Tokens processed by one iteration: global batch x sequence length."""
        return self.global_batch_size * self.seq_length
