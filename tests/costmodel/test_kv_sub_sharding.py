"""QKV activation sub-sharding (`specs.kv_sharding`): a layer whose tp exceeds its
key/value heads all-gathers the QKV GEMM's output forward and reduce-scatters its gradient
backward (Megatron-core `SelfAttention.get_query_key_value_tensors`, commit f7dfb99795);
the torch runtime, which prices paraplan's executor, refuses it."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS
from costmodel.runtimes.megatron.layer_costs import layer_passes
from costmodel.runtimes.megatron.layer_shape import intra_groups
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.kv_sharding import EXECUTOR_KV_RULE
from specs.layer_kinds import DENSE_LAYER
from specs.model import ModelSpec
from specs.plan import ParallelPlan

PROFILE = load_profile("h100-sxm-80gb")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
PLAN = ParallelPlan(tp=4, dp=2, sequence_parallel=True)
# Llama-3-8B shapes with 2 key/value heads (Nemotron 3's 32 heads over 2 groups).
TWO_KV = ModelSpec(
    name="two-kv",
    num_layers=8,
    hidden_size=4096,
    num_attention_heads=32,
    num_query_groups=2,
    ffn_hidden_size=14336,
    vocab_size=128256,
    max_position_embeddings=4096,
)
FOUR_KV = TWO_KV.replace(name="four-kv", num_query_groups=4)


def test_sub_sharding_adds_an_exposed_all_gather_and_reduce_scatter() -> None:
    sub = layer_passes(TWO_KV, JOB, PLAN, PROFILE, kind=DENSE_LAYER)
    whole = layer_passes(FOUR_KV, JOB, PLAN, PROFILE, kind=DENSE_LAYER)
    # the gathered QKV output: 4096 tokens x (32 + 2·2) heads x 128 x 2 bytes
    size = 4096 * (32 + 2 * 2) * 128 * 2
    group = intra_groups(PLAN).tp
    gather = collective_time_s(PROFILE, "all_gather", size, group)
    scatter = collective_time_s(PROFILE, "reduce_scatter", size, group)
    assert sub.forward.tp_bytes - whole.forward.tp_bytes == pytest.approx(size, rel=1e-12)
    assert sub.backward.tp_bytes - whole.backward.tp_bytes == pytest.approx(size, rel=1e-12)
    assert sub.forward.tp_s - whole.forward.tp_s == pytest.approx(gather)
    assert sub.backward.tp_s - whole.backward.tp_s == pytest.approx(scatter)
    # both wait on the compute stream (the layer's own dgrad reduce-scatter, which hides
    # under its wgrad GEMM, is held exposed here so that the two layers compare alike)
    exposed = dataclasses.replace(DEFAULT_OPTIONS, tp_dgrad_overlap=False)
    sub = layer_passes(TWO_KV, JOB, PLAN, PROFILE, kind=DENSE_LAYER, options=exposed)
    whole = layer_passes(FOUR_KV, JOB, PLAN, PROFILE, kind=DENSE_LAYER, options=exposed)
    assert sub.forward.tp_exposed_s - whole.forward.tp_exposed_s == pytest.approx(gather)
    assert sub.backward.tp_exposed_s - whole.backward.tp_exposed_s == pytest.approx(scatter)


def test_whole_heads_per_rank_run_no_sub_sharding_collective() -> None:
    # at tp 2 each rank keeps one of the two key/value heads: only the layer's own pair
    plan = ParallelPlan(tp=2, dp=4, sequence_parallel=True)
    passes = layer_passes(TWO_KV, JOB, plan, PROFILE, kind=DENSE_LAYER)
    pair = 4 * 4096 * 4096 * 2  # all-gather + reduce-scatter of [s, h], attention and MLP
    assert passes.forward.tp_bytes == pytest.approx(pair, rel=1e-12)


def test_megatron_prices_it_and_the_torch_runtime_refuses_it() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    estimate = estimate_plan(TWO_KV, cluster, JOB, PLAN, PROFILE)
    assert estimate.iteration_time_s > 0
    with pytest.raises(SpecError, match=EXECUTOR_KV_RULE):
        estimate_plan(TWO_KV, cluster, JOB, PLAN, PROFILE, options=TORCH_OPTIONS)
