"""Field-local checks and derived values of the specs, and the Chrome trace export."""

from __future__ import annotations

import json

import pytest

from specs import ModelSpec, ParallelPlan, SpecError, Timeline, TimelineEvent


def test_model_derived_sizes() -> None:
    m = ModelSpec(
        name="x",
        num_layers=6,
        hidden_size=256,
        num_attention_heads=8,
        num_query_groups=2,
        ffn_hidden_size=512,
        vocab_size=1000,
        num_experts=8,
        moe_layer_freq=2,
        moe_first_dense_layers=1,
    )
    assert m.head_dim == 32 and m.query_groups == 2 and m.is_moe
    # layers after the first dense one alternate MoE / dense, starting with MoE
    assert m.moe_layer_mask() == (False, True, False, True, False, True)
    assert m.num_moe_layers == 3
    assert m.expert_ffn_hidden_size == 512


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"num_query_groups": 3}, "divisible by num_query_groups"),
        ({"hidden_size": 250}, "divisible by num_attention_heads"),
        ({"num_experts": 2, "moe_top_k": 4}, "moe_top_k"),
        ({"kv_lora_rank": 64}, "multi-latent attention needs"),
        ({"activation": "relu"}, "must be one of"),
    ],
)
def test_model_relations(changes: dict, needle: str) -> None:
    base = dict(
        name="x",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=8,
        ffn_hidden_size=512,
        vocab_size=100,
    )
    with pytest.raises(SpecError, match=needle):
        ModelSpec(**(base | changes))


def test_plan_for_world_derives_dp_and_schedule() -> None:
    plan = ParallelPlan.for_world(64, tp=4, pp=4, vpp=2, cp=2)
    assert plan.dp == 2 and plan.world_size == 64 and plan.schedule == "interleaved"
    assert plan.expert_tp == 4
    assert plan.num_microbatches(global_batch_size=64) == 32
    # Megatron's default bucket: max(40M, 1M * dp * cp)
    assert plan.bucket_size_params() == 40_000_000
    assert ParallelPlan.for_world(1024, dp=64, cp=1, tp=16).bucket_size_params() == 64_000_000


def test_plan_for_world_rejects_bad_degrees() -> None:
    with pytest.raises(SpecError, match="tp must be a positive integer"):
        ParallelPlan.for_world(8, tp=0)


def test_expert_dp() -> None:
    # megatron-facts §4.1: t=2, c=1, DP=4, p=2, e=4, et=1 -> EDP=2
    plan = ParallelPlan(tp=2, pp=2, dp=4, ep=4, etp=1)
    assert plan.expert_dp == 2


def test_timeline_chrome_trace() -> None:
    events = (
        TimelineEvent(
            rank=0,
            lane="compute",
            name="F mb0",
            kind="forward",
            start_s=0.0,
            duration_s=0.002,
            microbatch=0,
            chunk=0,
        ),
        TimelineEvent(
            rank=1,
            lane="dp",
            name="ar",
            kind="all_reduce",
            start_s=0.001,
            duration_s=0.0005,
            bytes=4096,
            group="dp",
        ),
    )
    tl = Timeline(source="predicted", events=events, iteration_time_s=0.003)
    trace = json.loads(json.dumps(tl.to_chrome_trace()))
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(s["pid"], s["ts"], s["dur"]) for s in spans] == [(0, 0.0, 2000.0), (1, 1000.0, 500.0)]
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M"}
    assert (1, "dp") in names and (0, "rank 0") in names
    assert tl.total_s(kind="forward") == pytest.approx(0.002)
    assert [e.name for e in tl.for_rank(1)] == ["ar"]


def test_timeline_event_checks() -> None:
    with pytest.raises(SpecError, match="lane"):
        TimelineEvent(rank=0, lane="gpu", name="x", kind="forward", start_s=0, duration_s=1)
    with pytest.raises(SpecError, match="duration_s"):
        TimelineEvent(rank=0, lane="tp", name="x", kind="forward", start_s=0, duration_s=-1)
