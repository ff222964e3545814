"""Megatron-LM's own memory estimator (``theoretical_memory_usage.py``, stage 0 only), for
comparison with `costmodel.memory.memory_per_stage`; where the two deliberately differ is
listed in `costmodel.memory`'s module docstring."""

from __future__ import annotations

from specs.attention_params import attention_params
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import ParamCounts, count_params, norm_params, padded_vocab_size
from specs.plan import ParallelPlan


def megatron_theoretical_memory(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan
) -> tuple[float, float]:
    """(weight_and_optimizer_bytes, activation_bytes) of pipeline stage 0 as Megatron-LM's
    `report_theoretical_memory` computes them (megatron-facts.md §2).

    Parameters ignore biases; bf16 mixed precision is assumed whatever the job's precision
    (18 or 6 + 12/d bytes per parameter, d = dp for dense and expert_dp for expert
    parameters). Activations use the SP + selective formula when both are on, else the
    formula without SP. MLA attention uses `specs.params` counts without biases.
    """
    weights_and_optimizer = _megatron_weight_and_optimizer_bytes(model, plan)
    return weights_and_optimizer, _megatron_activation_bytes(model, job, plan)


def _megatron_param_totals(model: ModelSpec, counts: ParamCounts) -> tuple[float, float, float]:
    """(TP-sharded, replicated, expert) parameters of all layers, biases ignored."""
    h = model.hidden_size
    gated = 1.5 if model.activation == "swiglu" else 1.0
    if model.uses_mla:
        attention = float(
            attention_params(model.replace(add_bias_linear=False, add_qkv_bias=False))
        )
    else:
        q = model.head_dim * model.num_attention_heads
        attention = 2 * h * q * (1 + model.query_groups / model.num_attention_heads)
    sharded = replicated = expert = 0.0
    for layer in counts.layers:
        sharded += attention
        replicated += layer.norms + layer.indexer
        if layer.is_moe:
            sharded += 2 * h * model.moe_shared_expert_size * gated
            h_r = model.expert_hidden_size
            expert += 2 * h_r * model.expert_ffn_hidden_size * model.num_experts * gated
            replicated += h * model.num_experts + 2 * h * (model.moe_latent_size or 0)
        else:
            sharded += 2 * h * model.ffn_hidden_size * gated
    return sharded, replicated + norm_params(model, h), expert


def _megatron_weight_and_optimizer_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Megatron's `compute_weight_and_optimizer_memory` for the most loaded shard (stage 0)."""
    sharded, replicated, expert = _megatron_param_totals(model, count_params(model))
    p, t = plan.pp, plan.tp
    embedding = model.hidden_size * padded_vocab_size(model.vocab_size, t)
    dense = (sharded / p + embedding) / t + replicated / p
    if not model.tied_embeddings and p == 1:
        dense += embedding / t
    expert_shard = expert / p / (plan.expert_tp * plan.ep)
    if not plan.distributed_optimizer:
        return 18 * (dense + expert_shard)
    expert_dp = max(plan.expert_dp, 1)
    return (6 + 12 / plan.dp) * dense + (6 + 12 / expert_dp) * expert_shard


def _megatron_activation_bytes(model: ModelSpec, job: TrainingJob, plan: ParallelPlan) -> float:
    """Megatron's `compute_activation_memory` (SP + selective) or its `_without_sp` variant."""
    s, b, h = job.seq_length, plan.micro_batch_size, model.hidden_size
    p, t, v = plan.pp, plan.tp, plan.vpp
    vocab = padded_vocab_size(model.vocab_size, t)
    m = plan.num_microbatches(job.global_batch_size)
    with_sp = plan.sequence_parallel and plan.recompute == "selective"
    per_layer = s * b * h * ((18 + 4 * model.ffn_hidden_size / h) if with_sp else (10 + 24 / t))
    total = per_layer * model.num_layers + 8 * s * b * p + s * b * h * p
    if v > 1:
        total *= 1 + (p - 1) / (p * v)
    elif p > 1:
        total *= min(1.0, m / p)
    if with_sp:
        if p == 1:
            total += 4 * s * b * h * (1 + vocab / h)
        return total / t
    if p == 1:
        total += 2 * (s * b * vocab / t + s * b * h)
    return total * 1.05
