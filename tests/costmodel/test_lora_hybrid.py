"""A LoRA job on a dense hybrid Mamba-2 model (Megatron-Bridge's Nemotron-H targets): each
layer kind adapts the targets it holds, a Mamba-2 layer's frozen in_proj and out_proj run
no weight-gradient GEMM while their adapters run all three GEMMs, the adapters' parameters,
saved tensors and FLOPs follow the layer kinds, and the screen agrees with the simulator
(costmodel.runtimes.megatron.lora_costs, mamba_costs, layer_costs, mamba_activations,
rank_params, flops); golden values derived here from the GEMM and byte prices."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute import gemm_time_s, memory_bound_time_s
from costmodel.flops import core_attention_forward_flops_per_token, forward_flops_per_token
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.layer_activations import layer_activations
from costmodel.rank_params import stage_params
from costmodel.runtimes.megatron.layer_costs import layer_passes
from costmodel.runtimes.megatron.layer_shape import gemm3, layer_shape
from costmodel.runtimes.megatron.mamba_costs import projection_shapes
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.finetune import LORA_TARGETS, LoraSpec, lora_target_features
from specs.job import TrainingJob
from specs.layer_kinds import HYBRID_SYMBOLS
from specs.params import lora_layer_params
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_hybrid_layers import HYBRID
from tests.costmodel.test_screen import HYBRID_GRID, assert_screen_agrees

H100 = load_profile("h100-sxm-80gb")
NEMOTRON_H = get_preset("nemotron-h-8b")
FULL = TrainingJob(seq_length=4096, global_batch_size=32)
SIX = LoraSpec(rank=16, targets=LORA_TARGETS)
"""Megatron-Bridge's Nemotron-H PEFT target_modules (recipes/nemotronh/h100/nemotronh.py)."""
TUNED = dataclasses.replace(FULL, lora=SIX)
ATTENTION, MLP, MAMBA = HYBRID_SYMBOLS["*"], HYBRID_SYMBOLS["-"], HYBRID_SYMBOLS["M"]
T, H, INNER = 4096, 4096, 8192  # tokens of one microbatch, hidden, d_inner = 128 heads x 64


def adapter_gemms(targets: tuple[str, ...]) -> list[tuple[float, float, float]]:
    """(forward, dgrad, wgrad) seconds of every adapter GEMM at tp 1 in bf16, by hand:
    A (T x in) @ (in x r), B (T x r) @ (r x out)."""
    out = []
    for target in targets:
        fan_in, fan_out, _ = lora_target_features(NEMOTRON_H, target)
        for m, n, k in ((T, 16, fan_in), (T, fan_out, 16)):
            out.append(
                (
                    gemm_time_s(H100, m, n, k, "bf16"),
                    gemm_time_s(H100, m, k, n, "bf16"),
                    gemm_time_s(H100, k, n, m, "bf16"),
                )
            )
    return out


def elementwise_s(targets: tuple[str, ...]) -> tuple[float, float]:
    """(forward, backward) of each adapter's scale (read, write) and add (read 2, write 1)
    over the base output's T x out bf16 elements."""
    fwd = bwd = 0.0
    for target in targets:
        out = T * lora_target_features(NEMOTRON_H, target)[1]
        scale = memory_bound_time_s(H100, 2 * 2 * out)
        fwd, bwd = fwd + scale + memory_bound_time_s(H100, 3 * 2 * out), bwd + scale
    return fwd, bwd


def test_a_frozen_mamba_layer_runs_no_base_wgrad_and_its_adapters_all_three_gemms() -> None:
    plan = ParallelPlan()
    full = layer_passes(NEMOTRON_H, FULL, plan, H100, kind=MAMBA)
    tuned = layer_passes(NEMOTRON_H, TUNED, plan, H100, kind=MAMBA)
    x = layer_shape(FULL, plan)
    base = [gemm3(H100, x, *shape) for shape in projection_shapes(NEMOTRON_H, x)]
    adapters = adapter_gemms(("in_proj", "out_proj"))
    assert full.wgrad_s == pytest.approx(sum(g[2] for g in base))
    assert tuned.wgrad_s == pytest.approx(sum(g[2] for g in adapters))
    ew_f, ew_b = elementwise_s(("in_proj", "out_proj"))
    extra_forward = sum(g[0] for g in adapters) + ew_f
    assert tuned.forward.compute_s - full.forward.compute_s == pytest.approx(extra_forward)
    dgrad = sum(g[1] for g in adapters) + ew_b
    assert tuned.dgrad_s - full.dgrad_s == pytest.approx(dgrad)
    assert tuned.rerun == {}  # no selective recompute module covers the mixer


