"""A LoRA job against the same job training every weight, on the megatron runtime: no
weight-gradient GEMM of the frozen base, the adapters' GEMMs, element-wise work and TP
collectives, no backward of the frozen embedding, and the finalize step's all-reduces gone
(costmodel.runtimes.megatron.lora_costs, layer_costs, vocab_costs, stage_tail); golden
values derived here from the GEMM, memory and collective prices."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.compute import gemm_time_s, memory_bound_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.flops import core_attention_forward_flops_per_token, forward_flops_per_token
from costmodel.fp8_quantization import fp8_cast_bytes_per_element
from costmodel.iteration import simulate_iteration
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.runtimes.megatron.layer_costs import layer_passes
from costmodel.runtimes.megatron.layer_shape import gemm3, intra_groups, layer_shape
from costmodel.runtimes.megatron.vocab_costs import embedding_cost, logits_cost
from costmodel.runtimes.registry import runtime_model
from profiles.store import load_profile
from specs.finetune import LoraSpec, lora_target_features
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-8b")
FULL = TrainingJob(seq_length=4096, global_batch_size=32)
ALL = LoraSpec(rank=16)
QKV = LoraSpec(rank=16, targets=("linear_qkv",))


def lora(spec: LoraSpec = ALL, job: TrainingJob = FULL) -> TrainingJob:
    return dataclasses.replace(job, lora=spec)


def passes(job: TrainingJob, plan: ParallelPlan):
    return layer_passes(LLAMA, job, plan, H100, kind=DENSE_LAYER)


def base_gemms(plan: ParallelPlan) -> list[tuple[float, ...]]:
    """(forward, dgrad, wgrad) seconds of QKV, output projection, FC1 and FC2 on one rank."""
    x = layer_shape(FULL, plan)
    t, h, d = plan.tp, LLAMA.hidden_size, LLAMA.head_dim
    q, kv, ffn = LLAMA.num_attention_heads * d / t, LLAMA.query_groups * d / t, 14336 / t
    shapes = [(x.tokens, q + 2 * kv, h), (x.tokens, h, q), (x.tokens, 2 * ffn, h)]
    return [gemm3(H100, x, *s) for s in [*shapes, (x.tokens, h, ffn)]]


def adapter_gemms(spec: LoraSpec, plan: ParallelPlan) -> list[tuple[float, float, float]]:
    """Every adapter GEMM's (forward, dgrad, wgrad) seconds, by hand: A (T x in) @
    (in x r/tp) and B (T x r) @ (r x out/tp) for a column-parallel base, A (T x in/tp) @
    (in/tp x r) for a row-parallel one, in bf16."""
    tokens, t, r = 4096, plan.tp, spec.rank
    out = []
    for target in spec.targets:
        fan_in, fan_out, column = lora_target_features(LLAMA, target)
        a = (tokens, r // t, fan_in) if column else (tokens, r, fan_in // t)
        for m, n, k in (a, (tokens, fan_out // t, r)):
            out.append(
                (
                    gemm_time_s(H100, m, n, k, "bf16"),
                    gemm_time_s(H100, m, k, n, "bf16"),
                    gemm_time_s(H100, k, n, m, "bf16"),
                )
            )
    return out


def elementwise_s(spec: LoraSpec) -> tuple[float, float]:
    """(forward, backward) of every adapter's scale (read and write) and add (read 2, write
    1) over the base output, tp 1: T x out bf16 elements."""
    fwd = bwd = 0.0
    for target in spec.targets:
        out = 4096 * lora_target_features(LLAMA, target)[1]
        scale = memory_bound_time_s(H100, 2 * 2 * out)
        fwd += scale + memory_bound_time_s(H100, 3 * 2 * out)
        bwd += scale
    return fwd, bwd


def test_frozen_layers_run_no_wgrad_and_the_adapters_run_all_three_gemms():
    plan = ParallelPlan()
    full, tuned = passes(FULL, plan), passes(lora(), plan)
    base = base_gemms(plan)
    adapters = adapter_gemms(ALL, plan)
    assert full.wgrad_s == pytest.approx(sum(g[2] for g in base))
    assert tuned.wgrad_s == pytest.approx(sum(g[2] for g in adapters))
    ew_f, ew_b = elementwise_s(ALL)
    extra_forward = sum(g[0] for g in adapters) + ew_f
    assert tuned.forward.compute_s - full.forward.compute_s == pytest.approx(extra_forward)
    dgrad = sum(g[1] for g in adapters) + ew_b
    assert tuned.dgrad_s - full.dgrad_s == pytest.approx(dgrad)
    base_wgrad = sum(g[2] for g in base)
    expected = full.backward.compute_s - base_wgrad + dgrad + tuned.wgrad_s
    assert tuned.backward.compute_s == pytest.approx(expected)


def test_the_mlp_adapters_are_rerun_with_the_mlp_module():
    plan = ParallelPlan()
    full, tuned = passes(FULL, plan), passes(lora(), plan)
    fc = LoraSpec(rank=16, targets=("linear_fc1", "linear_fc2"))
    ew_f, _ = elementwise_s(fc)
    extra = sum(g[0] for g in adapter_gemms(fc, plan)) + ew_f
    assert tuned.rerun["mlp"].compute_s - full.rerun["mlp"].compute_s == pytest.approx(extra)
    assert tuned.rerun["core_attn"] == full.rerun["core_attn"]


def test_adapter_collectives_over_tensor_parallelism():
    # QKV's adapter, tp 2 without SP: forward all-gather of A's output (T x r), backward
    # all-reduce of B's input gradient (T x r) and of A's input gradient (T x h); bf16.
    plan = ParallelPlan(tp=2)
    full, tuned = passes(FULL, plan), passes(lora(QKV), plan)
    low, wide = 2 * 4096 * 16, 2 * 4096 * LLAMA.hidden_size
    assert tuned.forward.tp_bytes - full.forward.tp_bytes == pytest.approx(low)
    assert tuned.backward.tp_bytes - full.backward.tp_bytes == pytest.approx(low + wide)
    g = intra_groups(plan).tp
    expected = collective_time_s(H100, "all_gather", low, g)
    assert tuned.forward.tp_s - full.forward.tp_s == pytest.approx(expected)
    # the frozen pair's input-gradient reduction has no wgrad GEMM to hide under
    assert tuned.backward.tp_exposed_s > full.backward.tp_exposed_s


def test_frozen_embedding_has_no_backward_and_the_output_layer_no_wgrad():
    plan = ParallelPlan()
    x = layer_shape(FULL, plan)
    assert embedding_cost(LLAMA, lora(), plan, H100)[1].duration_s == 0.0
    assert embedding_cost(LLAMA, FULL, plan, H100)[1].duration_s > 0.0
    vocab = 128256  # padded to 128 x tp = 128: already a multiple
    wgrad = gemm3(H100, x, x.tokens, vocab, LLAMA.hidden_size)[2]
    full_b = logits_cost(LLAMA, FULL, plan, H100)[1].compute_s
    assert logits_cost(LLAMA, lora(), plan, H100)[1].compute_s == pytest.approx(full_b - wgrad)


def test_fp8_frozen_casts_write_one_copy_and_a_returned_norm_is_unfused():
    # one FP8 byte per element fewer for a copy no wgrad reads; delayed scaling's fused norm
    # writes its row-wise copy (1 byte for e = 2) and skips the transpose
    assert fp8_cast_bytes_per_element(2, recipe="tensorwise", copies=1) == 3
    assert fp8_cast_bytes_per_element(2, recipe="tensorwise") == 4
    assert fp8_cast_bytes_per_element(2, recipe="delayed", norm="fused") == 1
    assert fp8_cast_bytes_per_element(2, recipe="delayed", norm="fused", copies=1) == 0
    assert fp8_cast_bytes_per_element(2, recipe="nvfp4", copies=1) == 2.5625
    plan = ParallelPlan()
    fp8 = dataclasses.replace(FULL, precision="fp8")
    frozen = passes(lora(LoraSpec(rank=16, targets=("linear_proj",)), fp8), plan)
    returned = passes(lora(QKV, fp8), plan)
    # the returned QKV norm output is quantized on the separate path (e + 1 bytes) instead
    # of the fused delayed kernel's (1 - e, clamped to 0): 3 bytes per element more
    norm = memory_bound_time_s(H100, 3 * 4096 * LLAMA.hidden_size)
    qkv_adapter = sum(g[0] for g in adapter_gemms(QKV, plan)) + elementwise_s(QKV)[0]
    proj_adapter = LoraSpec(rank=16, targets=("linear_proj",))
    proj_extra = sum(g[0] for g in adapter_gemms(proj_adapter, plan))
    proj_extra += elementwise_s(proj_adapter)[0]
    difference = returned.forward.compute_s - frozen.forward.compute_s
    assert difference == pytest.approx(norm + qkv_adapter - proj_extra, rel=1e-6)


def test_lora_model_flops_count_frozen_gemms_twice_and_the_rest_three_times():
    seq, batch = 4096, 32
    core = LLAMA.num_layers * core_attention_forward_flops_per_token(LLAMA, seq)
    frozen = forward_flops_per_token(LLAMA, seq) - core
    adapters = LLAMA.num_layers * 2 * 16 * (4096 + 6144)  # 2 FLOPs per adapter parameter
    per_token = 2 * frozen + 3 * (core + adapters)
    flops = model_flops_per_iteration(LLAMA, seq, batch, QKV)
    assert flops == pytest.approx(per_token * seq * batch)
    assert flops < model_flops_per_iteration(LLAMA, seq, batch)


def test_the_tail_reduces_and_steps_the_adapters_only():
    # tp 2 with SP, pp 2, tied embeddings (tiny): full training all-reduces the tied
    # embedding and the SP norms after the pipeline; a LoRA job has no such gradients
    model = get_preset("tiny").replace(tied_embeddings=True)
    plan = ParallelPlan.for_world(8, tp=2, pp=2, sequence_parallel=True, distributed_optimizer=True)
    job = TrainingJob(seq_length=256, global_batch_size=8)
    runtime = runtime_model(DEFAULT_OPTIONS)
    full = simulate_iteration(model, job, plan, H100, runtime=runtime)
    tuned = simulate_iteration(model, lora(LoraSpec(rank=8), job), plan, H100, runtime=runtime)
    names = {e[0] for tail in full.tails for e in tail.dp_events}
    assert "embedding all_reduce" in names and full.tails[0].norm_allreduce_s > 0
    tuned_names = {e[0] for tail in tuned.tails for e in tail.dp_events}
    assert "embedding all_reduce" not in tuned_names
    assert all(tail.norm_allreduce_s == 0 for tail in tuned.tails)
    # tiny: h 128, q 128, kv 2 x 32, SwiGLU F 256; rank 8 on all four targets
    per_layer = 8 * ((128 + 256) + (128 + 128) + (128 + 512) + (256 + 128))
    for chunks in tuned.chunks:  # two layers per stage, each adapter split over tp 2
        for chunk in chunks:
            assert chunk.dense_params == pytest.approx(2 * per_layer / 2)
            assert chunk.expert_params == 0
