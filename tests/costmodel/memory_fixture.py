"""Shared inputs of the memory tests: Korthikanti's multi-head GPT shape (`mha_gpt`) and
the memory of a plan's first pipeline stage without a framework allowance (`stage0`)."""

from __future__ import annotations

from costmodel.memory import StageMemory, memory_per_stage
from costmodel.memory_allowances import NO_ALLOWANCE
from specs import ModelSpec, ParallelPlan, TrainingJob


def mha_gpt(num_layers: int = 8, hidden: int = 1024, **changes: object) -> ModelSpec:
    """Korthikanti's shape: multi-head attention, GELU, F = 4h, no biases, no position table."""
    spec = ModelSpec(
        name="mha-gpt",
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=16,
        ffn_hidden_size=4 * hidden,
        vocab_size=50257,
        activation="gelu",
        normalization="layernorm",
        tied_embeddings=True,
    )
    return spec.replace(**changes) if changes else spec


def stage0(model: ModelSpec, job: TrainingJob, plan: ParallelPlan) -> StageMemory:
    return memory_per_stage(model, job, plan, allowance=NO_ALLOWANCE)[0]
