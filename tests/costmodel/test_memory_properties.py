"""Monotonicity properties of memory per rank (costmodel.memory): recomputation, tensor
parallelism, micro-batch size and the distributed optimizer move each term the expected way.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.memory import memory_per_stage
from specs import ModelSpec, ParallelPlan, TrainingJob
from specs.router import RouterSpec


@st.composite
def cases(draw: st.DrawFn) -> tuple[ModelSpec, TrainingJob, ParallelPlan]:
    """A small model (dense or MoE, MHA or GQA) with a plan the memory model accepts."""
    heads = draw(st.sampled_from([4, 8]))
    moe = draw(st.booleans())
    top_k = draw(st.sampled_from([1, 2]))
    model = ModelSpec(
        name="prop",
        num_layers=draw(st.sampled_from([4, 8])),
        hidden_size=draw(st.sampled_from([64, 128, 256])),
        num_attention_heads=heads,
        num_query_groups=draw(st.sampled_from([heads, heads // 2, 1])),
        ffn_hidden_size=draw(st.sampled_from([128, 512])),
        vocab_size=draw(st.integers(100, 5000)),
        activation=draw(st.sampled_from(["swiglu", "gelu"])),
        num_experts=8 if moe else 0,
        moe_top_k=top_k,
        # top-1 routing needs a softmax over all experts (Megatron-core's rule, specs.router)
        router=RouterSpec(moe_router_pre_softmax=top_k == 1),
        moe_ffn_hidden_size=64,
        moe_shared_expert_size=draw(st.sampled_from([0, 64])) if moe else 0,
    )
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 4]))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 and model.num_layers % (2 * pp) == 0 else 1
    dp = draw(st.sampled_from([1, 2]))
    cp = draw(st.sampled_from([1, 2]))
    mbs = draw(st.sampled_from([1, 2]))
    m = 2 * pp * draw(st.integers(1, 3)) if vpp > 1 else draw(st.integers(1, 9))
    plan = ParallelPlan(
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        dp=dp,
        ep=2 if moe and cp * dp % 2 == 0 else 1,  # expert_dp = cp·dp/ep must be whole
        sequence_parallel=tp > 1 and draw(st.booleans()),
        micro_batch_size=mbs,
        schedule="interleaved" if vpp > 1 else "1f1b",
        distributed_optimizer=draw(st.booleans()),
        overlap_grad_reduce=draw(st.booleans()),
    )
    job = TrainingJob(
        seq_length=draw(st.sampled_from([128, 512, 2048])),
        global_batch_size=m * mbs * dp,
        precision=draw(st.sampled_from(["bf16", "fp32"])),
    )
    return model, job, plan


def _activations(model: ModelSpec, job: TrainingJob, plan: ParallelPlan) -> list[float]:
    return [s.activation_total_bytes for s in memory_per_stage(model, job, plan)]


@settings(max_examples=120, deadline=None)
@given(cases(), st.sampled_from(["flash", "materialized"]))
def test_recompute_never_raises_activation_memory(case, attention) -> None:
    # none >= selective >= full, for full recompute with one checkpoint per layer (the
    # default); a larger uniform group rebuilds the whole group at once and can exceed
    # selective on purpose.
    model, job, plan = case
    modes = [
        [
            s.activation_total_bytes
            for s in memory_per_stage(model, job, plan.replace(recompute=mode), attention=attention)
        ]
        for mode in ("none", "selective", "full")
    ]
    for none, selective, full in zip(*modes, strict=True):
        assert none >= selective * (1 - 1e-12)
        assert selective >= full * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_larger_tp_never_raises_weight_memory(case) -> None:
    model, job, plan = case
    wider = plan.replace(tp=plan.tp * 2)
    narrow = memory_per_stage(model, job, plan)
    wide = memory_per_stage(model, job, wider)
    for a, b in zip(narrow, wide, strict=True):
        assert b.weights_bytes <= a.weights_bytes


@settings(max_examples=100, deadline=None)
@given(cases())
def test_memory_grows_with_micro_batch_size(case) -> None:
    model, job, plan = case
    # double the global batch so that both micro-batch sizes give whole microbatch counts
    bigger_job = dataclasses.replace(job, global_batch_size=2 * job.global_batch_size)
    small = memory_per_stage(model, bigger_job, plan)
    large = memory_per_stage(
        model, bigger_job, plan.replace(micro_batch_size=2 * plan.micro_batch_size)
    )
    for a, b in zip(small, large, strict=True):
        assert b.total_bytes >= a.total_bytes * (1 - 1e-12)
        assert b.activation_total_bytes >= a.activation_total_bytes * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_distributed_optimizer_never_raises_optimizer_memory(case) -> None:
    model, job, plan = case
    off = memory_per_stage(model, job, plan.replace(distributed_optimizer=False))
    on = memory_per_stage(model, job, plan.replace(distributed_optimizer=True))
    for a, b in zip(off, on, strict=True):
        assert b.optimizer_bytes <= a.optimizer_bytes
