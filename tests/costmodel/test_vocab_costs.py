"""Per-microbatch costs of the word embedding and the output layer
(costmodel.runtimes.megatron.vocab_costs)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import compute as ops
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.runtimes.megatron.vocab_costs import embedding_cost, logits_cost
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.params import padded_vocab_size
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-70b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)


def test_embedding_and_logits():
    plan = ParallelPlan(tp=8, sequence_parallel=True)
    emb_f, emb_b = embedding_cost(LLAMA, JOB, plan, H100)
    log_f, log_b = logits_cost(LLAMA, JOB, plan, H100)
    assert emb_f.tp_s > 0 and emb_b.tp_s > 0  # reduce-scatter out, all-gather back
    assert log_b.compute_s > log_f.compute_s > emb_f.compute_s
    assert log_f.tp_s > 0 and log_b.tp_s > 0


def test_embedding_backward_builds_the_dense_gradient_of_the_rank_vocab_slice():
    plan = ParallelPlan(tp=8, sequence_parallel=True)
    _, emb_b = embedding_cost(LLAMA, JOB, plan, H100)
    tokens = JOB.seq_length * plan.micro_batch_size
    rows = padded_vocab_size(LLAMA.vocab_size, 8) / 8
    scatter = ops.embedding_time_s(H100, tokens, LLAMA.hidden_size, 2, "backward")
    dense = ops.embedding_weight_grad_time_s(H100, rows, LLAMA.hidden_size, 2)
    assert emb_b.compute_s == pytest.approx(scatter + dense, rel=1e-12)
    bf16_grads = dataclasses.replace(DEFAULT_OPTIONS, main_grad_bytes=2)
    _, lighter = embedding_cost(LLAMA, JOB, plan, H100, options=bf16_grads)
    assert lighter.compute_s < emb_b.compute_s
