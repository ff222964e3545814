"""Model and hardware FLOPs of packed sequences (costmodel.flops): the attention core counted
per document, every token-wise term per token of the packed sequence."""

from __future__ import annotations

import pytest

from costmodel.flops import core_attention_forward_flops_per_token
from costmodel.hardware_flops import (
    hardware_flops_per_iteration,
)
from costmodel.iteration_flops import (
    job_model_flops_per_iteration,
    lora_model_flops_per_token,
    model_flops_per_iteration,
)
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

LLAMA = get_preset("llama3-8b")  # 32 layers, 32 heads of 128: q = a·d = 4096


def packed(seq: int, doc: int | None, batch: int = 1, **kw) -> TrainingJob:
    return TrainingJob(seq_length=seq, global_batch_size=batch, packed_document_tokens=doc, **kw)


def test_one_layers_core_over_k_documents_worked_by_hand() -> None:
    # k = 4 documents of L = 2048 in s = 8192: k·L²/2 score pairs, 4·a·d FLOPs each
    # (QKᵀ and P·V, 2·d per pair and head) = 4 · 2048² / 2 · 4 · 4096 = 137438953472.
    per_sequence = core_attention_forward_flops_per_token(LLAMA, 2048) * 8192
    assert per_sequence == 4 * 2048**2 / 2 * 4 * 32 * 128 == 137_438_953_472


def test_model_flops_lose_the_cross_document_core_only() -> None:
    # 3 x 32 layers x 2·q·(L - s) per token x s tokens: 3·32·2·4096·(2048 - 8192)·8192
    # = -39582418599936 (every token-wise term cancels).
    delta = job_model_flops_per_iteration(
        LLAMA, packed(8192, 2048)
    ) - job_model_flops_per_iteration(LLAMA, packed(8192, None))
    assert delta == pytest.approx(-39_582_418_599_936, rel=1e-12)


def test_a_document_as_long_as_the_sequence_is_the_unpacked_count() -> None:
    assert job_model_flops_per_iteration(
        LLAMA, packed(8192, 8192, 16)
    ) == model_flops_per_iteration(LLAMA, 8192, 16)


def test_a_window_rules_inside_a_longer_document() -> None:
    model = get_preset("gpt-oss-120b")  # 128-key window on even layers, 64 heads of 64
    unwindowed = model.replace(sliding_window=None)
    # L = 64 < w: every windowed layer sees its whole document, as an unwindowed one.
    assert job_model_flops_per_iteration(model, packed(4096, 64)) == pytest.approx(
        job_model_flops_per_iteration(unwindowed, packed(4096, 64)), rel=1e-12
    )
    # L = 2048 > w: a windowed layer's keys (128·129/2 + (2048 - 128)·128) / 2048 against
    # L/2 = 1024 of a full layer; 18 windowed layers of 36.
    keys = (128 * 129 / 2 + (2048 - 128) * 128) / 2048
    full = core_attention_forward_flops_per_token(model, 2048)
    delta = job_model_flops_per_iteration(unwindowed, packed(4096, 2048)) - (
        job_model_flops_per_iteration(model, packed(4096, 2048))
    )
    assert delta == pytest.approx(3 * 18 * full * (1 - keys / 1024) * 4096, rel=1e-9)


def test_lora_counts_its_core_per_document() -> None:
    lora = LoraSpec(rank=16)
    job = packed(8192, 1024, 2, lora=lora)
    assert job_model_flops_per_iteration(LLAMA, job) == pytest.approx(
        lora_model_flops_per_token(LLAMA, 1024, lora) * 2 * 8192, rel=1e-12
    )


def test_selective_recompute_reruns_the_document_core() -> None:
    job = packed(8192, 2048, 4)
    plan = ParallelPlan(recompute="selective")
    extra = hardware_flops_per_iteration(LLAMA, job, plan) - job_model_flops_per_iteration(
        LLAMA, job
    )
    # 32 layers x 2·L·q per token x 4·8192 tokens
    assert extra == pytest.approx(32 * 2 * 2048 * 4096 * 4 * 8192, rel=1e-12)
