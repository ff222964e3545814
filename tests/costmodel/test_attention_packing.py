"""Packed sequences in the Megatron runtime: the attention core priced per document at the
document length's rate, context parallelism per document, DSA's indexer and sparse core over
the document, the refusals, the screen against the simulator."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.attention_core import PACKED_KERNEL_RULE, attention_core_time_s
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, runtime_options
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.megatron.attention_cp import cp_attention_steps
from costmodel.runtimes.megatron.dsa_costs import dsa_core_s, indexer_pair
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.layer_shape import layer_shape
from costmodel.runtimes.torch.runtime import TORCH_PACKED_RULE
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_screen import assert_screen_agrees

H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-8b")  # 32 heads of 128


def job(seq: int, doc: int | None, batch: int = 8) -> TrainingJob:
    return TrainingJob(seq_length=seq, global_batch_size=batch, packed_document_tokens=doc)


def core_s(span: int, tokens: int, seq_kv: int, direction: str, share: float = 1.0) -> float:
    """One flash kernel of the rank: 2·span·a·d causal FLOPs per token, rate at seq_kv."""
    return attention_core_time_s(
        H100,
        causal_forward_flops=2 * span * 32 * 128 * tokens * share,
        batch_heads=32,
        seq_q=tokens,
        seq_kv=seq_kv,
        head_dim=128,
        precision="bf16",
        kernel="flash",
        direction=direction,
    )


def test_the_core_runs_per_document_at_the_documents_rate() -> None:
    plan = ParallelPlan()
    whole = layer_cost(LLAMA, job(16384, None), plan, H100, kind=DENSE_LAYER)
    docs = layer_cost(LLAMA, job(16384, 2048), plan, H100, kind=DENSE_LAYER)
    for name, direction in (("forward", "forward"), ("backward", "backward")):
        expected = core_s(2048, 16384, 2048, direction) - core_s(16384, 16384, 16384, direction)
        got = getattr(docs, name).compute_s - getattr(whole, name).compute_s
        assert got == pytest.approx(expected, rel=1e-9)


def test_ring_cp_splits_each_document_and_moves_the_same_keys() -> None:
    # per-document zigzag (thd_get_partitioned_indices): steps of K/V length L/cp and L/(2cp)
    plan = ParallelPlan(cp=4)
    assert cp_attention_steps(plan, 2048) == ((1 / 4 + 3 / 8, 512), (3 / 8, 256))
    whole = layer_cost(LLAMA, job(16384, None), plan, H100, kind=DENSE_LAYER)
    docs = layer_cost(LLAMA, job(16384, 2048), plan, H100, kind=DENSE_LAYER)
    tokens = 16384 // 4
    expected = sum(
        core_s(2048, tokens, kv, "forward", share)
        - core_s(16384, tokens, kv_whole, "forward", share)
        for (share, kv), (_, kv_whole) in zip(
            cp_attention_steps(plan, 2048), cp_attention_steps(plan, 16384), strict=True
        )
    )
    assert docs.forward.compute_s - whole.forward.compute_s == pytest.approx(expected, rel=1e-9)
    assert docs.forward.cp_bytes == whole.forward.cp_bytes
    assert docs.forward.cp_s == whole.forward.cp_s
    # a step's send hides under a step's (smaller) attention: never less exposed
    assert docs.forward.cp_exposed_s >= whole.forward.cp_exposed_s


def test_a_document_as_long_as_the_sequence_prices_as_unpacked() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plan = ParallelPlan(tp=2, cp=2, dp=2, recompute="selective")
    whole = estimate_plan(LLAMA, cluster, job(8192, None), plan, H100)
    same = estimate_plan(LLAMA, cluster, job(8192, 8192), plan, H100)
    assert same.iteration_time_s == whole.iteration_time_s
    assert same.peak_memory_bytes == whole.peak_memory_bytes
    assert same.mfu == whole.mfu


def test_dsa_indexes_and_selects_within_the_document() -> None:
    glm = get_preset("glm-5.1")  # top-2048 keys
    whole, docs = (
        layer_shape(job(65536, None), ParallelPlan()),
        layer_shape(job(65536, 4096), ParallelPlan()),
    )
    assert docs.span == 4096 and docs.tokens == whole.tokens
    assert indexer_pair(glm, H100, docs)[0] < indexer_pair(glm, H100, whole)[0]
    # L <= k: every earlier key of the document is selected, L/2 per query
    short = layer_shape(job(65536, 2048), ParallelPlan())
    assert dsa_core_s(glm, H100, short)["forward"] < dsa_core_s(glm, H100, whole)["forward"]


def test_the_materialized_kernel_and_the_torch_runtime_refuse_packing() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plan = ParallelPlan(tp=8)
    materialized = dataclasses.replace(DEFAULT_OPTIONS, attention="materialized")
    with pytest.raises(SpecError, match=rf"\[{PACKED_KERNEL_RULE}\].*'materialized'.*'flash'"):
        estimate_plan(LLAMA, cluster, job(4096, 1024), plan, H100, options=materialized)
    with pytest.raises(SpecError, match=rf"\[{TORCH_PACKED_RULE}\].*--runtime megatron"):
        estimate_plan(LLAMA, cluster, job(4096, 1024), plan, H100, options=runtime_options("torch"))


def test_screen_agrees_with_the_simulator_on_packed_jobs() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=32)
    grid = {
        "tp": [1, 2, 8],
        "pp": [1, 2],
        "cp": [1, 2, 4],
        "cp_comm_type": ["p2p", "all_gather"],
        "micro_batch_size": [1, 2],
        "sequence_parallel": [False, True],
        "recompute": ["none", "selective"],
        "distributed_optimizer": [True],
    }
    assert_screen_agrees(LLAMA, cluster, job(16384, 2048, 64), grid, every=5, at_least=15)


def test_screen_and_estimate_count_the_same_packed_model_flops() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    packed = job(16384, 2048, 16)
    plans = [ParallelPlan(tp=2, cp=2, dp=2), ParallelPlan(tp=4, cp=2, dp=1)]
    screened = screen_plans(LLAMA, cluster, packed, H100, plans_frame(plans))
    for row, plan in zip(screened.itertuples(), plans, strict=True):
        est = estimate_plan(LLAMA, cluster, packed, plan, H100)
        flops = row.mfu * row.iteration_time_s
        assert flops == pytest.approx(est.mfu * est.iteration_time_s, rel=1e-12)
