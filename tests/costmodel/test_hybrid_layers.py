"""Hybrid models' layers in the Megatron runtime (`specs.layer_kinds`): a self-attention
layer and an MLP layer price, save and quantize exactly what the two halves of a
transformer layer do, and the closed-form screen agrees with the simulator on a hybrid
model."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.layer_activations import layer_activations
from costmodel.runtimes.megatron.fp8_scaling import layer_fp8_modules
from costmodel.runtimes.megatron.layer_costs import layer_cost
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, HYBRID_SYMBOLS
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from tests.costmodel.test_screen import HYBRID_GRID, assert_screen_agrees

H100 = load_profile("h100-sxm-80gb")
TRANSFORMER = ModelSpec(
    name="transformer",
    num_layers=8,
    hidden_size=2048,
    num_attention_heads=16,
    num_query_groups=4,
    ffn_hidden_size=8192,
    vocab_size=32000,
)
HYBRID = TRANSFORMER.replace(name="hybrid", hybrid_layer_pattern="M-M*M-M-")
ATTENTION, MLP, MAMBA = HYBRID_SYMBOLS["*"], HYBRID_SYMBOLS["-"], HYBRID_SYMBOLS["M"]
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
NO_HOST = dataclasses.replace(DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)


@pytest.mark.parametrize(
    "plan",
    [
        ParallelPlan(tp=1, micro_batch_size=2),
        ParallelPlan(tp=4, sequence_parallel=True, recompute="full"),
        ParallelPlan(tp=2, sequence_parallel=True, recompute="selective"),
    ],
)
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_attention_and_mlp_layers_sum_to_a_transformer_layer(plan, precision):
    job = dataclasses.replace(JOB, precision=precision)
    whole = layer_cost(HYBRID, job, plan, H100, kind=DENSE_LAYER)
    parts = [layer_cost(HYBRID, job, plan, H100, kind=k) for k in (ATTENTION, MLP)]
    for name in ("forward", "backward", "recompute"):
        summed = getattr(parts[0], name).plus(getattr(parts[1], name))
        assert summed.compute_s == pytest.approx(getattr(whole, name).compute_s, rel=1e-12)
        assert summed.duration_s == pytest.approx(getattr(whole, name).duration_s, rel=1e-12)
    assert parts[0].dgrad_s + parts[1].dgrad_s == pytest.approx(whole.dgrad_s, rel=1e-12)
    assert parts[0].wgrad_s + parts[1].wgrad_s == pytest.approx(whole.wgrad_s, rel=1e-12)


def test_attention_and_mlp_layers_save_a_transformer_layers_tensors():
    plan = ParallelPlan(tp=2, sequence_parallel=True)
    kinds = HYBRID.layer_kinds()
    attention = dict(layer_activations(HYBRID, JOB, plan, kinds.index(ATTENTION)).tensors)
    mlp = dict(layer_activations(HYBRID, JOB, plan, kinds.index(MLP)).tensors)
    whole = dict(layer_activations(TRANSFORMER, JOB, plan, 0).tensors)
    assert not set(attention) & set(mlp)
    assert {**attention, **mlp} == pytest.approx(whole)


def test_fp8_modules_of_hybrid_layers():
    dense = layer_fp8_modules(HYBRID, kind=DENSE_LAYER, ep=1)
    attention = layer_fp8_modules(HYBRID, kind=ATTENTION, ep=1)
    mlp = layer_fp8_modules(HYBRID, kind=MLP, ep=1)
    assert attention.plus(mlp) == dense
    assert layer_fp8_modules(HYBRID, kind=MAMBA, ep=1).modules == 2  # in_proj, out_proj


def test_mamba_layers_are_priced_on_their_own():
    plan = ParallelPlan(tp=2, sequence_parallel=True)
    mamba = layer_cost(HYBRID, JOB, plan, H100, kind=MAMBA)
    attention = layer_cost(HYBRID, JOB, plan, H100, kind=ATTENTION)
    assert mamba.forward.compute_s > 0 and mamba.backward.compute_s > mamba.forward.compute_s
    assert mamba.forward.compute_s != attention.forward.compute_s
    assert layer_cost(HYBRID, JOB, plan, H100, kind=MAMBA).recompute.compute_s == 0.0


def test_screen_agrees_with_the_simulator_on_a_hybrid_model():
    model = HYBRID.replace(num_layers=16, hybrid_layer_pattern="M-M*M-M-" * 2)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    assert_screen_agrees(model, cluster, job, HYBRID_GRID, every=3, at_least=30)
