"""Activation memory per rank (costmodel.activations, costmodel.layer_activations):
Korthikanti et al. 2022 Table 2, Megatron's estimator, and the places where the model
deliberately differs from it.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.layer_activations import layer_activations
from costmodel.megatron_estimator import megatron_theoretical_memory
from specs import ParallelPlan, TrainingJob
from specs.presets import get_preset
from tests.costmodel.memory_fixture import mha_gpt, stage0

# ---- activations vs Korthikanti et al. 2022 Table 2 and Megatron's estimator -----------------


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_layer_activations_table2(tp: int) -> None:
    # Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, MHA with F = 4h, bf16:
    # TP + SP + selective: 34·s·b·h/t; TP + selective without SP: s·b·h·(10 + 24/t);
    # full recompute keeps the layer input, 2·s·b·h (/t with SP).
    model = mha_gpt()
    s, b, h = 2048, 2, 1024
    job = TrainingJob(seq_length=s, global_batch_size=b)
    sp = ParallelPlan(tp=tp, micro_batch_size=b, sequence_parallel=tp > 1)
    no_sp = sp.replace(sequence_parallel=False)
    assert layer_activations(model, job, sp, 3).selective_bytes == pytest.approx(
        34 * s * b * h / tp
    )
    assert layer_activations(model, job, no_sp, 3).selective_bytes == pytest.approx(
        s * b * h * (10 + 24 / tp)
    )
    assert layer_activations(model, job, sp, 3).input_bytes == pytest.approx(2 * s * b * h / tp)


def test_materialized_attention_keeps_table2_score_term() -> None:
    # Table 2 without recompute: + 5·a·s²·b/t (softmax, dropout mask, dropout output).
    model = mha_gpt()
    s, b, a, tp = 1024, 1, 16, 2
    job = TrainingJob(seq_length=s, global_batch_size=b)
    plan = ParallelPlan(tp=tp, sequence_parallel=True)
    unfused = layer_activations(model, job, plan, 0, attention="materialized")
    assert unfused.core_attention_bytes == pytest.approx(5 * a * s * s * b / tp)
    flash = layer_activations(model, job, plan, 0)
    assert flash.core_attention_bytes == pytest.approx(4 * a * s * b / tp)  # fp32 LSE


@pytest.mark.parametrize(
    ("pp", "vpp", "m"), [(1, 1, 4), (2, 1, 1), (4, 1, 2), (4, 1, 16), (4, 2, 8), (2, 4, 4)]
)
def test_stage0_layer_activations_match_megatron_sp_selective(pp: int, vpp: int, m: int) -> None:
    # Megatron's compute_activation_memory: L·34·s·b·h/t, times 1 + (p-1)/(p·v) when
    # interleaved or min(1, m/p) for 1F1B. Ours counts in-flight microbatch-chunks on stage 0
    # exactly and agrees on the layer part.
    model = mha_gpt(num_layers=16)
    s, b, h, t = 1024, 1, 1024, 2
    job = TrainingJob(seq_length=s, global_batch_size=m * b * 2)
    plan = ParallelPlan(
        tp=t,
        pp=pp,
        vpp=vpp,
        dp=2,
        sequence_parallel=True,
        recompute="selective",
        schedule="interleaved" if vpp > 1 else "1f1b",
    )
    factor = 1 + (pp - 1) / (pp * vpp) if vpp > 1 else min(1.0, m / pp) if pp > 1 else 1.0
    expected = 16 * 34 * s * b * h / t * factor
    assert stage0(model, job, plan).activations_bytes == pytest.approx(expected)


def test_megatron_estimator_port_golden() -> None:
    # Megatron's formulas by hand for p = 1 (megatron-facts.md §2.2), V = 50257 padded to a
    # multiple of 128·t = 256: 50432.
    # SP + selective: (34·s·b·h·L + 8·s·b + s·b·h + 4·s·b·h·(1 + V/h)) / t;
    # no SP: (s·b·h·(10 + 24/t)·L + 8·s·b + s·b·h + 2·(s·b·V/t + s·b·h)) x 1.05.
    model = mha_gpt()
    s, b, h, t, layers, vocab = 2048, 1, 1024, 2, 8, 50432
    job = TrainingJob(seq_length=s, global_batch_size=4)
    plan = ParallelPlan(tp=t, dp=4, sequence_parallel=True, recompute="selective")
    sbh = s * b * h
    sp_expected = (34 * sbh * layers + 8 * s * b + sbh + 4 * sbh * (1 + vocab / h)) / t
    assert megatron_theoretical_memory(model, job, plan)[1] == pytest.approx(sp_expected)
    plan = plan.replace(sequence_parallel=False)
    no_sp = (sbh * (10 + 24 / t) * layers + 8 * s * b + sbh + 2 * (s * b * vocab / t + sbh)) * 1.05
    assert megatron_theoretical_memory(model, job, plan)[1] == pytest.approx(no_sp)


def test_deliberate_differences_from_megatron_estimator() -> None:
    """Where ours differs from Megatron's `theoretical_memory_usage.py`, and why.

    - CP: ours divides the activation sequence by cp and shards optimizer state over dp·cp;
      Megatron's estimator ignores cp in both (it counts the whole sequence when cp > 1).
    - GQA: ours keeps K and V at g/a of Q's size; the estimator assumes MHA.
    - SwiGLU: ours keeps gate and up outputs (6·s·b·F); the estimator uses 4·F/h.
    - MoE: ours adds router, routed-expert and dispatch activations.
    - Every stage is modelled, and a framework allowance is added on top.
    """
    job = TrainingJob(seq_length=4096, global_batch_size=16)
    base = ParallelPlan(tp=2, dp=2, sequence_parallel=True, recompute="selective")
    model = mha_gpt()
    with_cp = base.replace(cp=2, distributed_optimizer=True)
    plain = base.replace(distributed_optimizer=True)
    assert stage0(model, job, with_cp).activations_bytes == pytest.approx(
        stage0(model, job, plain).activations_bytes / 2
    )
    assert megatron_theoretical_memory(model, job, with_cp) == megatron_theoretical_memory(
        model, job, plain
    )
    assert stage0(model, job, with_cp).optimizer_bytes < stage0(model, job, plain).optimizer_bytes
    gqa = model.replace(num_query_groups=2)
    assert stage0(gqa, job, base).activations_bytes < stage0(model, job, base).activations_bytes
    assert (
        megatron_theoretical_memory(gqa, job, base)[1]
        == megatron_theoretical_memory(model, job, base)[1]
    )
    swiglu = layer_activations(model.replace(activation="swiglu"), job, base, 0).selective_bytes
    gelu = layer_activations(model, job, base, 0).selective_bytes
    assert swiglu - gelu == pytest.approx(2 * 4096 * 4096 / 2)  # 2 bytes x s·b x F / t
    moe = get_preset("tiny-moe")
    dense = moe.replace(num_experts=0, moe_shared_expert_size=0)
    assert (
        layer_activations(moe, job, base, 0).full_bytes
        > layer_activations(dense, job, base, 0).full_bytes
    )


def test_moe_routed_rows_scale_with_top_k() -> None:
    model = get_preset("tiny-moe")
    job = TrainingJob(seq_length=512, global_batch_size=2)
    plan = ParallelPlan(tp=2, dp=2, ep=2, etp=1, sequence_parallel=True)
    top2 = layer_activations(model, job, plan, 0).full_bytes
    top4 = layer_activations(model.replace(moe_top_k=4), job, plan, 0).full_bytes
    tokens = 512 / 2  # per rank with SP
    # each extra routed row keeps its input (h) plus 3·F_expert of inner activations
    # (SwiGLU), all bf16, and its fp32 routing probability; the combine keeps no copy
    # (Megatron-core unpermutes without probabilities)
    per_row = 2 * (128 + 3 * 128) + 4
    assert top4 - top2 == pytest.approx(2 * tokens * per_row)


def test_fp8_layer_keeps_fp8_gemm_inputs_and_no_masks_without_dropout() -> None:
    # Llama-3-8B shape (h 4096, q 4096, kv 1024, F 14336, 32 heads), tp 1, flash attention,
    # per token (Transformer Engine saves each linear layer's FP8-cast input; no dropout):
    # attention: norm input 2h + QKV input h + Q,K,V,O 2·(2q + 2kv) + FP8 copy of O q
    #            + fp32 log-sum-exp 4·a = 8192 + 4096 + 20480 + 4096 + 128
    # MLP: norm input 2h + fc1 input h + gate/up 2·2F + fc2 input F = 12288 + 71680
    model = get_preset("llama3-8b")
    plan = ParallelPlan(tp=1, dp=8, micro_batch_size=1)
    job = TrainingJob(seq_length=8192, global_batch_size=8, precision="fp8")
    layer = layer_activations(model, job, plan, 0, dropout=False)
    assert layer.full_bytes == 8192 * (8192 + 4096 + 20480 + 4096 + 128 + 12288 + 71680)
    bf16 = layer_activations(model, dataclasses.replace(job, precision="bf16"), plan, 0)
    # bf16 with dropout: QKV/fc1/fc2 inputs in 2 bytes, no separate O copy, two 1-byte masks
    assert bf16.full_bytes - layer.full_bytes == 8192 * (4096 + 4096 + 14336 - 4096 + 2 * 4096)