@pytest.mark.parametrize(
    ("kind", "targets"),
    [
        (ATTENTION, ("linear_qkv", "linear_proj")),
        (MLP, ("linear_fc1", "linear_fc2")),
    ],
)
def test_attention_and_mlp_layers_adapt_their_own_targets_only(kind, targets) -> None:
    plan = ParallelPlan()
    tuned = layer_passes(NEMOTRON_H, TUNED, plan, H100, kind=kind)
    assert tuned.wgrad_s == pytest.approx(sum(g[2] for g in adapter_gemms(targets)))
    own = dataclasses.replace(TUNED, lora=LoraSpec(rank=16, targets=targets))
    assert layer_passes(NEMOTRON_H, own, plan, H100, kind=kind) == tuned


def test_a_mamba_layer_without_mamba_targets_prices_its_frozen_base_alone() -> None:
    plan = ParallelPlan()
    default = dataclasses.replace(FULL, lora=LoraSpec(rank=16))  # the four transformer targets
    tuned = layer_passes(NEMOTRON_H, default, plan, H100, kind=MAMBA)
    full = layer_passes(NEMOTRON_H, FULL, plan, H100, kind=MAMBA)
    assert tuned.wgrad_s == 0.0
    assert tuned.forward == full.forward


def mamba_layer() -> int:
    return NEMOTRON_H.layer_kinds().index(MAMBA)


def test_mamba_saved_tensors_under_lora() -> None:
    plan = ParallelPlan()
    full = dict(layer_activations(NEMOTRON_H, FULL, plan, mamba_layer()).tensors)
    tuned = dict(layer_activations(NEMOTRON_H, TUNED, plan, mamba_layer()).tensors)
    assert full["in_proj_input"] == tuned["in_proj_input"] == 2 * T * H  # shared with A
    assert full["out_proj_input"] == tuned["out_proj_input"] == 2 * T * INNER  # A's input
    assert tuned["in_proj_adapter"] == tuned["out_proj_adapter"] == 2 * T * 16
    assert "qkv_adapter" not in tuned and "fc1_adapter" not in tuned
    default = dataclasses.replace(FULL, lora=LoraSpec(rank=16))
    frozen = dict(layer_activations(NEMOTRON_H, default, plan, mamba_layer()).tensors)
    assert frozen["in_proj_input"] == frozen["out_proj_input"] == 0  # no wgrad, no adapter
    assert "in_proj_adapter" not in frozen
    sp = ParallelPlan.for_world(2, tp=2, sequence_parallel=True)
    fp8 = dataclasses.replace(TUNED, precision="fp8")
    kept = dict(layer_activations(NEMOTRON_H, fp8, sp, mamba_layer()).tensors)
    # the adapter's gathered 16-bit norm output plus the base's FP8 copy of T/tp tokens
    assert kept["in_proj_input"] == 2 * T * H + T * H / 2
    assert kept["out_proj_input"] == 2 * T * INNER / 2


def test_stage_params_hold_each_layer_kinds_adapters() -> None:
    plan = ParallelPlan.for_world(8, tp=2, distributed_optimizer=True)
    kinds = NEMOTRON_H.layer_kinds()
    counts = {kind: kinds.count(kind) for kind in (MAMBA, ATTENTION, MLP)}
    assert counts == {MAMBA: 24, ATTENTION: 4, MLP: 24}  # M-M-M-M*-... (preset_hybrid.py)
    per_kind = {kind: lora_layer_params(NEMOTRON_H, SIX, kind) for kind in counts}
    expected = sum(counts[kind] * per_kind[kind] for kind in counts) / 2
    assert stage_params(NEMOTRON_H, plan, 0, SIX).adapter == pytest.approx(expected)
    assert per_kind[MAMBA] == 559_104  # tests/specs/test_finetune.py, by hand


def test_lora_model_flops_count_the_ssd_scan_and_adapters_three_times() -> None:
    s = 4096
    kinds = NEMOTRON_H.layer_kinds()
    core = kinds.count(ATTENTION) * core_attention_forward_flops_per_token(NEMOTRON_H, s)
    scans = kinds.count(MAMBA) * 7 * 2 * H * 128  # Megatron mamba_layer_flops, 7·d·N, d = 2h
    adapters = 2 * sum(lora_layer_params(NEMOTRON_H, SIX, kind) for kind in kinds)
    frozen = forward_flops_per_token(NEMOTRON_H, s) - core - scans
    per_token = 2 * frozen + 3 * (core + scans + adapters)
    assert model_flops_per_iteration(NEMOTRON_H, s, 8, SIX) == pytest.approx(per_token * s * 8)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_screen_agrees_with_the_simulator_on_lora_on_a_hybrid_model(precision: str) -> None:
    model = HYBRID.replace(num_layers=16, hybrid_layer_pattern="M-M*M-M-" * 2)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64, precision=precision, lora=SIX)
    assert_screen_agrees(model, cluster, job, HYBRID_GRID, every=3, at_least=30)
