"""Memory of the framework's conventions: what the loss keeps of the logits under each
cross-entropy implementation (costmodel.vocab_activations.logits_element_bytes,
ExecutionOptions.cross_entropy_fusion) and the allocator's expandable segments
(ExecutionOptions.expandable_segments)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel.activations import in_flight_chunk_counts, stage_activations
from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021
from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import NO_ALLOWANCE
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.screen import screen_plans
from costmodel.vocab_activations import logits_element_bytes, output_microbatch_bytes
from profiles.store import load_profile
from specs import ParallelPlan, SpecError, TrainingJob
from specs.cluster import ClusterSpec
from specs.params import padded_vocab_size
from specs.presets import get_preset

LLAMA = get_preset("llama3-8b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")


def _logits_elements(plan: ParallelPlan, job: TrainingJob = JOB) -> float:
    """Logits elements of one microbatch on one TP rank (padded vocabulary over tp)."""
    tokens = plan.micro_batch_size * job.seq_length / plan.cp
    return tokens * padded_vocab_size(LLAMA.vocab_size, plan.tp) / plan.tp


@pytest.mark.parametrize(
    ("fusion", "element_bytes", "expected"),
    [
        # .float() copy saved; the bf16 logits exist beside it only while the loss runs
        ("unfused", 2, (4, 2)),
        ("native", 2, (4, 2)),
        # fp32 logits: .float() returns the tensor itself, exp and division run in place
        ("unfused", 4, (4, 0)),
        # TE <= 2.17: gradient written into the logits' storage, which is what is saved
        ("te", 2, (2, 0)),
        # TE >= 2.18: a new fp32 gradient buffer is saved; the logits live while it is written
        ("te_fp32_grad", 2, (4, 2)),
    ],
)
def test_logits_bytes_per_element(fusion, element_bytes, expected) -> None:
    assert logits_element_bytes(fusion, element_bytes) == expected


def test_te_loss_keeps_no_fp32_copy_of_the_logits() -> None:
    plan = ParallelPlan(tp=2, sequence_parallel=True, dp=4)
    (unfused,) = memory_per_stage(LLAMA, JOB, plan, allowance=NO_ALLOWANCE)
    (te,) = memory_per_stage(LLAMA, JOB, plan, allowance=NO_ALLOWANCE, cross_entropy="te")
    logits = _logits_elements(plan)
    # unfused: 4 B kept + 2 B transient per logit; te: the 2 B logits only
    assert unfused.output_activations_bytes - te.output_activations_bytes == pytest.approx(
        4 * logits
    )
    assert unfused.activations_bytes == te.activations_bytes


def test_last_stage_keeps_the_loss_per_microbatch_and_one_transient() -> None:
    plan = ParallelPlan(pp=4, vpp=2, dp=2)
    m = plan.num_microbatches(JOB.global_batch_size)
    held = in_flight_chunk_counts(4, 2, 3, m)[-1]
    kept, transient = output_microbatch_bytes(LLAMA, JOB, plan, "unfused")
    last = stage_activations(LLAMA, JOB, plan, 3)
    assert last.output_bytes == pytest.approx(held * kept + transient)
    assert transient == pytest.approx(2 * _logits_elements(plan))


def test_runtime_prices_the_options_loss() -> None:
    plan = ParallelPlan(dp=8)
    te = dataclasses.replace(DEFAULT_OPTIONS, cross_entropy_fusion="te")
    (default,) = MegatronRuntime(options=DEFAULT_OPTIONS).memory(LLAMA, JOB, plan)
    (fused,) = MegatronRuntime(options=te).memory(LLAMA, JOB, plan)
    assert fused.output_activations_bytes < default.output_activations_bytes
    assert MEGATRON_2021.cross_entropy_fusion == "unfused"
    with pytest.raises(SpecError, match="cross_entropy_fusion"):
        ExecutionOptions(cross_entropy_fusion="liger")


def test_screen_memory_follows_the_loss_implementation() -> None:
    model = LLAMA
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    profile = load_profile("h100-sxm-80gb")
    plans = [
        ParallelPlan.for_world(16, tp=2, pp=2, sequence_parallel=True),
        ParallelPlan.for_world(16, pp=4, vpp=2),
    ]
    te = dataclasses.replace(DEFAULT_OPTIONS, cross_entropy_fusion="te")
    screened = screen_plans(model, cluster, job, profile, plans_frame(plans), options=te)
    simulated = [estimate_plan(model, cluster, job, p, profile, options=te) for p in plans]
    error = screened["peak_memory_bytes"].to_numpy() / [e.peak_memory_bytes for e in simulated]
    assert np.allclose(error, 1.0, rtol=1e-3)


def test_runtime_and_screen_price_expandable_segments() -> None:
    plan = ParallelPlan(dp=8)
    expandable = dataclasses.replace(DEFAULT_OPTIONS, expandable_segments=True)
    (default,) = MegatronRuntime(options=DEFAULT_OPTIONS).memory(LLAMA, JOB, plan)
    (fewer,) = MegatronRuntime(options=expandable).memory(LLAMA, JOB, plan)
    assert fewer.framework_bytes < default.framework_bytes
    assert (
        fewer.total_bytes - fewer.framework_bytes == default.total_bytes - default.framework_bytes
    )
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    profile = load_profile("h100-sxm-80gb")
    plans = [ParallelPlan.for_world(16, pp=4, vpp=2), ParallelPlan.for_world(16, tp=2, pp=2)]
    screened = screen_plans(LLAMA, cluster, JOB, profile, plans_frame(plans), options=expandable)
    simulated = [estimate_plan(LLAMA, cluster, JOB, p, profile, options=expandable) for p in plans]
    error = screened["peak_memory_bytes"].to_numpy() / [e.peak_memory_bytes for e in simulated]
    assert np.allclose(error, 1.0, rtol=1e-3)
