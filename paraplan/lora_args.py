"""The LoRA flags of `check`, `estimate` and `plan`: ``--lora-rank`` makes the job a LoRA
fine-tuning (`specs.finetune.LoraSpec`, Megatron-Bridge's ``peft = LoRA(...)``), with
``--lora-alpha`` and ``--lora-targets`` (Bridge's ``alpha`` and ``target_modules``);
`lora_line` is the line the commands print about it."""

from __future__ import annotations

import argparse

from specs.errors import SpecError
from specs.finetune import DEFAULT_LORA_TARGETS, LORA_TARGETS, LoraSpec
from specs.job import TrainingJob

DEFAULT_ALPHA = 32
"""Megatron-Bridge's ``LoRA.alpha`` default."""


def add_lora_args(group: argparse._ArgumentGroup) -> None:
    """``--lora-rank``, ``--lora-alpha`` and ``--lora-targets``, added to the job ``group``."""
    group.add_argument(
        "--lora-rank",
        type=int,
        default=None,
        metavar="N",
        help="LoRA fine-tuning: freeze the model and train rank-N adapters (Megatron-Bridge "
        "LoRA dim; megatron runtime only); default: train every weight",
    )
    group.add_argument(
        "--lora-alpha",
        type=int,
        default=None,
        metavar="A",
        help=f"with --lora-rank: the adapters' alpha (output scaled by A/N; default "
        f"{DEFAULT_ALPHA}, Megatron-Bridge's)",
    )
    group.add_argument(
        "--lora-targets",
        default=None,
        metavar="LIST",
        help="with --lora-rank: comma-separated linear layers that get adapters "
        f"({', '.join(LORA_TARGETS)}; in_proj and out_proj are a hybrid model's Mamba-2 "
        "mixer's; each layer adapts those it holds; default "
        f"{','.join(DEFAULT_LORA_TARGETS)}, Megatron-Bridge's target_modules)",
    )


def lora_from_args(args: argparse.Namespace) -> LoraSpec | None:
    """The `LoraSpec` of the LoRA flags, None without ``--lora-rank``; `SpecError` for
    ``--lora-alpha`` or ``--lora-targets`` given without it."""
    rank = getattr(args, "lora_rank", None)
    alpha, targets = getattr(args, "lora_alpha", None), getattr(args, "lora_targets", None)
    if rank is None:
        given = [
            flag
            for flag, value in (("--lora-alpha", alpha), ("--lora-targets", targets))
            if value is not None
        ]
        if given:
            raise SpecError(
                f"{' and '.join(given)} only apply to a LoRA job: add --lora-rank N, or drop "
                f"{' and '.join(given)}"
            )
        return None
    names = DEFAULT_LORA_TARGETS if targets is None else _target_list(targets)
    return LoraSpec(
        rank=rank,
        alpha=DEFAULT_ALPHA if alpha is None else alpha,
        targets=names,  # type: ignore[arg-type]
    )


def _target_list(text: str) -> tuple[str, ...]:
    """The names of a ``--lora-targets`` list (validated by `LoraSpec`)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def lora_line(job: TrainingJob) -> str | None:
    """``job: LoRA r16 a32 linear_qkv (base frozen, adapters trained)``; None without
    LoRA."""
    if job.lora is None:
        return None
    return (
        f"job: {job.lora.label()} (model weights frozen: no gradients or optimizer state for "
        "them; the adapters train)"
    )
