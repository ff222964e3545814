"""Device memory of per-layer CUDA graphs (costmodel.cuda_graph_memory): the static input
copies of the chunk inputs a stage receives, per in-flight microbatch, in memory_per_stage,
the runtime, the closed-form screen and the estimate's JSON."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel.cuda_graph_memory import captures_layer_input, graph_input_copy_bytes
from costmodel.estimate import estimate_plan, estimate_to_json
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.memory import memory_per_stage
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.cluster import ClusterSpec
from specs.layer_kinds import DENSE_LAYER, HYBRID_SYMBOLS, MOE_LAYER
from specs.model import ModelSpec
from specs.presets import get_preset

LLAMA = get_preset("llama3-8b")
JOB = TrainingJob(seq_length=4096, global_batch_size=8, precision="bf16")
MiB = 2**20
# one [s, b, h/tp] bf16 chunk input with sp: 2 bytes · 4096 tokens · 4096 / tp 2 = 16 MiB
BOUNDARY_TP2_BYTES = 16 * MiB
LAYER = frozenset({"layer"})
ATTN = frozenset({"attn"})
HYBRID = ModelSpec(
    name="hybrid",
    num_layers=8,
    hidden_size=2048,
    num_attention_heads=16,
    num_query_groups=4,
    ffn_hidden_size=8192,
    vocab_size=32000,
    hybrid_layer_pattern="M-M-*-M-",
)


@pytest.mark.parametrize(
    ("kind", "scopes", "captured"),
    [
        (DENSE_LAYER, LAYER, True),
        (DENSE_LAYER, ATTN, True),
        # the MLP of a transformer layer takes the attention's output, not the layer input
        (DENSE_LAYER, frozenset({"mlp"}), False),
        (MOE_LAYER, frozenset({"moe_router", "moe_preprocess"}), False),
        (HYBRID_SYMBOLS["M"], frozenset({"mamba"}), True),
        (HYBRID_SYMBOLS["M"], ATTN, False),
        # a hybrid MLP or expert layer starts with its feed-forward part
        (HYBRID_SYMBOLS["-"], frozenset({"mlp"}), True),
        (HYBRID_SYMBOLS["E"], frozenset({"moe_router"}), True),
        (HYBRID_SYMBOLS["G"], ATTN, False),
        (HYBRID_SYMBOLS["G"], LAYER, True),
    ],
)
def test_which_scopes_copy_the_layer_input(kind, scopes, captured) -> None:
    assert captures_layer_input(kind, scopes) is captured


def test_1f1b_stages_copy_each_received_input() -> None:
    # 1F1B, pp 4, m 8: stage r holds min(pp - r, m) microbatches = 4, 3, 2, 1; stage 0
    # receives nothing (its chunk input is the embedding output, freed after the copy)
    plan = ParallelPlan(tp=2, pp=4, sequence_parallel=True)
    copies = [graph_input_copy_bytes(LLAMA, JOB, plan, r, LAYER) for r in range(4)]
    assert copies == [0.0, 3 * BOUNDARY_TP2_BYTES, 2 * BOUNDARY_TP2_BYTES, BOUNDARY_TP2_BYTES]


def test_interleaved_stage0_copies_its_later_chunks_only() -> None:
    # pp 2, vpp 2, m 8. Stage 0: warmup 2·(2 - 0 - 1) + (2 - 1)·2 = 4 forwards, held 5,
    # forward k runs chunk (k // 2) % 2: chunks 0, 0, 1, 1, 0 -> (3, 2); only chunk 1
    # receives: 2 copies. Stage 1: warmup 2, held 3: chunks 0, 0, 1 -> (2, 1), all
    # received: 3 copies.
    plan = ParallelPlan(tp=2, pp=2, vpp=2, sequence_parallel=True)
    copies = [graph_input_copy_bytes(LLAMA, JOB, plan, r, ATTN) for r in range(2)]
    assert copies == [2 * BOUNDARY_TP2_BYTES, 3 * BOUNDARY_TP2_BYTES]


def test_boundary_follows_cp_and_sequence_parallelism() -> None:
    # tp 2 without sp, cp 2, mbs 2: 2 bytes · (2 · 4096 / 2) tokens · 4096 = 32 MiB per copy;
    # m = 8 / (2 · 1) = 4, stage 1 of pp 2 holds 1
    plan = ParallelPlan(tp=2, pp=2, cp=2, micro_batch_size=2)
    assert graph_input_copy_bytes(LLAMA, JOB, plan, 1, LAYER) == 32 * MiB


@pytest.mark.parametrize(
    ("plan", "scopes"),
    [
        (ParallelPlan(tp=2, sequence_parallel=True), LAYER),  # pp 1: nothing received
        (ParallelPlan(tp=2, pp=4, sequence_parallel=True), frozenset()),
        (ParallelPlan(tp=2, pp=4, sequence_parallel=True), frozenset({"full_iteration"})),
        (ParallelPlan(tp=2, pp=4, sequence_parallel=True), frozenset({"mlp"})),
    ],
)
def test_no_copies_without_a_received_captured_input(plan, scopes) -> None:
    assert all(graph_input_copy_bytes(LLAMA, JOB, plan, r, scopes) == 0 for r in range(plan.pp))


def test_hybrid_chunks_follow_their_first_layer() -> None:
    # pp 2 splits "M-M-*-M-" into "M-M-" and "*-M-": stage 1 starts with attention;
    # m = 8, 1F1B stage 1 holds 1 microbatch. tp 1: 2 · 4096 · 2048 bytes = 16 MiB.
    plan = ParallelPlan(pp=2)
    assert graph_input_copy_bytes(HYBRID, JOB, plan, 1, ATTN) == 16 * MiB
    assert graph_input_copy_bytes(HYBRID, JOB, plan, 1, frozenset({"mamba"})) == 0.0


def test_memory_per_stage_adds_the_copies_as_their_own_part() -> None:
    plan = ParallelPlan(tp=2, pp=4, sequence_parallel=True)
    eager = memory_per_stage(LLAMA, JOB, plan)
    graphed = memory_per_stage(LLAMA, JOB, plan, cuda_graph_scopes=LAYER)
    for before, after in zip(eager, graphed, strict=True):
        expected = graph_input_copy_bytes(LLAMA, JOB, plan, before.pp_rank, LAYER)
        assert after.cuda_graph_bytes == expected
        assert after.total_bytes == pytest.approx(before.total_bytes + expected, rel=1e-12)
        assert dataclasses.replace(after, cuda_graph_bytes=0.0) == before


def test_runtime_passes_the_options_scopes() -> None:
    plan = ParallelPlan(tp=2, pp=4, sequence_parallel=True)
    options = dataclasses.replace(DEFAULT_OPTIONS, cuda_graph_scopes=ATTN)
    stages = MegatronRuntime(options=options).memory(LLAMA, JOB, plan)
    assert [s.cuda_graph_bytes for s in stages] == [
        graph_input_copy_bytes(LLAMA, JOB, plan, r, ATTN) for r in range(4)
    ]


def test_screen_and_estimate_agree_and_json_shows_the_part() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    profile = load_profile("h100-sxm-80gb")
    job = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")
    options = dataclasses.replace(DEFAULT_OPTIONS, cuda_graph_scopes=LAYER)
    plans = [
        ParallelPlan.for_world(16, pp=4, vpp=2),
        ParallelPlan.for_world(16, tp=2, pp=2, sequence_parallel=True),
        ParallelPlan.for_world(16, tp=2),
    ]
    screened = screen_plans(LLAMA, cluster, job, profile, plans_frame(plans), options=options)
    simulated = [estimate_plan(LLAMA, cluster, job, p, profile, options=options) for p in plans]
    error = screened["peak_memory_bytes"].to_numpy() / [e.peak_memory_bytes for e in simulated]
    assert np.allclose(error, 1.0, rtol=1e-3)
    piped, single = estimate_to_json(simulated[0]), estimate_to_json(simulated[2])
    assert piped["memory"][1]["parts"]["cuda_graph"] > 0
    assert "cuda_graph" not in single["memory"][0]["parts"]
